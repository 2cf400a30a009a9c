"""An online SwanLab run: started under the rlmetrics run id, and bounded in time.

SwanLab's cloud cannot exist here, so a real socket on 127.0.0.1 stands in for it: one that
accepts and never answers (:class:`rlmetrics.testing.BlackHole`), as a server behind a dropped
route does. SwanLab's own client is pointed at it (``SWANLAB_API_HOST``) with an API key, so it
goes as far as an online start goes before the network: its argument checks, then logging in.

- The start must reach the server. Online, SwanLab refuses a run id under its default
  ``resume="never"`` before sending anything, and the backend names every run by the run id.
- ``Logger()`` must cost the backend's ``connect_timeout_s``, not SwanLab's own timeouts and
  retries (75 s against a black hole on this machine): the backend is skipped in one line and
  the loop goes on with the others.
- Without an API key, one line with SwanLab's reason, and no prompt for one.

The black-hole case runs in a process of its own: the login the backend gave up on goes on
with SwanLab's retries on its thread for a minute, and could start a run into whatever test
runs next here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rlmetrics_swanlab.backend import DEFAULT_CONNECT_TIMEOUT_S

from rlmetrics.testing.unanswered import (
    check_skipped_in_one_line,
    child_outcome,
    documented_connect_timeout_s,
    start_beside_jsonl,
)

#: The bound the case gives the backend.
BOUND_S = 2.0
#: A Logger() still constructing after this is stuck (a liveness bound, not a timed assert:
#: SwanLab's own login timeouts and retries hold it for over a minute).
STUCK_S = 45.0
#: The child's whole life: importing SwanLab on a busy two-core host, then the case.
CHILD_S = STUCK_S + 120.0

_CASE = """
import json, os, sys
from pathlib import Path

import swanlab
from rlmetrics.testing import BlackHole
from rlmetrics.testing.unanswered import start_beside_jsonl

folder, stuck_s, bound = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
with BlackHole() as hole:
    os.environ["SWANLAB_API_HOST"] = f"{hole.endpoint}/api"
    os.environ["SWANLAB_WEB_HOST"] = hole.endpoint
    # Built after the hosts are set: a Settings object carries the hosts it was made with.
    settings = swanlab.Settings(
        terminal={"proxy_type": "none"},
        probe={"monitor": False, "hardware": False, "git": False, "requirements": False},
    )
    outcome = start_beside_jsonl(
        "swanlab",
        {
            "project": "rlmetrics-test",
            "mode": "online",
            "log_dir": folder / "swanlog",
            "connect_timeout_s": bound,
            "init_kwargs": {"settings": settings},
        },
        folder / "m.jsonl",
        stuck_s,
    )
    connected = hole.connected.is_set()
print(json.dumps({**outcome, "connected": connected, "host": hole.endpoint}))
"""


def test_an_unanswered_online_start_reaches_the_server_and_costs_its_bound_only(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "SWANLAB_API_KEY": "k" * 21}
    out = child_outcome(
        _CASE, str(tmp_path), str(STUCK_S), str(BOUND_S), timeout_s=CHILD_S, env=env
    )
    # SwanLab took the run id and went on to log in: the start reached the server.
    assert out["connected"], out["said"]
    check_skipped_in_one_line(out, "swanlab", out["host"], BOUND_S)


def test_the_default_bound_is_the_documented_one() -> None:
    """docs/trackers.md states the bound in seconds; the constant must be that number."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "trackers.md"
    assert documented_connect_timeout_s(docs, "swanlab") == DEFAULT_CONNECT_TIMEOUT_S


def test_an_online_run_without_an_api_key_is_one_line_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job without ``swanlab login`` (the autouse fixture leaves no key, no saved login):
    one line with SwanLab's reason, not a plugin's bug with two tracebacks (as before)."""
    monkeypatch.setenv("SWANLAB_API_HOST", "http://127.0.0.1:9/api")  # nothing leaves this host
    options = {"project": "rlmetrics-test", "mode": "online", "log_dir": tmp_path / "swanlog"}
    out = start_beside_jsonl("swanlab", options, tmp_path / "m.jsonl", STUCK_S)
    assert out["backends"] == ["jsonl"]
    (said,) = [message for message in out["said"] if "'swanlab'" in message]
    assert "skipped" in said and "no API key was provided" in said, said
    assert out["tracebacks"] == 0
    assert out["rows"] == [[1, {"loss": 1.0}]]
