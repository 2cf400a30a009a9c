"""The ``ray_host_memory`` family: its declarations, the hooks that start and stop the
process's monitor, and its settings."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import rlmetrics_ray.host_memory as family
import rlmetrics_ray.nvml
from ray_support import WAIT_S, ExpositionServer, node_info, render_exposition, wait_until
from rlmetrics_ray import HostMemorySettings, active_monitor, configure, settings
from rlmetrics_ray.config import ENABLED_ENV, GPUS_ENV, INTERVAL_ENV, TIMEOUT_ENV
from rlmetrics_ray.host_memory import GROUP, MAX_HOSTS, TOTAL, USED, in_ray_worker
from rlmetrics_ray.nodes import loopback_metrics_url
from rlmetrics_ray.nvml import no_nvidia_driver

import rlmetrics
from rlmetrics.testing import (
    OtlpReceiver,
    in_memory_telemetry,
    isolated_state,
    own_records,
    points,
)

GiB = 1024**3
RAY_INSTALLED = importlib.util.find_spec("ray") is not None


def test_the_family_declares_two_observable_byte_gauges() -> None:
    declared = {
        item.spec.name: item.spec
        for item in rlmetrics.default_registry().declared()
        if item.group == GROUP
    }
    assert set(declared) == {USED, TOTAL}
    for spec in declared.values():
        assert spec.kind is rlmetrics.Kind.OBSERVABLE_GAUGE
        assert spec.unit == "By"
        assert dict(spec.attributes) == {
            "host.name": None,
            "rl.worker_groups": None,
            "rl.host.memory.source": frozenset({"host", "cgroup"}),
        }
        assert spec.max_series == MAX_HOSTS >= 256


def test_the_plugin_is_an_entry_point_with_its_hooks_and_both_series() -> None:
    from rlmetrics.plugins import load_plugins

    with isolated_state():
        info = load_plugins().info("ray_host_memory")
    assert info is not None
    assert (info.status, info.distribution) == ("loaded", "rlmetrics-ray")
    assert set(info.hooks) == {"register_variables", "telemetry_started", "telemetry_stopping"}
    assert set(info.series) == {USED, TOTAL}


def test_loading_the_plugin_imports_neither_ray_nor_aiohttp_nor_the_sdk() -> None:
    # Every process that uses rlmetrics imports the family module, telemetry or not.
    code = (
        "import sys, rlmetrics_ray, rlmetrics_ray.host_memory\n"
        "heavy = ['ray', 'aiohttp', 'prometheus_client', 'opentelemetry.sdk']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def one_host(server: ExpositionServer) -> list[dict[str, Any]]:
    return [node_info("a" * 56, "gpu-1", server.port)]


def test_exporting_starts_a_monitor_and_shutdown_stops_it() -> None:
    server = ExpositionServer(render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    try:
        configure(nodes=lambda: one_host(server), interval_s=3600.0)
        with isolated_state(), in_memory_telemetry() as (handle, reader):
            monitor = active_monitor()
            assert monitor is not None and monitor.running
            assert monitor.wait_for_cycles(1, WAIT_S)
            assert {p.name for p in points(reader)} >= {USED, TOTAL}
            handle.shutdown()
            assert not monitor.running
    finally:
        server.close()


def test_the_final_export_still_carries_the_last_snapshot() -> None:
    server = ExpositionServer(render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    receiver = OtlpReceiver().start()
    try:
        configure(nodes=lambda: one_host(server), interval_s=3600.0)
        with isolated_state():
            handle = rlmetrics.start(
                exporters=["otlp"], otlp_endpoint=receiver.endpoint, export_interval_s=3600
            )
            monitor = active_monitor()
            assert monitor is not None and monitor.wait_for_cycles(1, WAIT_S)
            handle.shutdown()  # the only export of this run happens here
        names = receiver.wait_for(
            lambda r: {n for _res, names in r.resources() for n in names},
            WAIT_S,
            "the final export",
        )
        assert {USED, TOTAL} <= names
    finally:
        receiver.close()
        server.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_monitor_while_the_parents_holds_its_lock() -> None:
    """A child forked while the parent's monitor thread held its lock inherits that lock held
    forever: stopping the parent's monitor from the child (as a new session's start does)
    hung the child. The child forgets the parent's monitor and starts its own."""
    configure(nodes=lambda: [], interval_s=3600.0)
    with isolated_state(), in_memory_telemetry():
        parents = active_monitor()
        assert parents is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with parents._cond:
                held.set()
                release.wait(WAIT_S)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(WAIT_S)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            status = 1
            try:
                with in_memory_telemetry():
                    mine = active_monitor()
                    status = 0 if mine is not None and mine is not parents else 2
            finally:
                os._exit(status)
        release.set()
        holder.join()
        deadline = time.monotonic() + 4 * WAIT_S
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung starting its telemetry")
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_session_that_is_not_exporting_starts_no_monitor() -> None:
    configure(nodes=lambda: [])
    with isolated_state():
        handle = rlmetrics.start()  # no exporter, no reader
        try:
            assert active_monitor() is None
        finally:
            handle.shutdown()


