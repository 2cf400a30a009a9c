"""A real process tree with known allocations, standing in for a Gym server and its workers:
a root interpreter that writes ``root_mib`` MiB and spawns children that write ``child_mib``
MiB each. Every process is bounded in lifetime and the tree is killed on exit."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

__all__ = ["MiB", "ProcessTree", "process_tree"]

MiB = 1 << 20
LIFETIME_S = 60  # no process of the tree outlives this, whatever happens to the test

_CHILD = f"""
import sys, time
blob = bytearray(b"\\x01") * (int(sys.argv[1]) << 20)  # written, so resident and private
print("ready", flush=True)
time.sleep({LIFETIME_S})
"""

_ROOT = f"""
import subprocess, sys, time
blob = bytearray(b"\\x01") * (int(sys.argv[1]) << 20)
children = [
    subprocess.Popen([sys.executable, "-c", {_CHILD!r}, sys.argv[2]], stdout=subprocess.PIPE)
    for _ in range(int(sys.argv[3]))
]
for child in children:
    assert child.stdout.readline().strip() == b"ready"
print("ready", *(child.pid for child in children), flush=True)
sys.stdin.read()  # until the test closes our stdin (or dies)
for child in children:
    child.kill()
    child.wait()
"""


@dataclass
class ProcessTree:
    root: subprocess.Popen[bytes]
    children: list[int]
    root_mib: int
    child_mib: int

    @property
    def pid(self) -> int:
        return self.root.pid

    def kill_child(self, pid: int) -> None:
        """Kill one child; the root does not reap it, so it stays in the tree as a zombie."""
        child = psutil.Process(pid)
        child.kill()
        deadline = time.monotonic() + 10
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.005)


@contextlib.contextmanager
def process_tree(root_mib: int, child_mib: int, children: int = 2) -> Iterator[ProcessTree]:
    root = subprocess.Popen(
        [sys.executable, "-c", _ROOT, str(root_mib), str(child_mib), str(children)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert root.stdout is not None
        line = root.stdout.readline().split()
        assert line[:1] == [b"ready"], f"the process tree did not start: {line!r}"
        yield ProcessTree(root, [int(pid) for pid in line[1:]], root_mib, child_mib)
    finally:
        with contextlib.suppress(psutil.Error):
            for process in psutil.Process(root.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    process.kill()
        root.kill()
        root.wait(10)
        for stream in (root.stdin, root.stdout):
            if stream is not None:
                stream.close()
