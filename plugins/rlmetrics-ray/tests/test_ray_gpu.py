"""The ``ray_gpu`` family: every host's GPUs from HTTP servers on 127.0.0.1 serving Ray 2.60's
real node exposition with the GPU families a GPU machine adds (shaped from Ray's own reporter:
percent and MiB, labelled ``GpuIndex``/``GpuDeviceName``/``GpuUuid``), read in the same cycle
as host memory and exported through the real SDK; NeMo-RL's tracker rows through a real
Logger and its JSONL backend; NVML, which no machine here has, absent for real and, for the
reading itself, through a stand-in module shaped like ``pynvml``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import rlmetrics_ray.nvml
from hypothesis import given
from hypothesis import strategies as st
from ray_support import (
    WAIT_S,
    Cluster,
    ExpositionServer,
    dead_port,
    render_exposition,
    render_gpus,
)
from rlmetrics_ray import active_monitor, configure
from rlmetrics_ray.exposition import read_samples
from rlmetrics_ray.gpu import (
    MEMORY_LIMIT,
    MEMORY_USAGE,
    MEMORY_UTILIZATION,
    UTILIZATION,
    GpuRows,
    nemo_rl_rows,
)
from rlmetrics_ray.gpu_readings import GPU_FAMILIES, GpuReading, gpus_from_samples
from rlmetrics_ray.monitor import HostMemoryMonitor
from rlmetrics_ray.nvml import NvmlGpus, visible_indices

import rlmetrics
from rlmetrics.testing import BlackHole, in_memory_telemetry, isolated_state, own_records, points

MiB, GiB = 2**20, 2**30
H100 = "NVIDIA H100 80GB HBM3"
Serve = Callable[..., ExpositionServer]


def host_exposition(gpus: list[tuple[int, float, float, float]]) -> str:
    """A GPU host's raylet: its memory, and its GPUs as (index, util %, used MiB, free MiB)."""
    return render_gpus(gpus, text=render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))


@pytest.fixture
def started() -> Iterator[Callable[..., tuple[HostMemoryMonitor, Any]]]:
    """Telemetry whose monitor reads ``nodes``; (monitor, reader) after its first cycle."""
    with contextlib.ExitStack() as stack:

        def start(nodes: Any, **settings: Any) -> tuple[HostMemoryMonitor, Any]:
            configure(nodes=nodes, interval_s=3600.0, **settings)
            stack.enter_context(isolated_state())
            _handle, reader = stack.enter_context(in_memory_telemetry())
            monitor = active_monitor()
            assert monitor is not None and monitor.wait_for_cycles(1, WAIT_S)
            return monitor, reader

        yield start


def gpu_points(reader: Any) -> dict[tuple[str, str, str], tuple[float, dict[str, Any]]]:
    """(metric, host.name, hw.id) → (value, attributes) of one collection."""
    out: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
    for point in points(reader):
        if point.name in (UTILIZATION, MEMORY_USAGE, MEMORY_LIMIT, MEMORY_UTILIZATION):
            key = (point.name, point.attributes["host.name"], point.attributes["hw.id"])
            assert key not in out, f"two points for {key}"
            out[key] = (point.value, point.attributes)
    return out


def expected(host: str, index: int, util: float, used: float, free: float) -> dict[Any, Any]:
    attributes = {"host.name": host, "hw.id": str(index), "hw.model": H100}
    found = {
        # The conventions' utilisation is per task; Ray's (NVML's) rate is the general one.
        (UTILIZATION, host, str(index)): (util / 100, {**attributes, "hw.gpu.task": "general"}),
        (MEMORY_USAGE, host, str(index)): (used * MiB, attributes),
        (MEMORY_LIMIT, host, str(index)): ((used + free) * MiB, attributes),
    }
    if used + free > 0:  # a GPU without memory has no fraction of it in use
        found[(MEMORY_UTILIZATION, host, str(index))] = (used / (used + free), attributes)
    return found


# -- what is exported ------------------------------------------------------------------------


