"""A forked child does not export the parent's values, under the parent's run id or at all,
until it calls ``rlmetrics.start()`` itself; and its exit never waits on the parent's exporter.

Real forks of this test process, exporting to a real OTLP receiver on 127.0.0.1. A child
reports back only through its exit status (it must not run pytest's machinery).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

import rlmetrics
from rlmetrics.plugins import register
from rlmetrics.telemetry import DEFAULT_SHUTDOWN_TIMEOUT_S
from rlmetrics.testing import BlackHole, OtlpReceiver

from ._peers import INTERVAL_S

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

REWARD = "rl.reward.mean"
#: How long a child that started its own telemetry may take to export on its way out.
CHILD_SHUTDOWN_S = 30.0


def _fork(child: Callable[[], bool]) -> int:
    """Run ``child`` in a forked process; its exit status is 0 when it returned True."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 1
        try:
            status = 0 if child() else 3
        except BaseException:
            traceback.print_exc()  # on the child's stderr, which pytest shows on failure
        finally:
            os._exit(status)
    return pid


def _wait(pid: int, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    raise AssertionError(f"child {pid} did not exit within {timeout_s} s")


def _start(receiver: OtlpReceiver, run_id: str) -> rlmetrics.Telemetry:
    return rlmetrics.start(
        "fork-test",
        run_id=run_id,
        exporters=("otlp",),
        otlp_endpoint=receiver.endpoint,
        export_interval_s=INTERVAL_S,
    )


def _rewards(receiver: OtlpReceiver) -> dict[str, set[float]]:
    """Every rl.reward.mean value received, by the run id of the resource it came with."""
    found: dict[str, set[float]] = {}
    for point in receiver.points():
        if point.name == REWARD:
            found.setdefault(point.resource["rlmetrics.run.id"], set()).add(point.value)  # type: ignore[arg-type]
    return found


def test_a_child_that_never_starts_exports_nothing(otlp_receiver: OtlpReceiver) -> None:
    handle = _start(otlp_receiver, "parent")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")
    otlp_receiver.wait_for(lambda r: _rewards(r), what="the parent's reward")

    def child() -> bool:
        off = not rlmetrics.is_exporting() and rlmetrics.current() is None
        logger.log_metrics({"reward": 5.0}, step=2, prefix="train")  # a no-op in the child
        time.sleep(10 * INTERVAL_S)  # long enough for an inherited reader to export often
        return off

    pid = _fork(child)
    handle.shutdown(timeout_s=5)  # the parent stops exporting at once
    received = len(otlp_receiver.requests)
    assert _wait(pid) == 0
    assert len(otlp_receiver.requests) == received, "the child exported"
    assert _rewards(otlp_receiver) == {"parent": {1.0}}


def test_a_child_that_starts_exports_its_own_values_under_its_own_run_id(
    otlp_receiver: OtlpReceiver,
) -> None:
    handle = _start(otlp_receiver, "parent")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")

    def child() -> bool:
        # The receiver runs in the parent: the child's shutdown makes its final export. Its
        # bound is generous: a loaded machine can take seconds to open the child's channel,
        # and a child that exports nothing fails the wait below all the same.
        handle = _start(otlp_receiver, "child")
        try:
            rlmetrics.Logger(backends={}).log_metrics({"reward": 2.0}, step=1, prefix="train")
        finally:
            handle.shutdown(timeout_s=CHILD_SHUTDOWN_S)
        return True

    pid = _fork(child)
    for step in range(2, 12):
        logger.log_metrics({"reward": 1.0}, step=step, prefix="train")
    assert _wait(pid, timeout_s=2 * CHILD_SHUTDOWN_S) == 0
    otlp_receiver.wait_for(
        lambda r: {"parent", "child"} <= set(_rewards(r)), what="both processes' rewards"
    )
    handle.shutdown(timeout_s=5)
    assert _rewards(otlp_receiver) == {"parent": {1.0}, "child": {2.0}}


def test_children_exit_without_waiting_on_the_parents_exporter(blackhole: BlackHole) -> None:
    """The parent exports to a collector that never answers: a child whose exit ran the
    parent's shutdown would wait out its bound (5 s) at the least. A child that does not takes
    a fraction of a second, or more on a loaded machine: the bound itself tells them apart."""
    from rlmetrics.telemetry import _shutdown_at_exit

    with rlmetrics.start(
        exporters=("otlp",), otlp_endpoint=blackhole.endpoint, export_interval_s=INTERVAL_S
    ):
        rlmetrics.Logger(backends={}).log_metrics({"reward": 1.0}, step=1, prefix="train")
        took = []
        for _ in range(5):
            started = time.monotonic()
            # The child runs rlmetrics' exit handler, as a normal exit does. Not every atexit
            # handler of the process: other libraries' act on what the child shares with its
            # parent (W&B's removes its media folder, which the parent's W&B runs still write
            # through; a later W&B test in this process then lost its sample tables).
            pid = _fork(lambda: _shutdown_at_exit() is None)
            assert _wait(pid) == 0
            took.append(time.monotonic() - started)
    assert max(took) < DEFAULT_SHUTDOWN_TIMEOUT_S, f"child exits took {took}"


class _HoldsTheLock:
    """An inline backend that parks the calling thread inside the Logger's lock."""

    inline = True
    entered = threading.Event()
    release = threading.Event()

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        if metrics.get("park"):
            self.entered.set()
            self.release.wait(30)

    def finish(self) -> None: ...


class _Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("holds", _HoldsTheLock)


def test_a_lock_held_by_another_thread_at_fork_does_not_deadlock_the_child() -> None:
    register(_Offers(), "offers-holds")
    logger = rlmetrics.Logger(backends={"holds": {}})
    _HoldsTheLock.entered.clear()
    _HoldsTheLock.release.clear()
    sampler = threading.Thread(target=lambda: logger.log_metrics({"park": 1}, step=1))
    sampler.start()
    assert _HoldsTheLock.entered.wait(10)
    try:
        # The child inherits the Logger's lock held by a thread it does not have.
        pid = _fork(lambda: logger.log_metrics({"x": 1}, step=2) is None)
        assert _wait(pid, timeout_s=10) == 0
    finally:
        _HoldsTheLock.release.set()
        sampler.join(10)
