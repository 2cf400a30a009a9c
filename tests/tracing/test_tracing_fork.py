"""A forked child has only the thread that forked: a wall-clock phase another thread of the
parent had open never ends there. A timer the child goes on using (a worker forked with the
driver's EfficiencyTimer) counts it up to the fork, not for the child's whole life. A real
fork, in a child process of the test, with a real thread, on a simulated clock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlmetrics.testing import run_to_exit

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_SCRIPT = """
import json, os, sys, threading
from rlmetrics.families.efficiency import EfficiencyTimer

class Clock:
    now = 1000.0

    def __call__(self):
        return self.now

clock = Clock()
timer = EfficiencyTimer(clock=clock)
waiting, release = threading.Event(), threading.Event()

def collector():
    with timer.time("idle/refit_bubble"):  # open on this thread when the main thread forks
        waiting.set()
        release.wait(60)

thread = threading.Thread(target=collector)
thread.start()
assert waiting.wait(60)
clock.now += 1.0
pid = os.fork()
if pid == 0:
    summaries = [timer.step_summary().seconds]
    clock.now += 5.0
    with timer.time("idle/buffer_starvation"):
        clock.now += 1.0
    summaries.append(timer.step_summary().seconds)
    with open(sys.argv[1], "w") as f:
        json.dump(summaries, f)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
thread.join(60)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_wall_clock_phase_open_on_another_thread_at_a_fork_ends_there_in_the_child(
    tmp_path: Path,
) -> None:
    # The child's second step read 6 s of idle/refit_bubble, a wait of a thread it does not
    # have, for as long as the child lived.
    out = tmp_path / "summaries.json"
    status, err = run_to_exit(_SCRIPT, (str(out),), timeout_s=60)
    assert status == 0, err
    first, second = json.loads(out.read_text())
    assert first == {"idle/refit_bubble": 1.0}  # the parent's second before the fork
    assert second == {"idle/buffer_starvation": 1.0}
