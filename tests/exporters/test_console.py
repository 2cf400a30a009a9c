"""The ``console`` exporter: a stdout that cannot be written (a training script piped into
``head``) is reported once per signal, never a traceback per export."""

from __future__ import annotations

import subprocess
import sys

from rlmetrics.testing import wait_until

_SCRIPT = """
import time
import rlmetrics

rlmetrics.declare("c", [rlmetrics.MetricSpec("rl.c.count", rlmetrics.Kind.COUNTER, key="c")])
handle = rlmetrics.start("console-test", exporters=["console"], export_interval_s=0.1)
print("started", flush=True)
input()  # the test closes the pipe, then says go
with rlmetrics.run():
    for step in range(8):
        with rlmetrics.step(step):
            rlmetrics.record("c", {"c": 1})
        time.sleep(0.1)
handle.shutdown(timeout_s=5)
print("finished", file=__import__("sys").stderr, flush=True)
"""


def test_a_stdout_nobody_reads_is_said_once_and_the_run_goes_on() -> None:
    """Before: ``python train.py | head -1`` logged the SDK's ERROR line and a
    BrokenPipeError traceback at every export (every 60 s by default), for metrics and for
    span batches alike, for the rest of the run."""
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    assert process.stdout.readline() == "started\n"
    process.stdout.close()  # what `| head -1` does once it has its line
    process.stdin.write("go\n")
    process.stdin.close()
    wait_until(lambda: process.poll() is not None, 60, "the script to finish")
    assert process.stderr is not None
    stderr = process.stderr.read()
    # 120 is the interpreter's own last flush of stdout into the closed pipe (Python's docs,
    # "Note on SIGPIPE"): what the exporter printed last may still sit in stdout's buffer,
    # which no library can empty. Whether it does depends on the pipe's timing (CI's did).
    assert process.returncode in (0, 120), stderr
    assert "finished" in stderr
    assert "Exception while exporting" not in stderr and "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "console exporter" in line]
    assert len(said) == 2, stderr  # once for the metrics, once for the spans
    assert all("BrokenPipeError" in line for line in said), stderr