@pytest.mark.parametrize("how", ["configure", "environment"])
def test_the_monitor_can_be_disabled(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(nodes=lambda: [])
    if how == "configure":
        configure(enabled=False)
    else:
        monkeypatch.setenv(ENABLED_ENV, "off")
    with isolated_state(), in_memory_telemetry():
        assert active_monitor() is None


def test_a_new_session_replaces_the_previous_monitor() -> None:
    configure(nodes=lambda: [], interval_s=3600.0)
    with isolated_state():
        with in_memory_telemetry():
            first = active_monitor()
        with in_memory_telemetry():
            second = active_monitor()
            assert second is not None and second is not first and second.running
        assert first is not None and not first.running


@pytest.mark.skipif(RAY_INSTALLED, reason="Ray is installed in this environment")
def test_without_ray_and_without_a_node_source_no_monitor_runs() -> None:
    """(Unless GPUs are wanted: then the monitor reads this machine's through NVML, see
    test_ray_gpu.py.)"""
    configure(gpus=False)
    with isolated_state(), in_memory_telemetry():
        assert active_monitor() is None
    assert not in_ray_worker()


def _nvml_works() -> bool:
    from rlmetrics_ray.nvml import NvmlGpus

    reader = NvmlGpus()
    reader()
    return reader.unavailable is None


@pytest.mark.skipif(RAY_INSTALLED, reason="Ray is installed: its monitor waits for ray.init()")
@pytest.mark.skipif(not no_nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_without_ray_and_without_an_nvidia_driver_no_monitor_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # issue 37: a process with rlmetrics-ray installed that never reaches a Ray cluster keeps
    # no monitor thread. Without Ray the monitor reads this machine's GPUs through NVML; with
    # no NVIDIA driver there is nothing to read, which a look at /proc tells without
    # importing nvidia-ml-py.
    with (
        caplog.at_level(logging.INFO, logger="rlmetrics"),
        isolated_state(),
        in_memory_telemetry() as (_handle, reader),
    ):
        assert active_monitor() is None
        assert not [t for t in threading.enumerate() if t.name.startswith("rlmetrics-ray")]
        assert not [p for p in points(reader) if p.name.startswith("hw.gpu")]
    said = [r for r in caplog.records if "no NVIDIA driver" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]


@pytest.mark.skipif(RAY_INSTALLED, reason="Ray is installed: its monitor waits for ray.init()")
@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py is not installed"
)
def test_where_nvml_cannot_start_the_monitor_thread_ends_after_its_first_cycle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Where the driver's folder cannot tell (another OS; here: a stand-in that exists), NVML
    # is tried on the monitor's thread, and that thread ends once it finds nothing to read.
    if _nvml_works():
        pytest.skip("NVML works here: the monitor reads this machine's GPUs")
    monkeypatch.setattr(rlmetrics_ray.nvml, "DRIVER_PROC", str(tmp_path))
    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        monitor = active_monitor()
        assert monitor is not None
        wait_until(
            lambda: not [t for t in threading.enumerate() if t.name.startswith("rlmetrics-ray")],
            what="the monitor thread to end",
        )
        assert monitor.cycles == 1 and not monitor.running
        assert not [p for p in points(reader) if p.name.startswith("hw.gpu")]


@pytest.mark.skipif(not RAY_INSTALLED, reason="Ray is not installed in this environment")
def test_with_ray_installed_the_driver_monitor_waits_for_ray_init_on_no_thread() -> None:
    import sys

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        pytest.skip("Ray is initialised in this process (the cluster tests' fixture)")
    # A driver that never calls ray.init() pays nothing: the monitor waits in Ray's
    # post-init hooks, not on a thread (the cluster tests show it starting at ray.init()).
    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        monitor = active_monitor()
        assert monitor is not None and not monitor.running and monitor.cycles == 0
        assert not [t for t in threading.enumerate() if t.name.startswith("rlmetrics-ray")]
        assert not [p for p in points(reader) if p.name in (USED, TOTAL)]


# -- settings ----------------------------------------------------------------------------------


def test_defaults() -> None:
    assert settings() == HostMemorySettings(
        enabled=True, gpus=True, interval_s=10.0, timeout_s=5.0, max_concurrency=256
    )


def test_configure_wins_over_the_environment_and_none_resets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "2.5")
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    assert (settings().interval_s, settings().timeout_s) == (2.5, 1.0)
    configure(interval_s=30, resolver=loopback_metrics_url, max_concurrency=8)
    current = settings()
    assert (current.interval_s, current.timeout_s) == (30, 1.0)
    assert current.resolver is loopback_metrics_url and current.max_concurrency == 8
    configure(interval_s=None)
    assert settings().interval_s == 2.5


