"""rlmetrics' own delivery counters: a push exporter's exports by outcome (against a real OTLP
receiver that accepts, then refuses), and the rows a queued backend dropped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rlmetrics
from rlmetrics.plugins import register
from rlmetrics.testing import OtlpReceiver, in_memory_telemetry, points, wait_until

pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")


def _counts(reader: Any, name: str) -> dict[tuple[tuple[str, str], ...], float | None]:
    found = [p for p in points(reader) if p.name == name]
    assert all(p.kind == "sum" and p.monotonic for p in found)
    return {tuple(sorted(p.attributes.items())): p.value for p in found}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    peer = OtlpReceiver().start()
    try:
        yield peer
    finally:
        handle = rlmetrics.current()
        if handle is not None:
            handle.shutdown(timeout_s=2)
        peer.stop()


def test_exports_are_counted_by_exporter_and_outcome(receiver: OtlpReceiver) -> None:
    import grpc

    with in_memory_telemetry(
        exporters={"otlp": {"endpoint": receiver.endpoint}}, export_interval_s=0.1
    ) as (_handle, reader):
        # Something to export (an empty collection is not exported at all).
        rlmetrics.Logger(backends={}).log_metrics({"reward": 0.5}, step=1, prefix="train")
        success = (("rlmetrics.export.outcome", "success"), ("rlmetrics.exporter", "otlp"))
        failure = (("rlmetrics.export.outcome", "failure"), ("rlmetrics.exporter", "otlp"))
        wait_until(
            lambda: (_counts(reader, "rlmetrics.exporter.exports").get(success) or 0) >= 2,
            15,
            "two successful exports",
        )
        # Counted as they happen: no failure yet, no failure series (nothing to collect).
        assert failure not in _counts(reader, "rlmetrics.exporter.exports")
        receiver.reject_with = grpc.StatusCode.INVALID_ARGUMENT
        wait_until(
            lambda: (_counts(reader, "rlmetrics.exporter.exports").get(failure) or 0) >= 1,
            15,
            "a failed export",
        )
        receiver.reject_with = None


def test_rows_a_queued_backend_dropped_are_counted_by_backend(blocking_backend: Any) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"blocking": {}}, queue_size=1)
        try:
            logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
            assert blocking_backend.entered.wait(10)
            for step in range(2, 6):  # one fits the queue, three are dropped
                logger.log_metrics({"loss": 1.0}, step=step, prefix="train")
            dropped = _counts(reader, "rlmetrics.backend.dropped")
            assert dropped[(("rlmetrics.backend", "blocking"),)] == 3
        finally:
            blocking_backend.release.set()
            logger.finish(timeout_s=5)


class Failing:
    """A tracker that raises on every row (a revoked token, a full disk)."""

    inline = True

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        raise OSError("no space left on device")

    def finish(self) -> None:
        pass


class OffersFailing:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("failing", Failing)


def test_rows_a_backend_raised_on_are_counted_by_backend() -> None:
    register(OffersFailing(), "offers-failing")
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"failing": {}})
        for step in range(1, 5):
            logger.log_metrics({"loss": 1.0}, step=step, prefix="train")
        failed = _counts(reader, "rlmetrics.backend.failed")
        assert failed[(("rlmetrics.backend", "failing"),)] == 4
        logger.finish()


def test_a_value_the_recording_path_drops_is_counted_by_series_and_cause() -> None:
    """A NaN loss is dropped from its series (which keeps showing the last finite value), so
    it is counted where Prometheus and the alerts see it: by series and cause."""
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        logger.log_metrics({"loss": 0.5, "reward": 1.0}, step=1, prefix="train")
        logger.log_metrics({"loss": float("nan"), "reward": float("inf")}, step=2, prefix="train")
        logger.log_metrics({"loss": float("nan")}, step=3, prefix="train")
        logger.log_metrics({"loss": None}, step=4, prefix="train")  # absent, not a bad value
        counts = _counts(reader, "rlmetrics.values.dropped")
    assert counts == {
        (("rlmetrics.drop.reason", "nan"), ("rlmetrics.series", "rl.policy.loss")): 2,
        (("rlmetrics.drop.reason", "infinite"), ("rlmetrics.series", "rl.reward.mean")): 1,
    }
