"""The Prometheus endpoint's health path: 200 while steps arrive, 503 once the run has been
silent past the bound, read over real HTTP from the real endpoint, on a clock the test moves."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.health import DEFAULT_STALL_AFTER_S, STALL_AFTER_ENV
from rlmetrics.testing import OtlpReceiver, wait_until


def _get(handle: rlmetrics.Telemetry, path: str) -> tuple[int, bytes]:
    assert handle.prometheus_address is not None
    host, port = handle.prometheus_address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def _health(handle: rlmetrics.Telemetry) -> tuple[int, dict[str, Any]]:
    status, body = _get(handle, "/health")
    return status, dict(json.loads(body))


def test_ok_while_steps_arrive_and_503_once_silent_past_the_bound(clock: Any) -> None:
    with rlmetrics.start(
        run_id="health-run", exporters={"prometheus": {"port": 0, "stall_after_s": 60}}
    ) as handle:
        logger = rlmetrics.Logger(backends={})
        status, body = _health(handle)
        assert (status, body["status"], body["step"]) == (200, "starting", None)
        assert body["run_id"] == "health-run" and body["stall_after_s"] == 60

        logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
        clock.now += 59.5
        status, body = _health(handle)
        assert (status, body["status"], body["step"]) == (200, "ok", 1)
        assert body["seconds_since_last_step"] == 59.5
        assert body["last_step_time"] == clock.now - 59.5

        clock.now += 1.0  # 60.5 s silent: past the bound
        status, body = _health(handle)
        assert (status, body["status"], body["step"]) == (503, "stalled", 1)
        assert body["seconds_silent"] == 60.5

        logger.log_metrics({"reward": 0.6}, step=2, prefix="train")  # the run resumes
        status, body = _health(handle)
        assert (status, body["status"], body["step"]) == (200, "ok", 2)
        assert body["seconds_since_last_step"] == 0.0


def test_a_run_that_never_logs_a_step_stalls_from_its_start(clock: Any) -> None:
    with rlmetrics.start(exporters={"prometheus": {"port": 0, "stall_after_s": 30}}) as handle:
        clock.now += 29.0
        assert _health(handle)[1]["status"] == "starting"
        clock.now += 2.0
        status, body = _health(handle)
        assert (status, body["status"], body["seconds_silent"]) == (503, "stalled", 31.0)
        assert body["seconds_since_last_step"] is None


def _documented_default_s() -> float:
    """The bound's default as docs/operations.md states it (never the code's constant)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    found = re.search(r"`stall_after_s` \((\d+) s\)", text)
    assert found is not None, "docs/operations.md states no default for stall_after_s"
    return float(found[1])


def test_the_bound_comes_from_the_option_then_the_environment(
    clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        assert _health(handle)[1]["stall_after_s"] == _documented_default_s()
        assert _documented_default_s() == DEFAULT_STALL_AFTER_S
    monkeypatch.setenv(STALL_AFTER_ENV, "120")
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        assert _health(handle)[1]["stall_after_s"] == 120
    with rlmetrics.start(exporters={"prometheus": {"port": 0, "stall_after_s": 5}}) as handle:
        assert _health(handle)[1]["stall_after_s"] == 5


@pytest.mark.parametrize("bad", ["0", "-3", "soon", "nan", "inf"])
def test_a_bad_bound_fails_start_and_leaves_nothing_running(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STALL_AFTER_ENV, bad)
    with pytest.raises(rlmetrics.TelemetryError, match=STALL_AFTER_ENV):
        rlmetrics.start(exporters=["prometheus"], prometheus_port=0)
    assert rlmetrics.current() is None
    monkeypatch.delenv(STALL_AFTER_ENV)
    # A bad option is a configuration mistake, refused before the exporter is built.
    with pytest.raises(rlmetrics.ConfigurationError, match="stall_after_s"):
        rlmetrics.start(exporters={"prometheus": {"port": 0, "stall_after_s": 0}})
    assert not [t for t in threading.enumerate() if t.name == "rlmetrics-prometheus"]


def test_every_other_path_still_serves_the_metrics(clock: Any) -> None:
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        rlmetrics.Logger(backends={}).log_metrics({"reward": 0.25}, step=3, prefix="train")
        for path in ("/metrics", "/"):
            status, body = _get(handle, path)
            assert status == 200
            assert "rl_step_number" in body.decode() and "rl_reward_mean" in body.decode()


def test_the_body_names_each_exporter_and_each_backend_s_lost_rows(
    clock: Any, blocking_backend: Any
) -> None:
    receiver = OtlpReceiver().start()
    try:
        with rlmetrics.start(
            exporters={"prometheus": {"port": 0}, "otlp": {"endpoint": receiver.endpoint}},
            export_interval_s=0.1,
        ) as handle:
            logger = rlmetrics.Logger(backends={"blocking": {}}, queue_size=1)
            try:
                logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
                assert blocking_backend.entered.wait(10)
                for step in range(2, 5):
                    logger.log_metrics({"loss": 1.0}, step=step, prefix="train")

                def exported() -> dict[str, Any] | None:
                    body = _health(handle)[1]
                    return body if body["exporters"]["otlp"].get("exports") else None

                body = wait_until(exported, 15, "an OTLP export the health path counts")
                otlp = body["exporters"]["otlp"]
                assert otlp["exports"] >= 1 and otlp["failures"] == 0
                assert otlp["last_export"] == "success"
                host, port = handle.prometheus_address or ("", 0)
                assert body["exporters"]["prometheus"] == {"address": f"{host}:{port}"}
                assert body["backends"]["blocking"]["dropped"] == 2
                assert body["backends"]["blocking"]["queued"] == 1
            finally:
                blocking_backend.release.set()
                logger.finish(timeout_s=5)
    finally:
        receiver.stop()


def test_the_stall_rule_follows_the_run_s_pace_with_its_options(clock: Any) -> None:
    with rlmetrics.start(
        exporters={"prometheus": {"port": 0, "stall_factor": 2, "stall_min_s": 5}}
    ) as handle:
        logger = rlmetrics.Logger(backends={})
        for step in range(1, 22):  # 20 intervals of 10 s: the median is known
            logger.log_metrics({"reward": 0.5}, step=step, prefix="train")
            clock.now += 10.0
        clock.now -= 10.0
        status, body = _health(handle)
        assert body["step_interval_median_s"] == 10.0
        assert body["stall_rule"] == {"factor": 2.0, "min_s": 5.0, "bound_s": 600.0}
        assert body["stall_after_s"] == 20.0  # 2 x the median, above the floor
        clock.now += 19.5
        assert _health(handle)[:1] == (200,)
        clock.now += 1.0
        status, body = _health(handle)
        assert (status, body["status"]) == (503, "stalled")


@pytest.mark.parametrize(("option", "bad"), [("stall_factor", 0), ("stall_min_s", "soon")])
def test_a_bad_stall_option_fails_start_naming_it(option: str, bad: Any) -> None:
    with pytest.raises(rlmetrics.ConfigurationError, match=option):
        rlmetrics.start(exporters={"prometheus": {"port": 0, option: bad}})
    assert rlmetrics.current() is None
