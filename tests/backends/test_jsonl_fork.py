"""A forked child (a DataLoader worker, a ``multiprocessing`` fork) logging through the
Logger it inherited: its rows reach the JSONL file as whole lines of their own, whatever the
parent's threads were doing at the fork.

Each case is a real script run to its exit; it forks while a thread of the parent is inside
the JSONL backend's write (holding its lock, half a row in the file object's buffer), and
the child logs and exits as a Python process does. The parent waits for the child within a
bound and says how it ended.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlmetrics.testing import run_to_exit

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_SCRIPT = """
import os, sys, threading, time
import rlmetrics
from rlmetrics.backends.jsonl import metrics_line

path, how = sys.argv[1], sys.argv[2]
logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
backend = logger.backends["jsonl"]
line = metrics_line(backend.run_id, {"parent": 1.0}, 1, "")
entered, release = threading.Event(), threading.Event()

def writer():
    # A sampler thread inside the backend's write when the process forks: it holds the
    # backend's lock, and half its row is in the file object's buffer.
    with backend._lock:
        backend._file.write(line[:20])
        entered.set()
        release.wait(30)
        backend._file.write(line[20:])
        backend._file.flush()

thread = threading.Thread(target=writer)
thread.start()
entered.wait(30)
pid = os.fork()
if pid == 0:
    logger.log_metrics({"child": 2.0}, step=2)
    if how == "exit":
        sys.exit(0)  # the interpreter's own exit: its objects are finalized
    os._exit(0)
deadline = time.monotonic() + 10
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status))
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung")
        break
    time.sleep(0.01)
release.set()
thread.join(30)
logger.finish()
"""


@pytest.mark.parametrize("how", ["exit", "_exit"])
def test_a_child_forked_mid_write_logs_whole_lines(how: str, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    status, err = run_to_exit(_SCRIPT, (str(path), how), timeout_s=60)
    assert status == 0, err
    lines = path.read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line whole: none torn or doubled
    assert sorted(row["step"] for row in rows if "step" in row) == [1, 2], lines
    # No end row: the child's run goes on in its parent (whose one row went round the
    # backend's own writing, so its finish has no row of its own to end).
    assert [row for row in rows if "step" not in row] == [], lines
    assert {row["run_id"] for row in rows} == {rows[0]["run_id"]}
    assert "Traceback" not in err, err


_SAMPLES_SCRIPT = """
import os, sys, time
import rlmetrics

path, how = sys.argv[1], sys.argv[2]
logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
logger.log_samples([{"prompt": "parent", "reward": 1.0}], step=1)
samples = logger.backends["jsonl"]._samples
# The samples file's thread mid-write when the process forks: half a line in its buffer.
written = path.replace(".jsonl", ".samples.jsonl")
deadline = time.monotonic() + 30
while not (os.path.exists(written) and os.path.getsize(written)) and time.monotonic() < deadline:
    time.sleep(0.01)
samples.backend._file.write('{"half": ')
pid = os.fork()
if pid == 0:
    logger.log_samples([{"prompt": "child", "reward": 2.0}], step=2)
    logger.finish()
    if how == "exit":
        sys.exit(0)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
samples.backend._file.write('1}\\n')
samples.backend._file.flush()
logger.finish()
"""


@pytest.mark.parametrize("how", ["exit", "_exit"])
def test_a_forked_child_logs_samples_of_its_own_in_whole_lines(how: str, tmp_path: Path) -> None:
    """A child's ``log_samples`` through the Logger it inherited is written (it was dropped:
    the samples file's thread is the parent's), and the parent's half-written line in that
    file's buffer never reaches the file from the child."""
    path = tmp_path / "m.jsonl"
    status, err = run_to_exit(_SAMPLES_SCRIPT, (str(path), how), timeout_s=60)
    assert status == 0, err
    lines = (tmp_path / "m.samples.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line whole
    assert sorted(row.get("sample", {}).get("prompt", "half") for row in rows) == [
        "child",
        "half",
        "parent",
    ], lines
    assert "belongs to the parent" not in err and "Traceback" not in err, err