def test_two_hosts_two_gpus_each_one_host_black_holed(
    serve: Serve, started: Any, black_hole: BlackHole
) -> None:
    # The same literal holds on SDK 1.44.0, 1.45.1 and 1.45.2 (each tox env runs it).
    cluster = Cluster()
    a = serve(host_exposition([(0, 87.0, 40960.0, 40960.0), (1, 12.5, 1024.0, 80896.0)]))
    b = serve(host_exposition([(0, 100.0, 81920.0, 0.0), (1, 0.0, 0.0, 81920.0)]))
    cluster.add("a" * 56, "gpu-host-a", a.port)
    cluster.add("b" * 56, "gpu-host-b", b.port)
    cluster.add("c" * 56, "gpu-host-c", black_hole.port)
    monitor, reader = started(cluster, timeout_s=0.5)
    assert gpu_points(reader) == {
        **expected("gpu-host-a", 0, 87.0, 40960.0, 40960.0),
        **expected("gpu-host-a", 1, 12.5, 1024.0, 80896.0),
        **expected("gpu-host-b", 0, 100.0, 81920.0, 0.0),
        **expected("gpu-host-b", 1, 0.0, 0.0, 81920.0),
    }
    found = {p.name: p for p in points(reader)}
    assert (found[UTILIZATION].kind, found[UTILIZATION].unit) == ("gauge", "1")
    assert (found[MEMORY_UTILIZATION].kind, found[MEMORY_UTILIZATION].unit) == ("gauge", "1")
    # The conventions' instrument: an up-down counter (Prometheus: a gauge), in bytes.
    assert (found[MEMORY_USAGE].kind, found[MEMORY_USAGE].monotonic) == ("sum", False)
    assert found[MEMORY_USAGE].unit == "By"
    assert [host for host, _cause in monitor.snapshot.failures] == ["gpu-host-c"]
    # One scrape a host gave both its memory and its GPUs.
    assert (a.requests, b.requests) == (1, 1)
    assert {p.attributes["host.name"] for p in points(reader) if p.name.startswith("rl.host")} == {
        "gpu-host-a",
        "gpu-host-b",
    }


def test_a_gpu_that_disappears_leaves_a_gap(serve: Serve, started: Any) -> None:
    cluster = Cluster()
    host = serve(host_exposition([(0, 50.0, 100.0, 900.0), (1, 60.0, 200.0, 800.0)]))
    cluster.add("a" * 56, "gpu-host-a", host.port)
    monitor, reader = started(cluster)
    assert {key[2] for key in gpu_points(reader)} == {"0", "1"}

    host.set(text=host_exposition([(0, 55.0, 150.0, 850.0)]))  # GPU 1 fell off the bus
    monitor.refresh()
    assert gpu_points(reader) == expected("gpu-host-a", 0, 55.0, 150.0, 850.0)
    assert gpu_points(reader) == expected("gpu-host-a", 0, 55.0, 150.0, 850.0)

    host.set(text=host_exposition([(0, 55.0, 150.0, 850.0), (1, 61.0, 210.0, 790.0)]))
    monitor.refresh()
    assert gpu_points(reader)[(UTILIZATION, "gpu-host-a", "1")][0] == 0.61


