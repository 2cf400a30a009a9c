"""A tracking server that cannot be reached costs ``Logger()`` the backend's
``connect_timeout_s``, never MLflow's own retries (125 s against a black hole, 251 s against a
refused port with MLflow's defaults): the backend is skipped, named once, and the loop goes on
with the others. Both servers are real sockets on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_mlflow.backend import DEFAULT_CONNECT_TIMEOUT_S, _is_local

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import BlackHole

#: A Logger() still constructing after this is stuck (a liveness bound, not a timed assert:
#: MLflow's own retries would hold it for minutes).
STUCK_S = 90.0


def _refused_port() -> int:
    """A port on 127.0.0.1 nothing listens on: bound, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _log_through(uri: str, options: dict[str, Any], path: Path) -> rlmetrics.Logger:
    """Build a Logger with MLflow at ``uri`` and JSONL, log a step and finish, on a thread;
    the Logger, once that is done within :data:`STUCK_S`."""
    done: list[rlmetrics.Logger] = []

    def run() -> None:
        logger = rlmetrics.Logger(
            backends={"mlflow": {"tracking_uri": uri, **options}, "jsonl": {"path": path}}
        )
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        logger.finish()
        done.append(logger)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(STUCK_S)
    assert done, f"Logger() with an unreachable MLflow server was still stuck after {STUCK_S} s"
    return done[0]


@pytest.mark.parametrize("server", ["refused", "black-hole"])
def test_an_unreachable_tracking_server_costs_the_logger_its_bound_only(
    server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        if server == "black-hole":
            with BlackHole() as hole:  # the default bound: the documented one holds
                logger = _log_through(hole.endpoint, {}, tmp_path / "m.jsonl")
                assert hole.connected.is_set()
            uri, bound = hole.endpoint, DEFAULT_CONNECT_TIMEOUT_S
        else:
            uri, bound = f"http://127.0.0.1:{_refused_port()}", 1.0
            logger = _log_through(uri, {"connect_timeout_s": bound}, tmp_path / "m.jsonl")
    assert "mlflow" not in logger.backends and "jsonl" in logger.backends
    said = [r.getMessage() for r in caplog.records if "'mlflow'" in r.getMessage()]
    assert len(said) == 1, said
    assert uri in said[0] and f"within {bound:.1f} s" in said[0] and "skipped" in said[0]
    assert all(r.exc_info is None for r in caplog.records)
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [(r["step"], r["metrics"]) for r in rows] == [(1, {"loss": 1.0})]


def test_the_default_bound_is_the_documented_one() -> None:
    """docs/trackers.md states the bound in seconds; the constant must be that number."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "trackers.md"
    (row,) = [line for line in docs.read_text().splitlines() if "| `connect_timeout_s` |" in line]
    documented = float(row.rstrip(" |").rsplit("|", 1)[1].strip().removesuffix(" s"))
    assert documented == DEFAULT_CONNECT_TIMEOUT_S


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("sqlite:///mlflow.db", True),
        ("file:///tmp/mlruns", True),
        ("mlruns", True),
        ("/tmp/mlruns", True),
        ("http://127.0.0.1:5000", False),
        ("https://mlflow.example", False),
        ("databricks", False),
        ("databricks://profile", False),
        ("postgresql://u@127.0.0.1/db", False),
    ],
)
def test_only_a_store_on_this_disk_is_started_without_the_bound(uri: str, local: bool) -> None:
    assert _is_local(uri) is local
