"""A tracking server that cannot be reached costs ``Logger()`` the backend's
``connect_timeout_s``, never MLflow's own retries (125 s against a black hole, 251 s against a
refused port with MLflow's defaults): the backend is skipped, named once, and the loop goes on
with the others. Both servers are real sockets on 127.0.0.1.

Each case runs in a process of its own: the connection the backend gave up on goes on with
MLflow's retries on its thread for minutes, logging urllib3's "Retrying" warnings, which
would land in whatever test runs next in this process; the child's exit ends them."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlmetrics_mlflow.backend import DEFAULT_CONNECT_TIMEOUT_S, _is_local

from rlmetrics.testing import RefusingServer
from rlmetrics.testing.unanswered import (
    check_skipped_in_one_line,
    child_outcome,
    documented_connect_timeout_s,
    start_beside_jsonl,
)

#: A Logger() still constructing after this is stuck (a liveness bound, not a timed assert:
#: MLflow's own retries would hold it for minutes).
STUCK_S = 90.0
#: The child's whole life: importing MLflow on a busy two-core host, then the case.
CHILD_S = STUCK_S + 120.0

_CASE = """
import json, socket, sys
from pathlib import Path

from rlmetrics.testing import BlackHole
from rlmetrics.testing.unanswered import start_beside_jsonl

server, path, stuck_s = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
connected = None
if server == "black-hole":
    with BlackHole() as hole:  # the default bound: the documented one holds
        outcome = start_beside_jsonl("mlflow", {"tracking_uri": hole.endpoint}, path, stuck_s)
        connected = hole.connected.is_set()
    uri, bound = hole.endpoint, None
else:
    with socket.socket() as sock:  # a port nothing listens on: bound, then closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri, bound = f"http://127.0.0.1:{port}", 1.0
    options = {"tracking_uri": uri, "connect_timeout_s": bound}
    outcome = start_beside_jsonl("mlflow", options, path, stuck_s)
print(json.dumps({**outcome, "connected": connected, "uri": uri, "bound": bound}))
"""


@pytest.mark.parametrize("server", ["refused", "black-hole"])
def test_an_unreachable_tracking_server_costs_the_logger_its_bound_only(
    server: str, tmp_path: Path
) -> None:
    out = child_outcome(_CASE, server, str(tmp_path / "m.jsonl"), str(STUCK_S), timeout_s=CHILD_S)
    if server == "black-hole":
        assert out["connected"]
    bound = DEFAULT_CONNECT_TIMEOUT_S if out["bound"] is None else out["bound"]
    check_skipped_in_one_line(out, "mlflow", out["uri"], bound)


def test_the_default_bound_is_the_documented_one() -> None:
    """docs/trackers.md states the bound in seconds; the constant must be that number."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "trackers.md"
    assert documented_connect_timeout_s(docs, "mlflow") == DEFAULT_CONNECT_TIMEOUT_S


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


def test_a_server_refusing_the_credentials_is_one_line_with_its_reason(tmp_path: Path) -> None:
    """A tracking server that answers 401 (an expired token): MLflow's own error, in one line
    naming the server, not a plugin's bug with its traceback (as before)."""
    answer = {"error_code": "UNAUTHENTICATED", "message": "Invalid access token"}
    with RefusingServer(401, answer) as server:
        options = {"tracking_uri": server.endpoint}
        out = start_beside_jsonl("mlflow", options, tmp_path / "m.jsonl", STUCK_S)
    assert server.requests > 0
    assert out["backends"] == ["jsonl"]
    (said,) = [message for message in out["said"] if "'mlflow'" in message]
    assert server.endpoint in said and "Invalid access token" in said, said
    assert out["tracebacks"] == 0
    assert out["rows"] == [[1, {"loss": 1.0}]]
