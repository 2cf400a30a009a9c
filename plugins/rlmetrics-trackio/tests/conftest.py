"""Trackio runs for the tests: local only, in one store this session makes (Trackio reads
``TRACKIO_DIR`` once, at import, so it is set before anything imports trackio), one project per
test; read back through Trackio's own API and storage."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="rlmetrics-trackio-"))
os.environ["DO_NOT_TRACK"] = "1"
os.environ.pop("TRACKIO_SPACE_ID", None)
os.environ.pop("HF_TOKEN", None)

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state, load_hypothesis_profile

load_hypothesis_profile()


@pytest.fixture
def project(request: pytest.FixtureRequest) -> str:
    """A project of the test's own in the session's store."""
    return "t-" + request.node.name.replace("[", "-").replace("]", "")[:80]


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    with isolated_state() as registry:
        yield registry