def test_the_started_monitor_uses_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "0.75")
    configure(nodes=lambda: [], interval_s=42.0, max_concurrency=3)
    with isolated_state(), in_memory_telemetry():
        monitor = active_monitor()
        assert monitor is not None
        assert (monitor.interval_s, monitor.timeout_s, monitor.max_concurrency) == (42.0, 0.75, 3)


@pytest.mark.parametrize("value", ["soon", "-3", "0", "nan"])
def test_a_bad_environment_value_warns_once_and_uses_the_default(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, value)
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    with isolated_state():  # fresh warn-once state
        assert settings().interval_s == 10.0
    # rlmetrics' records only: another library's thread (one an earlier test left retrying)
    # may log meanwhile.
    messages = [r.getMessage() for r in own_records(caplog.records)]
    assert len(messages) == 1 and INTERVAL_ENV in messages[0] and value not in messages[0]


@pytest.mark.parametrize("variable", [ENABLED_ENV, GPUS_ENV])
@pytest.mark.parametrize("value", ["flase", "offf", "maybe"])
def test_a_switch_that_is_neither_on_nor_off_warns_once_and_uses_the_default(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: any word but 0/false/no/off was on, unsaid: "flase" meant on."""
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    with isolated_state():
        current = settings()
        assert (current.enabled, current.gpus) == (True, True)
    messages = [r.getMessage() for r in own_records(caplog.records)]
    assert len(messages) == 1 and variable in messages[0], messages
    assert "1, true, yes, on" in messages[0] and value not in messages[0]
    monkeypatch.setenv(variable, "ON")
    assert getattr(settings(), "enabled" if variable == ENABLED_ENV else "gpus") is True
    monkeypatch.setenv(variable, "Off")
    assert getattr(settings(), "enabled" if variable == ENABLED_ENV else "gpus") is False


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (ENABLED_ENV, "flase"),
        (GPUS_ENV, "maybe"),
        (INTERVAL_ENV, "ten"),
        (TIMEOUT_ENV, "-1"),
        ("RLMETRICS_RAY_HOST_MEMROY", "0"),
        ("RLMETRICS_RAY_GPU", "0"),
    ],
)
def test_rlmetrics_config_refuses_what_the_monitor_would_not_take(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Before: ``rlmetrics config``, the check to run before a long job, passed each of these
    (exit 0), and the job ran with the monitor's defaults: a wrong value was said once at
    start, a misspelt name never."""
    from rlmetrics.cli import main

    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert variable in err, err
    if variable.endswith("MEMROY"):
        assert f"did you mean '{ENABLED_ENV}'?" in err
    if variable.endswith("_GPU"):
        assert f"did you mean '{GPUS_ENV}'?" in err
    monkeypatch.setenv(variable, "1")
    read = variable in (ENABLED_ENV, GPUS_ENV, INTERVAL_ENV, TIMEOUT_ENV)
    assert (main(["config"]) == 0) == read


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"interval": 5}, TypeError),
        ({"interval_s": 0}, ValueError),
        ({"timeout_s": "5"}, ValueError),
        ({"timeout_s": True}, ValueError),
        ({"max_concurrency": 1.5}, ValueError),
        ({"enabled": "yes"}, ValueError),
        ({"resolver": "http://127.0.0.1"}, TypeError),
        ({"nodes": [1, 2]}, TypeError),
    ],
)
def test_configure_refuses_what_cannot_work(changes: dict[str, Any], error: type) -> None:
    with pytest.raises(error, match="configure"):
        configure(**changes)
    assert settings() == HostMemorySettings()


