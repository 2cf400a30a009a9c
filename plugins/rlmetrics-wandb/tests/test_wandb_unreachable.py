"""A W&B server that does not answer costs ``Logger()`` the backend's ``connect_timeout_s``
(W&B's own ``init_timeout``, 90 s unless set), and one that refuses the API key costs its
answer; either way the backend is skipped in one line naming the server and W&B's reason: a
condition of the world, not a plugin's bug with a traceback. Before, W&B's ``CommError`` was
reported with its traceback, after W&B's 90 s against a black hole.

W&B's cloud cannot exist here, so a real socket on 127.0.0.1 stands in for it, given to W&B's
own client as ``WANDB_BASE_URL`` with an API key: one that accepts and never answers
(:class:`rlmetrics.testing.BlackHole`), and one that answers every request 401 with the reason
in GraphQL's errors, as W&B's does for a key it does not know. Each case runs in a process of
its own, as W&B keeps one service per process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wandb_helpers import WANDB_ENV

from rlmetrics.testing.unanswered import check_skipped_in_one_line, child_outcome

#: The bound the case gives the backend.
BOUND_S = 3.0
#: A Logger() still constructing after this is stuck (a liveness bound, not a timed assert:
#: W&B's own init_timeout is 90 s).
STUCK_S = 60.0
#: The child's whole life: importing W&B and starting its service on a busy host, then the case.
CHILD_S = STUCK_S + 120.0

_CASE = """
import json, os, sys
from pathlib import Path

from rlmetrics.testing import BlackHole, RefusingServer
from rlmetrics.testing.unanswered import start_beside_jsonl

server, folder = sys.argv[1], Path(sys.argv[2])
stuck_s, bound = float(sys.argv[3]), float(sys.argv[4])


def start(endpoint):
    os.environ["WANDB_BASE_URL"] = endpoint
    options = {"project": "rlmetrics-test", "mode": "online", "dir": folder / "wandb"}
    return start_beside_jsonl(
        "wandb", {**options, "connect_timeout_s": bound}, folder / "m.jsonl", stuck_s
    )


if server == "black-hole":
    with BlackHole() as hole:
        outcome = start(hole.endpoint)
        reached = hole.connected.is_set()
    endpoint = hole.endpoint
else:
    # W&B's answer to an API key it does not know: 401, the reason in GraphQL's errors.
    with RefusingServer(401, {"errors": [{"message": "invalid api key"}]}) as refusing:
        outcome = start(refusing.endpoint)
        reached = refusing.requests > 0
    endpoint = refusing.endpoint
print(json.dumps({**outcome, "reached": reached, "host": endpoint}))
"""


@pytest.mark.parametrize("server", ["black-hole", "refusing the key"])
def test_an_unstarted_online_run_costs_its_bound_and_one_line(server: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        **WANDB_ENV,
        "WANDB_MODE": "online",
        "WANDB_API_KEY": "k" * 40,
        "WANDB_ERROR_REPORTING": "false",  # no crash reports leave this machine
    }
    out = child_outcome(
        _CASE,
        *(server, str(tmp_path), str(STUCK_S), str(BOUND_S)),
        timeout_s=CHILD_S,
        env=env,
        cwd=tmp_path,
    )
    assert out["reached"], out["said"]
    check_skipped_in_one_line(out, "wandb", out["host"], BOUND_S)
    if server == "refusing the key":
        assert "invalid api key" in out["said"][0]


def test_connect_timeout_s_is_wandbs_init_timeout_unless_init_kwargs_set_it() -> None:
    import wandb
    from rlmetrics_wandb.backend import _init_timeout

    from rlmetrics.identity import with_tracker_setting

    assert with_tracker_setting(None, "init_timeout", 3.0) == {"init_timeout": 3.0}
    given = {"console": "off"}
    assert with_tracker_setting(given, "init_timeout", 3.0) == {**given, "init_timeout": 3.0}
    assert with_tracker_setting({"init_timeout": 9}, "init_timeout", 3.0) == {"init_timeout": 9}
    theirs = wandb.Settings(console="off")
    ours = with_tracker_setting(theirs, "init_timeout", 3.0)
    assert ours.init_timeout == 3.0 and ours.console == "off"
    assert theirs.init_timeout == 90  # the user's object is left as it was
    assert (
        with_tracker_setting(wandb.Settings(init_timeout=9), "init_timeout", 3.0).init_timeout == 9
    )
    assert _init_timeout(ours) == 3.0
    assert _init_timeout(None) == wandb.Settings().init_timeout == 90


_NO_KEY = """
import json, sys
from pathlib import Path

from rlmetrics.testing.unanswered import start_beside_jsonl

folder = Path(sys.argv[1])
options = {"project": "rlmetrics-test", "mode": "online", "dir": folder / "wandb"}
print(json.dumps(start_beside_jsonl("wandb", options, folder / "m.jsonl", 60.0)))
"""


def test_an_online_run_without_an_api_key_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    """The first hour's commonest W&B failure, a job without ``wandb login``: one line with
    W&B's own advice, not a plugin's bug with two tracebacks (as before)."""
    env = {
        **os.environ,
        **WANDB_ENV,
        "WANDB_MODE": "online",
        "HOME": str(tmp_path),  # no ~/.netrc holding a key
        "WANDB_BASE_URL": "http://127.0.0.1:9",  # were a key found, nothing leaves this host
        "WANDB_ERROR_REPORTING": "false",
    }
    env.pop("WANDB_API_KEY", None)
    out = child_outcome(_NO_KEY, str(tmp_path), timeout_s=CHILD_S, env=env, cwd=tmp_path)
    assert not out["stuck"]
    assert out["backends"] == ["jsonl"]
    (said,) = [message for message in out["said"] if "'wandb'" in message]
    assert "skipped" in said and "No API key configured. Use `wandb login`" in said, said
    assert out["tracebacks"] == 0
    assert out["rows"] == [[1, {"loss": 1.0}]]
