"""The stress run at a small size: every event a few processes of a few threads record reaches
one real OTLP receiver, exactly (benchmarks/bench_stress.py runs the large sizes)."""

from __future__ import annotations

import importlib.util

import pytest

from rlmetrics.testing import stress
from rlmetrics.testing.peers import OtlpReceiver

pytest.importorskip("grpc")


@pytest.fixture
def receiver():  # type: ignore[no-untyped-def]
    peer = OtlpReceiver().start()
    yield peer
    peer.stop()


@pytest.mark.parametrize("path", [p for p in stress.PATHS if p != "gym"])
def test_every_event_arrives(path: str, receiver: OtlpReceiver) -> None:
    outcome = stress.run(path, processes=3, threads=3, seconds=0.5, limit=20_000, receiver=receiver)
    assert outcome.events >= 3 * 3 * 256  # every thread ran
    assert outcome.received == {sent.process: sent.events for sent in outcome.sent}
    assert outcome.lost == 0


@pytest.mark.skipif(
    importlib.util.find_spec("rlmetrics_gym") is None, reason="rlmetrics-gym is not installed"
)
def test_every_gym_request_arrives_and_none_stays_in_flight(receiver: OtlpReceiver) -> None:
    outcome = stress.run(
        "gym", processes=3, threads=3, seconds=0.5, limit=50_000, receiver=receiver
    )
    assert outcome.events >= 3 * 3 * 256
    assert outcome.received == {sent.process: sent.events for sent in outcome.sent}
    in_flight = {
        point.resource[stress.PROCESS_ATTR]: point.value
        for point in receiver.points()
        if point.name == stress.GYM_IN_FLIGHT
    }
    assert in_flight == {str(sent.process): 0 for sent in outcome.sent}
