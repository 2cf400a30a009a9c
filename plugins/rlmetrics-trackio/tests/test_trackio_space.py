"""A Trackio run on a Hugging Face Space: its start bounded in time, its failures in one line.

The Hub cannot be reached from here, so a real socket on 127.0.0.1 stands in for it
(``HF_ENDPOINT``, which ``huggingface_hub`` reads at import): one that accepts and never
answers (:class:`rlmetrics.testing.BlackHole`), as a Hub behind a dropped route does, and one
that refuses, as a cluster without a route out does. Before: the first held ``Logger()`` for
over 5 minutes (the case was cut there); the second skipped Trackio with a traceback, as if the
plugin had a bug. Each case runs in a process of its own: ``huggingface_hub`` reads its
endpoint once, and the start the backend gave up on goes on on its thread.
"""

from __future__ import annotations

import os
import string
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st
from rlmetrics_trackio.backend import DEFAULT_CONNECT_TIMEOUT_S

from rlmetrics.testing.unanswered import (
    check_skipped_in_one_line,
    child_outcome,
    documented_connect_timeout_s,
)

#: The bound the case gives the backend.
BOUND_S = 2.0
#: A Logger() still constructing after this is stuck (a liveness bound, not a timed assert).
STUCK_S = 45.0
#: The child's whole life: importing Trackio on a busy two-core host, then the case.
CHILD_S = STUCK_S + 120.0

_CASE = """
import json, os, socket, sys
from pathlib import Path

from rlmetrics.testing import BlackHole

folder, stuck_s, bound = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
answer = sys.argv[4]
with BlackHole() as hole:
    if answer == "never":
        endpoint = hole.endpoint
    else:  # a port nothing listens on: refused at once
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    os.environ["HF_ENDPOINT"] = endpoint  # read by huggingface_hub at import, below
    from rlmetrics.testing.unanswered import start_beside_jsonl

    options = {"project": "rlmetrics-test", "connect_timeout_s": bound,
               "init_kwargs": {"space_id": "someone/rlmetrics-test"}}
    outcome = start_beside_jsonl("trackio", options, folder / "m.jsonl", stuck_s)
    connected = hole.connected.is_set()
print(json.dumps({**outcome, "connected": connected, "endpoint": endpoint}))
"""


def _outcome(tmp_path: Path, answer: str) -> dict[str, object]:
    env = {**os.environ, "HF_TOKEN": "hf_" + "k" * 34, "TRACKIO_DIR": str(tmp_path / "store")}
    return child_outcome(
        _CASE, str(tmp_path), str(STUCK_S), str(BOUND_S), answer, timeout_s=CHILD_S, env=env
    )


def test_a_hub_that_never_answers_costs_the_bound_only(tmp_path: Path) -> None:
    out = _outcome(tmp_path, "never")
    assert out["connected"], out["said"]  # the start reached the "Hub"
    check_skipped_in_one_line(out, "trackio", str(out["endpoint"]), BOUND_S)


def test_a_hub_that_cannot_be_reached_is_one_line_naming_it(tmp_path: Path) -> None:
    out = _outcome(tmp_path, "refused")
    assert not out["stuck"] and out["backends"] == ["jsonl"], out
    (said,) = [message for message in out["said"] if "'trackio'" in message]
    assert f"could not reach the Hugging Face Hub at {out['endpoint']}" in said, said
    assert "Space someone/rlmetrics-test" in said and "skipped" in said
    assert out["tracebacks"] == 0
    assert out["rows"] == [[1, {"loss": 1.0}]]


def test_the_default_bound_is_the_documented_one() -> None:
    """docs/trackers.md states the bound in seconds; the constant must be that number."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "trackers.md"
    assert documented_connect_timeout_s(docs, "trackio") == DEFAULT_CONNECT_TIMEOUT_S


@given(
    token=st.text(alphabet=string.ascii_letters + string.digits, min_size=8, max_size=40),
    host=st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,5})?", fullmatch=True),
    port=st.one_of(st.none(), st.integers(min_value=1, max_value=65535)),
    scheme=st.sampled_from(["http", "https"]),
)
def test_a_server_url_is_named_without_its_write_token(
    token: str, host: str, port: int | None, scheme: str
) -> None:
    """A Trackio server URL may carry its write token (``?write_token=``) or credentials:
    what the messages name is the scheme, host and port only."""
    from rlmetrics_trackio.backend import _remote

    assume(token not in host)
    netloc = f"{host}:{port}" if port else host
    for url in (f"{scheme}://{netloc}/?write_token={token}", f"{scheme}://u:{token}@{netloc}/"):
        named = _remote({"server_url": url})
        assert named == f"the Trackio server at {scheme}://{netloc}"
        assert token not in named
