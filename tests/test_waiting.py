"""rlmetrics' bounded waits keep their bound and let the main thread's signal handlers run
while they wait, whichever thread the kernel handed the signal to."""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlmetrics import _waiting
from rlmetrics.testing import main_thread_blocked_in, wait_until

#: Every wait below would block this long if its handler waited for its end. A handler run
#: within a slice comes in well under half of it on the busiest machine: told apart by a
#: minute, never by load.
FOREVER_S = 120.0


def _interrupted(wait: Callable[[], Any]) -> None:
    """``wait()`` ends in the handler's exception, well before its bound."""
    started = time.monotonic()
    with pytest.raises(Handled):
        wait()
    took = time.monotonic() - started
    assert took < FOREVER_S / 2, f"the handler ran only after {took:.1f} s, at the wait's end"


class Handled(Exception):
    """What the test's signal handler raises in the main thread."""


@pytest.fixture
def signalled_elsewhere() -> Iterator[Callable[[Callable[..., Any]], None]]:
    """Arm: once the main thread waits in ``function`` (one of ``_waiting``'s), a thread of
    the test's sends SIGUSR2 to itself, as the kernel may hand a process's signal to any
    thread; the main thread's handler raises :class:`Handled`."""
    assert threading.current_thread() is threading.main_thread()

    def handler(*_: Any) -> None:
        raise Handled

    previous = signal.signal(signal.SIGUSR2, handler)
    threads: list[threading.Thread] = []

    def arm(function: Callable[..., Any]) -> None:
        def signal_self() -> None:
            wait_until(lambda: main_thread_blocked_in(function), 60, function.__name__)
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)

        thread = threading.Thread(target=signal_self, daemon=True)
        thread.start()
        threads.append(thread)

    try:
        yield arm
    finally:
        for thread in threads:
            thread.join(FOREVER_S)
        signal.signal(signal.SIGUSR2, previous)


def test_join_runs_a_signal_handler_while_it_waits(
    signalled_elsewhere: Callable[[Callable[..., Any]], None],
) -> None:
    never = threading.Event()
    worker = threading.Thread(target=never.wait, daemon=True)
    worker.start()
    signalled_elsewhere(_waiting.join)
    try:
        _interrupted(lambda: _waiting.join(worker, FOREVER_S))
    finally:
        never.set()


def test_wait_runs_a_signal_handler_while_it_waits(
    signalled_elsewhere: Callable[[Callable[..., Any]], None],
) -> None:
    signalled_elsewhere(_waiting.wait)
    _interrupted(lambda: _waiting.wait(threading.Event(), FOREVER_S))


def test_wait_for_runs_a_signal_handler_while_it_waits(
    signalled_elsewhere: Callable[[Callable[..., Any]], None],
) -> None:
    condition = threading.Condition()
    signalled_elsewhere(_waiting.wait_for)
    with condition:
        _interrupted(lambda: _waiting.wait_for(condition, lambda: False, FOREVER_S))


def test_put_runs_a_signal_handler_while_it_waits(
    signalled_elsewhere: Callable[[Callable[..., Any]], None],
) -> None:
    full: queue.Queue[int] = queue.Queue(maxsize=1)
    full.put(1)
    signalled_elsewhere(_waiting.put)
    _interrupted(lambda: _waiting.put(full, 2, FOREVER_S))


def test_the_waits_keep_their_bound_and_say_how_they_ended() -> None:
    ended = threading.Thread(target=lambda: None)
    ended.start()
    assert _waiting.join(ended, FOREVER_S) is True
    never = threading.Event()
    alive = threading.Thread(target=never.wait, daemon=True)
    alive.start()
    try:
        assert _waiting.join(alive, 0.12) is False  # more than one slice, then given up
        assert _waiting.join(alive, -1.0) is False
    finally:
        never.set()
    assert _waiting.wait(threading.Event(), 0.0) is False
    set_event = threading.Event()
    set_event.set()
    assert _waiting.wait(set_event, FOREVER_S) is True
    condition = threading.Condition()
    with condition:
        assert _waiting.wait_for(condition, lambda: True, FOREVER_S) is True
        assert _waiting.wait_for(condition, lambda: False, 0.0) is False
    room: queue.Queue[int] = queue.Queue(maxsize=1)
    _waiting.put(room, 1, 0.0)
    with pytest.raises(queue.Full):
        _waiting.put(room, 2, 0.12)
    assert room.get_nowait() == 1 and room.empty()


@pytest.mark.parametrize(
    ("timeout_s", "bound"),
    [
        *[(0, True), (0.05, True), (float("inf"), True), (30, True)],
        *[(-1, False), (float("nan"), False), ("5", False), (True, False), (None, False)],
    ],
)
def test_a_bound_is_a_number_of_0_or_more(timeout_s: Any, bound: bool) -> None:
    assert _waiting.is_bound(timeout_s) is bound
