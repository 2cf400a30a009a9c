"""System metrics once per host: two real processes of one run on this host, each with the
monitor and an in-memory reader; the host's series is exported by one of them (read back from
each process's own collections), and when that one is SIGKILLed the other takes over at its
next cycle."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_support import ExpositionServer, node_info, render_exposition
from rlmetrics_ray.election import HostElection, lock_path

GiB = 1024**3
PROCESS = Path(__file__).with_name("ray_support_monitor_process.py")
#: Starting a process that imports the SDK, and its first cycles, on a loaded 2-core host.
START_S = 120.0


class MonitorProcess:
    """The subprocess, its JSON lines read on a thread into a queue."""

    def __init__(self, nodes: list[dict[str, Any]], run_id: str, lock_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(PROCESS), json.dumps(nodes), run_id, str(lock_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.last: dict[str, Any] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def until(self, predicate: Any, what: str, timeout_s: float = START_S) -> dict[str, Any]:
        """The first line (from now on) that ``predicate`` holds for; fails after ``timeout_s``."""
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                pytest.fail(f"pid {self.process.pid}: no line with {what} in {timeout_s} s")
            self.last = line
            if predicate(line):
                return line

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[MonitorProcess]]:
    started: list[MonitorProcess] = []
    yield started
    for process in started:
        process.kill()


def test_the_host_is_exported_by_one_process_and_the_other_takes_over_when_it_is_killed(
    tmp_path: Path, processes: list[MonitorProcess]
) -> None:
    server = ExpositionServer(render_exposition(1 * GiB, 4 * GiB, 3 * GiB, 16 * GiB))
    try:
        nodes = [node_info("a" * 56, "host-1", server.port)]
        run_id = f"election-{uuid.uuid4().hex[:8]}"
        first = MonitorProcess(nodes, run_id, tmp_path)
        processes.append(first)
        first.until(lambda line: line["used"] > 0, "the host exported")
        second = MonitorProcess(nodes, run_id, tmp_path)
        processes.append(second)
        # The second cycles without being elected: it exports nothing while the first does.
        waiting = second.until(lambda line: line["cycles"] >= 3, "three cycles")
        assert (waiting["used"], waiting["elected"]) == (0, False)
        assert first.until(lambda line: True, "a line")["used"] > 0
        # SIGKILL the elected one: the kernel frees its lock; the other's next cycle takes it.
        first.kill()
        at_kill = second.until(lambda line: True, "a line")["cycles"]
        taken = second.until(lambda line: line["used"] > 0, "the host taken over")
        assert taken["elected"] is True
        # Within one interval: at most the cycle in flight at the kill, then the next.
        assert taken["cycles"] <= at_kill + 2
    finally:
        server.close()


def test_one_election_per_host_and_run_in_one_process_too(tmp_path: Path) -> None:
    ours, theirs = HostElection("run-a", tmp_path), HostElection("run-a", tmp_path)
    other_run = HostElection("run-b", tmp_path)
    assert ours() and ours()  # held: True for as long as it is held
    assert not theirs()
    assert other_run()  # another run competes for its own lock
    ours.release()
    assert theirs()
    assert lock_path("run-a", tmp_path).read_text().strip() == str(os.getpid())
    theirs.release()
    other_run.release()


def test_the_election_can_be_turned_off_and_its_directory_must_be_a_path(tmp_path: Path) -> None:
    from rlmetrics_ray import active_monitor, configure

    from rlmetrics.testing import in_memory_telemetry, isolated_state

    with pytest.raises(TypeError, match="lock_dir must be a path"):
        configure(lock_dir=3)
    configure(nodes=lambda: [], interval_s=3600.0, elect=False)
    with isolated_state(), in_memory_telemetry():
        monitor = active_monitor()
        assert monitor is not None and monitor.election is None and monitor.elected
    configure(elect=True, lock_dir=tmp_path)
    with isolated_state(), in_memory_telemetry(run_id="run-c"):
        monitor = active_monitor()
        assert monitor is not None and isinstance(monitor.election, HostElection)
        assert monitor.election.path == lock_path("run-c", tmp_path)


def test_a_released_election_leaves_no_lock_file(tmp_path: Path) -> None:
    # One file per run and host piled up in /tmp, one for every run ever monitored there.
    ours = HostElection("run-a", tmp_path)
    assert ours() and lock_path("run-a", tmp_path).exists()
    ours.release()
    assert list(tmp_path.iterdir()) == []
    theirs = HostElection("run-a", tmp_path)
    assert theirs() and not HostElection("run-a", tmp_path)()
    theirs.release()


def test_a_holder_whose_lock_file_was_removed_competes_again(tmp_path: Path) -> None:
    # A cleaner (systemd-tmpfiles, tmpreaper) or a releasing holder removed the file: its
    # lock no longer stands for the run, so a second process must not report the host too.
    ours, theirs = HostElection("run-a", tmp_path), HostElection("run-a", tmp_path)
    assert ours()
    lock_path("run-a", tmp_path).unlink()
    assert theirs()  # the file made anew, and locked
    assert not ours()  # at its next cycle the old holder sees the file is not its own
    assert theirs()
    theirs.release()
    assert ours()


def test_a_lock_taken_on_a_file_just_removed_is_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The release's race: ``theirs`` opened the file, then the holder released (removed and
    # closed it) before ``theirs`` locked it. The lock it then takes is on a removed file.
    from rlmetrics_ray import election

    ours, theirs = HostElection("run-a", tmp_path), HostElection("run-a", tmp_path)
    assert ours()
    real_flock = election.fcntl.flock
    calls = []

    def released_in_between(fd: int, operation: int) -> None:
        if not calls:
            ours.release()
        calls.append(fd)
        real_flock(fd, operation)

    monkeypatch.setattr(election.fcntl, "flock", released_in_between)
    assert theirs()
    monkeypatch.setattr(election.fcntl, "flock", real_flock)
    assert len(calls) == 2  # it locked the removed file, saw so and took the new one
    assert not HostElection("run-a", tmp_path)()
    theirs.release()