def test_callbacks_report_nothing_without_a_monitor() -> None:
    assert active_monitor() is None
    assert family.observe_used() == () and family.observe_total() == ()


def test_the_callbacks_never_block_while_a_cycle_runs() -> None:
    # A cycle holds no lock the callbacks need: read the snapshot from another thread while
    # a cycle is stuck mid-scrape (the HTTP-level version is in test_ray_monitor).
    server = ExpositionServer(render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    try:
        configure(nodes=lambda: one_host(server), interval_s=3600.0, timeout_s=WAIT_S)
        with isolated_state(), in_memory_telemetry():
            monitor = active_monitor()
            assert monitor is not None and monitor.wait_for_cycles(1, WAIT_S)
            server.set(mode="hold")
            cycle = threading.Thread(target=monitor.refresh)
            cycle.start()
            assert server.arrived.wait(WAIT_S)
            assert [v for v, _ in family.observe_used()] == [3 * GiB]
            assert server.holding
            server.release()
            cycle.join(WAIT_S)
    finally:
        server.close()


def test_the_environment_runs_the_sdk_it_says() -> None:
    # Ray accepts any SDK >= 1.30: make sure the ray env's pin is the SDK actually installed.
    import os
    from importlib.metadata import version

    expected = os.environ.get("RLMETRICS_EXPECT_SDK")
    if not expected:
        pytest.skip("not running under a tox env (RLMETRICS_EXPECT_SDK unset)")
    assert version("opentelemetry-sdk") == expected


def test_configured_sets_the_settings_for_a_block_only() -> None:
    """The scoped form a test wants: what the block set is gone after it, even when it
    raises, and what was configured before comes back."""
    from rlmetrics_ray import configured

    configure(interval_s=30)
    with configured(interval_s=2, nodes=lambda: []) as inside:
        assert (inside.interval_s, settings().interval_s) == (2, 2)
        assert settings().nodes is not None
    assert settings().interval_s == 30 and settings().nodes is None
    with pytest.raises(RuntimeError), configured(timeout_s=1):
        raise RuntimeError("the block failed")
    assert settings().timeout_s == 5.0
    with pytest.raises(ValueError, match="configure"), configured(interval_s=0):
        pass  # a wrong value raises before the block, and changes nothing
    assert settings().interval_s == 30
