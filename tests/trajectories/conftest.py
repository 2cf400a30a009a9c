"""Fixtures for the trajectory tests: a real OTLP receiver on 127.0.0.1, every message the
``rlmetrics`` logger emits, and a tracker that keeps the sample rows it is given."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import OtlpReceiver

from ._records import Rows


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        handle = rlmetrics.current()
        if handle is not None:  # stop exporting before the receiver goes away
            handle.shutdown(timeout_s=2)
        receiver.stop()


@pytest.fixture
def warnings_seen(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The ``rlmetrics`` logger's WARNINGs, captured."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    yield caplog


@pytest.fixture
def rows() -> Rows:
    """The rows a ``Logger(backends={"rows": {}})`` hands its trackers (``log_samples``)."""
    kept = Rows()

    class Plugin:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("rows", lambda: kept)

    from rlmetrics.plugins import register

    register(Plugin(), "test-rows")
    return kept