def test_a_failed_host_has_no_gpu_points_and_a_host_without_gpus_none(
    serve: Serve, started: Any
) -> None:
    cluster = Cluster()
    gpus = serve(host_exposition([(0, 50.0, 100.0, 900.0)]))
    cpu_only = serve(render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    cluster.add("a" * 56, "gpu-host", gpus.port)
    cluster.add("b" * 56, "cpu-host", cpu_only.port)
    monitor, reader = started(cluster)
    assert {key[1] for key in gpu_points(reader)} == {"gpu-host"}
    gpus.set(mode="error")
    monitor.refresh()
    assert gpu_points(reader) == {}


def test_the_gpu_line_waits_for_a_host_to_answer(
    serve: Serve, started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a first cycle in which no host answered yet (Ray's metrics agent not up) said
    "no host reports a GPU; no hw.gpu.* series" once and for good, and the GPUs that came
    with the agent a cycle later were exported unsaid."""
    cluster = Cluster()
    info = cluster.add("a" * 56, "gpu-host-a", dead_port())
    with caplog.at_level(logging.INFO, logger="rlmetrics"):
        monitor, reader = started(cluster)
        assert gpu_points(reader) == {}
        host = serve(host_exposition([(0, 50.0, 100.0, 900.0)]))
        info["MetricsExportPort"] = host.port  # the agent is up
        monitor.refresh()
        assert {key[2] for key in gpu_points(reader)} == {"0"}
    said = [r.getMessage() for r in own_records(caplog.records) if "hw.gpu" in r.getMessage()]
    assert said == ["rlmetrics-ray: 1 GPU(s) found; exporting hw.gpu.*"], said


def test_gpus_can_be_turned_off(serve: Serve, started: Any) -> None:
    cluster = Cluster()
    host = serve(host_exposition([(0, 50.0, 100.0, 900.0)]))
    cluster.add("a" * 56, "gpu-host-a", host.port)
    _monitor, reader = started(cluster, gpus=False)
    assert gpu_points(reader) == {}
    assert [p for p in points(reader) if p.name == "rl.host.memory.used"]


# -- reading the exposition ------------------------------------------------------------------


def test_the_gpu_families_read_in_bytes_and_fractions() -> None:
    text = render_gpus([(1, 12.5, 1024.0, 3072.0), (0, 87.0, 40960.0, 40960.0)])
    readings = gpus_from_samples(read_samples(text, GPU_FAMILIES), ip="127.0.0.1")
    assert readings == (
        GpuReading("0", H100, 87.0, 40960.0 * MiB, 81920.0 * MiB),
        GpuReading("1", H100, 12.5, 1024.0 * MiB, 4096.0 * MiB),
    )
    assert readings[0].utilization == 0.87
    assert (readings[0].memory_utilization, readings[1].memory_utilization) == (0.5, 0.25)
    # A GPU that reports no memory at all has no fraction of it in use.
    assert GpuReading("2", H100, 0.0, 0.0, 0.0).memory_utilization is None


def test_the_real_exposition_has_no_gpu() -> None:
    text = render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB)
    assert gpus_from_samples(read_samples(text, GPU_FAMILIES)) == ()


_gpu = st.tuples(
    st.integers(min_value=0, max_value=15),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=2**20),
    st.floats(min_value=0, max_value=2**20),
)


@given(st.lists(_gpu, max_size=8, unique_by=lambda g: g[0]))
def test_any_set_of_gpus_reads_back(gpus: list[tuple[int, float, float, float]]) -> None:
    readings = gpus_from_samples(read_samples(render_gpus(gpus, text=""), GPU_FAMILIES))
    assert [r.index for r in readings] == [str(i) for i, *_ in sorted(gpus)]
    for reading, (_index, util, used, free) in zip(readings, sorted(gpus), strict=True):
        assert reading.utilization_pct == float(repr(float(util)))
        assert reading.used_bytes == float(used) * MiB
        assert reading.limit_bytes == (float(used) + float(free)) * MiB
        if used + free > 0:
            assert reading.memory_utilization is not None
            assert 0.0 <= reading.memory_utilization <= 1.0
        else:
            assert reading.memory_utilization is None


# -- NeMo-RL's tracker rows ------------------------------------------------------------------


def test_the_tracker_rows_are_nemo_rls(serve: Serve, started: Any, tmp_path: Path) -> None:
    cluster = Cluster()
    a = serve(host_exposition([(0, 87.0, 40960.0, 40960.0), (1, 12.5, 1024.0, 80896.0)]))
    b = serve(host_exposition([(0, 100.0, 81920.0, 0.0)]))
    cluster.add("a" * 56, "gpu-host-a", a.port)
    cluster.add("b" * 56, "gpu-host-b", b.port)
    started(cluster)
    path = tmp_path / "run.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}})
    rows = GpuRows.from_config(logger, {"collection_interval": 3600, "flush_interval": 3600})
    assert (rows.collection_interval, rows.flush_interval) == (3600.0, 3600.0)
    collected = rows.collect()
    rows.flush()
    logger.finish()
    assert collected == {
        "node.0.gpu.0.util": 87.0,
        "node.0.gpu.0.mem_gb": 40.0,
        "node.0.gpu.1.util": 12.5,
        "node.0.gpu.1.mem_gb": 1.0,
        "node.0.mem_gb": 3.0,
        "node.0.mem_total_gb": 16.0,
        "node.1.gpu.0.util": 100.0,
        "node.1.gpu.0.mem_gb": 80.0,
        "node.1.mem_gb": 3.0,
        "node.1.mem_total_gb": 16.0,
    }
    (line,) = [row for row in map(json.loads, path.read_text().splitlines()) if "metrics" in row]
    assert line["prefix"] == "ray"
    logged = line["metrics"]
    assert {k: v for k, v in logged.items() if k.startswith("node.")} == collected
    # Their own axes: seconds since the rows started (NeMo-RL's ray/ray_step) and wall time.
    assert logged["ray_step"] == line["step"] == 0
    assert isinstance(logged["telemetry/wall_time_seconds"], float)


def test_rows_keep_a_hosts_index_through_its_gap() -> None:
    from rlmetrics_ray.monitor import HostGpu, build_snapshot

    snapshot = build_snapshot(
        [],
        0.0,
        [("host-a", "timeout")],
        [HostGpu("host-b", GpuReading("0", None, 5.0))],
        ["host-a", "host-b"],
    )
    assert nemo_rl_rows(snapshot) == {"node.1.gpu.0.util": 5.0}


def test_rows_thread_logs_on_its_intervals(serve: Serve, started: Any) -> None:
    cluster = Cluster()
    host = serve(host_exposition([(0, 87.0, 40960.0, 40960.0)]))
    cluster.add("a" * 56, "gpu-host-a", host.port)
    started(cluster)
    logged: list[tuple[dict[str, Any], int, str]] = []

    class Recording(rlmetrics.Logger):
        def log_metrics(self, metrics: Any, step: int, prefix: str = "") -> None:
            logged.append((dict(metrics), step, prefix))

    with GpuRows(Recording(backends={}), collection_interval=0.05, flush_interval=0.05):
        from ray_support import wait_until

        wait_until(lambda: len(logged) >= 2, what="two flushed GPU readings")
    assert all(prefix == "ray" and m["node.0.gpu.0.util"] == 87.0 for m, _s, prefix in logged)


def test_rows_without_telemetry_scrape_themselves(serve: Serve) -> None:
    cluster = Cluster()
    host = serve(host_exposition([(0, 87.0, 40960.0, 40960.0)]))
    cluster.add("a" * 56, "gpu-host-a", host.port)
    configure(nodes=cluster)
    rows = GpuRows(rlmetrics.Logger(backends={}))
    assert rows.collect()["node.0.gpu.0.mem_gb"] == 40.0


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "10"])
def test_rows_refuse_intervals_that_cannot_work(bad: Any) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        GpuRows(rlmetrics.Logger(backends={}), collection_interval=bad)


# -- NVML: this machine's GPUs without Ray ---------------------------------------------------


class FakeNvml:
    """Shaped like ``pynvml`` (nvidia-ml-py): the GPUs this machine does not have."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[dict[str, Any]], fail_init: bool = False) -> None:
        self.gpus = gpus
        self.fail_init = fail_init
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> bytes:
        return str(handle["uuid"]).encode()

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> str:
        return str(handle["name"])

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> Any:
        if handle.get("broken"):
            raise self.NVMLError("GPU is lost")
        return SimpleNamespace(used=handle["used"], total=handle["total"], free=0)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> Any:
        return SimpleNamespace(gpu=handle["util"], memory=0)


def _nvml_gpu(uuid: str, util: int, used: int, total: int, **extra: Any) -> dict[str, Any]:
    return {"uuid": uuid, "name": H100, "util": util, "used": used, "total": total, **extra}


def test_nvml_reads_the_visible_gpus_exactly() -> None:
    nvml = FakeNvml(
        [
            _nvml_gpu("GPU-aaaa", 10, 1 * GiB, 80 * GiB),
            _nvml_gpu("GPU-bbbb", 20, 2 * GiB, 80 * GiB),
            _nvml_gpu("GPU-cccc", 30, 3 * GiB, 80 * GiB, broken=True),
            _nvml_gpu("GPU-dddd", 40, 4 * GiB, 80 * GiB),
        ]
    )
    read = NvmlGpus(nvml, environ={"CUDA_VISIBLE_DEVICES": "3,GPU-bb,2"})
    assert read() == (
        GpuReading("1", H100, 20.0, 2.0 * GiB, 80.0 * GiB),
        GpuReading("3", H100, 40.0, 4.0 * GiB, 80.0 * GiB),
    )  # GPU 2's memory read failed: a gap for it alone
    assert nvml.inits == 1
    read()
    assert nvml.inits == 1  # NVML starts once


def test_without_nvml_there_is_no_series_and_one_info_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In these envs nvidia-ml-py is not installed and there is no Ray: a real absence. (The
    driver's folder is a stand-in that exists: with none, no monitor starts at all, see
    test_ray_host_memory.py.)"""
    pytest.importorskip("rlmetrics_ray")
    monkeypatch.setattr(rlmetrics_ray.nvml, "DRIVER_PROC", str(tmp_path))
    try:
        import pynvml  # noqa: F401

        pytest.skip("nvidia-ml-py is installed here")
    except ImportError:
        pass
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("Ray is initialised in this process (the cluster tests' fixture)")
    with (
        caplog.at_level(logging.DEBUG, logger="rlmetrics"),
        isolated_state(),
        in_memory_telemetry() as (_handle, reader),
    ):
        monitor = active_monitor()
        assert monitor is not None
        # With Ray installed the monitor waits for ray.init() on no thread: cycle it here.
        monitor.refresh()
        monitor.refresh()  # a second cycle says nothing more
        assert gpu_points(reader) == {}
        assert not [p for p in points(reader) if p.name.startswith("rl.host")]
    said = [r for r in caplog.records if "nvidia-ml-py is not installed" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]
    ours = [r for r in caplog.records if r.getMessage().startswith("rlmetrics-ray")]
    assert not [r for r in ours if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    "nvml",
    [FakeNvml([], fail_init=True), FakeNvml([])],
    ids=["no-driver", "no-gpu"],
)
def test_no_driver_or_no_gpu_is_no_series_and_one_info_line(
    nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    read = NvmlGpus(nvml, environ={})
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        assert read() == () and read() == ()
    said = [r.levelno for r in own_records(caplog.records)]
    assert said == [logging.INFO]
    assert read.unavailable is not None


def test_the_monitor_reports_local_gpus_when_no_ray_node_is_listed(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "this-machine")
    local = NvmlGpus(FakeNvml([_nvml_gpu("GPU-aaaa", 10, 1 * GiB, 80 * GiB)]), environ={})
    with isolated_state():
        configure(nodes=lambda: [], interval_s=3600.0)
        with in_memory_telemetry() as (_handle, reader):
            monitor = active_monitor()
            assert monitor is not None
            monitor.local_gpus = local
            monitor.refresh()
            found = gpu_points(reader)
            assert found[(MEMORY_USAGE, "this-machine", "0")][0] == 1 * GiB
            assert found[(MEMORY_UTILIZATION, "this-machine", "0")][0] == 1 / 80
            assert found[(UTILIZATION, "this-machine", "0")][1]["hw.gpu.task"] == "general"


# CUDA_VISIBLE_DEVICES as CUDA reads it: a model of the rule, against the implementation.

_hex = "0123456789abcdef"
_uuids = st.lists(st.text(alphabet=_hex, min_size=4, max_size=4), max_size=6, unique=True)
_entry = st.one_of(
    st.integers(min_value=0, max_value=7).map(str),
    st.text(alphabet=_hex, min_size=1, max_size=4).map("GPU-{}".format),
    st.sampled_from(["", "-1", "MIG-1234", "x"]),
)


@given(_uuids, st.one_of(st.none(), st.lists(_entry, max_size=6).map(",".join)))
def test_visible_indices_follow_cuda(uuids: list[str], setting: str | None) -> None:
    devices = [(i, f"GPU-{u}") for i, u in enumerate(uuids)]
    found = visible_indices(setting, devices)
    if setting is None:
        assert found == [i for i, _ in devices]
        return
    model: list[int] = []
    for entry in setting.split(","):
        matches = (
            [int(entry)]
            if entry.isdigit() and int(entry) < len(devices)
            else [i for i, uuid in devices if entry.startswith("GPU-") and uuid.startswith(entry)]
        )
        if len(matches) != 1 or matches[0] in model:
            break
        model.append(matches[0])
    assert found == model


def test_rows_without_ray_read_this_machines_gpus() -> None:
    local = NvmlGpus(FakeNvml([_nvml_gpu("GPU-aaaa", 42, 8 * GiB, 80 * GiB)]), environ={})
    monitor = HostMemoryMonitor(nodes=lambda: [], local_gpus=local)
    rows = GpuRows(rlmetrics.Logger(backends={}), monitor=monitor)
    assert rows.collect() == {"node.0.gpu.0.util": 42.0, "node.0.gpu.0.mem_gb": 8.0}
    rows.stop()
