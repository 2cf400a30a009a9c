"""Every private SDK attribute rlmetrics touches still exists in this env's SDK.

rlmetrics reads or overrides a few private attributes of the OTLP exporter and its periodic
reader (listed, with why, in ``rlmetrics.exporters.otlp.PRIVATE_SDK_ATTRIBUTES``). If an SDK
release renames one, the workaround would silently stop working; this test, run on every
supported SDK, fails instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rlmetrics.exporters.otlp import PRIVATE_SDK_ATTRIBUTES, make_exporter


@pytest.fixture
def built() -> Iterator[dict[str, object]]:
    # An exporter aimed at a closed port: constructing it opens no connection.
    exporter = make_exporter(export_interval_s=3600, endpoint="127.0.0.1:9", timeout_s=0.1)
    owners = {
        "reader": exporter.reader,
        "exporter": exporter.reader._exporter,  # type: ignore[union-attr]
        "span_exporter": exporter.span_processor._rlmetrics_exporter,  # type: ignore[union-attr]
    }
    yield owners
    exporter.reader.shutdown(timeout_millis=1000)  # type: ignore[union-attr]
    exporter.span_processor.shutdown()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("owner", "attribute"), [(owner, attribute) for owner, attribute, _ in PRIVATE_SDK_ATTRIBUTES]
)
def test_private_attribute_exists(built: dict[str, object], owner: str, attribute: str) -> None:
    assert hasattr(built[owner], attribute), f"the SDK's {owner} has no {attribute!r} any more"


@pytest.mark.parametrize("owner", ["exporter", "span_exporter"])
def test_private_attributes_have_the_shape_relied_on(built: dict[str, object], owner: str) -> None:
    exporter = built[owner]
    assert isinstance(exporter._shutdown_in_progress, threading.Event)  # type: ignore[attr-defined]
    assert exporter._shutdown is False  # type: ignore[attr-defined]
    assert exporter._endpoint == "127.0.0.1:9"  # type: ignore[attr-defined]
    # The stub is wrapped, and stays wrapped when the SDK rebuilds it.
    assert type(exporter._client).__name__ == "_RecordingStub"  # type: ignore[attr-defined]
    exporter._initialize_channel_and_stub()  # type: ignore[attr-defined]
    assert type(exporter._client).__name__ == "_RecordingStub"  # type: ignore[attr-defined]
