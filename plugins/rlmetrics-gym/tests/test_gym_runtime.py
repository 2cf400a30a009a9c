"""Event-loop lag on a real loop, garbage-collector metrics under concurrent exports, and the
process.* series of this process, read back from the in-memory reader."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from gym_support_server import wait_until
from opentelemetry.sdk.metrics import MetricsTimeoutError
from rlmetrics_gym import runtime as runtime_module
from rlmetrics_gym.runtime import (
    EVENT_LOOP_ATTR,
    FD_COUNT,
    FD_COUNT_UNIX,
    GC_GENERATION_ATTR,
    LAG_MS,
    TASKS,
    enable_runtime_metrics,
    event_loop_sampler,
    garbage_collector,
    process,
    report_file_descriptors_as,
    start_event_loop_sampler,
)

from rlmetrics.testing import (
    Point,
    data_points,
    in_memory_telemetry,
    isolated_state,
    points,
    single,
)

MiB = 1 << 20


@pytest.fixture
def runtime(telemetry: Any) -> Any:
    """Started telemetry with the gc and process series enabled: ``(handle, reader)``."""
    enable_runtime_metrics()
    return telemetry


def _runtime_names(reader: Any) -> set[str]:
    return {p.name for p in points(reader) if p.name.startswith(("gym.gc.", "process."))}


def _by_generation(found: list[Point], name: str) -> dict[str, Point]:
    return {p.attributes[GC_GENERATION_ATTR]: p for p in found if p.name == name}


# -- event loop ----------------------------------------------------------------------------------

INTERVAL_S = 0.02
BLOCK_S = 0.25


def test_a_blocked_loop_shows_at_least_the_blocked_time_as_lag(telemetry: Any) -> None:
    _, reader = telemetry

    def max_lag_ms() -> float:
        found = [
            p
            for p in data_points(reader.get_metrics_data(), LAG_MS)
            if p.attributes.get(EVENT_LOOP_ATTR) == "driver"
        ]
        return max((p.max for p in found), default=0.0)

    async def main() -> None:
        async with event_loop_sampler("driver", interval_s=INTERVAL_S) as sampler:
            assert sampler.running
            await asyncio.sleep(3 * INTERVAL_S)  # a few ordinary samples first
            assert max_lag_ms() < BLOCK_S * 1000
            # Synchronous work holds the loop for one interval plus BLOCK_S: the sampler's
            # timer, due within one interval of the block's start, runs at least BLOCK_S late.
            time.sleep(INTERVAL_S + BLOCK_S)
            deadline = time.monotonic() + 5
            while max_lag_ms() < BLOCK_S * 1000 and time.monotonic() < deadline:
                await asyncio.sleep(INTERVAL_S)
        assert not sampler.running

    asyncio.run(main())
    assert max_lag_ms() >= BLOCK_S * 1000
    lag = single(points(reader), LAG_MS, **{EVENT_LOOP_ATTR: "driver"})
    assert lag.unit == "ms"
    assert lag.count is not None and lag.count >= 2  # ordinary samples and the late one


def test_task_count_is_reported_only_when_enabled_and_retracted_at_stop(telemetry: Any) -> None:
    _, reader = telemetry

    def tasks(role: str) -> float | None:
        found = [p for p in points(reader) if p.name == TASKS]
        return next((p.value for p in found if p.attributes[EVENT_LOOP_ATTR] == role), None)

    async def main() -> None:
        release = asyncio.Event()
        parked = [asyncio.create_task(release.wait()) for _ in range(5)]
        sampler = start_event_loop_sampler("server", interval_s=INTERVAL_S, task_count=True)
        deadline = time.monotonic() + 5
        # main + sampler + the 5 parked tasks
        while (tasks("server") or 0) < 7 and time.monotonic() < deadline:
            await asyncio.sleep(INTERVAL_S)
        assert tasks("server") == 7
        release.set()
        await asyncio.gather(*parked)
        await sampler.aclose()
        assert not sampler.running

    asyncio.run(main())
    assert tasks("server") is None  # retracted when the sampler stopped

    async def without_task_count() -> None:
        async with event_loop_sampler("head_server", interval_s=INTERVAL_S):
            await asyncio.sleep(3 * INTERVAL_S)

    asyncio.run(without_task_count())
    assert tasks("head_server") is None
    assert single(points(reader), LAG_MS, **{EVENT_LOOP_ATTR: "head_server"}).count


def test_a_loop_has_one_sampler_which_ends_with_the_loop(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    samplers: list[Any] = []

    async def main() -> None:
        first = start_event_loop_sampler("server", interval_s=INTERVAL_S)
        again = start_event_loop_sampler("server", interval_s=INTERVAL_S)
        other = start_event_loop_sampler("driver", interval_s=1.0)  # settings ignored, warned
        assert first is again is other
        samplers.append(first)
        # No stop(): asyncio.run cancels the sampler with the loop's other tasks.

    asyncio.run(main())
    assert not samplers[0].running
    assert "already sampled" in caplog.text

    async def next_loop() -> None:
        sampler = start_event_loop_sampler("server", interval_s=INTERVAL_S)
        assert sampler is not samplers[0] and sampler.running
        sampler.stop()

    asyncio.run(next_loop())

    async def nested_block() -> None:
        outer = start_event_loop_sampler("server", interval_s=INTERVAL_S)
        async with event_loop_sampler("server", interval_s=INTERVAL_S) as inner:
            assert inner is outer
        assert outer.running  # the block did not start it, so it does not stop it
        await outer.aclose()

    asyncio.run(nested_block())


def test_sampler_arguments_are_checked_early() -> None:
    with pytest.raises(ValueError, match="role 'worker'"):
        asyncio.run(_start("worker", 0.1))
    with pytest.raises(ValueError, match="interval_s must be positive"):
        asyncio.run(_start("server", 0))
    with pytest.raises(RuntimeError):
        start_event_loop_sampler("server")  # no running loop in this thread


async def _start(role: str, interval_s: float) -> None:
    start_event_loop_sampler(role, interval_s=interval_s).stop()


# -- garbage collector ---------------------------------------------------------------------------


def _make_cycles(n: int) -> None:
    for _ in range(n):
        a: list[Any] = []
        b: list[Any] = [a]
        a.append(b)


@pytest.fixture
def frequent_gc() -> Iterator[None]:
    """Collections everywhere, the exporter's thread included (while it holds SDK locks)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(20, 2, 2)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def test_gc_metrics_under_concurrent_exports_without_deadlock(
    runtime: Any, frequent_gc: None
) -> None:
    _, reader = runtime
    cycles = 50
    stop = threading.Event()
    exports = [0]
    errors: list[BaseException] = []

    def export_continuously() -> None:
        try:
            deadline = time.monotonic() + 20
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    points(reader)
                except MetricsTimeoutError:
                    # The SDK's 10 s bound on one collection, met on a machine busy enough:
                    # slow, not stuck (a deadlock leaves this thread alive, asserted below).
                    continue
                exports[0] += 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    exporter = threading.Thread(target=export_continuously, name="test-exporter", daemon=True)
    exporter.start()
    forced = 0
    try:
        wait_until(lambda: exports[0] >= 1 or not exporter.is_alive(), what="a first export")
        first = exports[0]
        # Force collections of every generation until several exports ran meanwhile (the
        # exporter's own allocations trigger collections inside its collect() as well).
        deadline = time.monotonic() + 15
        while forced < 60 or (
            exports[0] - first < 5 and exporter.is_alive() and time.monotonic() < deadline
        ):
            _make_cycles(cycles)
            gc.collect(forced % 3)
            forced += 1
            time.sleep(0)  # hand the GIL over, so exports and collections interleave
        assert exports[0] - first >= 5
    finally:
        stop.set()
        exporter.join(20)
    assert not exporter.is_alive(), "the exporter thread is stuck: deadlock"
    assert not errors

    gc.disable()  # no collection between reading the counters and the histogram
    try:
        found = points(reader)
    finally:
        gc.enable()
    count = _by_generation(found, "gym.gc.collections_total")
    collected = _by_generation(found, "gym.gc.collected_total")
    uncollectable = _by_generation(found, "gym.gc.uncollectable_total")
    pauses = _by_generation(found, "gym.gc.pause_duration_ms")
    assert set(count) == set(collected) == set(uncollectable) == {"0", "1", "2"}
    for generation in "012":
        # forced collections of this generation, plus whatever the low thresholds triggered
        assert (count[generation].value or 0) >= forced // 3
        # every collection's pause reached the histogram, from the exporter's thread
        assert pauses[generation].count == count[generation].value
        assert (pauses[generation].sum or 0) > 0
        assert uncollectable[generation].value == 0
    assert sum(p.value or 0 for p in collected.values()) >= 2 * cycles * forced
    assert count["2"].monotonic is True and count["2"].unit == "{collection}"
    assert pauses["2"].unit == "ms"
    gauge = _by_generation(found, "gym.gc.count")
    assert set(gauge) == {"0", "1", "2"}


def test_gc_callback_is_installed_only_while_telemetry_exports(runtime: Any) -> None:
    handle, _ = runtime
    assert garbage_collector._on_gc in gc.callbacks
    handle.shutdown()
    assert garbage_collector._on_gc not in gc.callbacks


def test_gc_and_process_series_only_for_a_process_that_enables_them(telemetry: Any) -> None:
    _, reader = telemetry
    assert _runtime_names(reader) == set()
    assert garbage_collector._on_gc not in gc.callbacks
    enable_runtime_metrics()  # while exporting: from the next collection on
    assert garbage_collector._on_gc in gc.callbacks
    gc.collect()
    assert {"gym.gc.collections_total", "gym.gc.pause_duration_ms", "process.cpu.time"} <= (
        _runtime_names(reader)
    )


def test_enabling_before_start_applies_to_that_session_only() -> None:
    with isolated_state():
        enable_runtime_metrics()  # nothing runs yet: for the next session
        with in_memory_telemetry() as (_, reader):
            assert "process.memory.usage" in _runtime_names(reader)
        with in_memory_telemetry() as (_, reader):  # a later session starts without them
            assert _runtime_names(reader) == set()
            assert garbage_collector._on_gc not in gc.callbacks


def test_pauses_the_collector_overwrote_during_a_drain_are_dropped() -> None:
    size = runtime_module.PAUSE_RING_SIZE
    copied = [(0, float(i)) for i in range(10, 20)]
    assert runtime_module.intact_pauses(20, 10, copied, 20) == copied  # nothing written meanwhile
    # 5 written during the copy wrapped onto the slots of indices 10..14 - size
    assert runtime_module.intact_pauses(20, 10, copied, 25) == copied
    # size + 15 written: indices below 15 are overwritten
    assert runtime_module.intact_pauses(20, 10, copied, size + 15) == copied[5:]
    assert runtime_module.intact_pauses(20, 10, copied, size + 30) == []


# -- process -------------------------------------------------------------------------------------


def _process_values(reader: Any) -> dict[tuple[str, str], float]:
    return {
        (p.name, p.attributes.get("cpu.mode", "")): float(p.value or 0)
        for p in points(reader)
        if p.name.startswith("process.")
    }


def test_process_series_follow_this_process(runtime: Any, tmp_path: Any) -> None:
    _, reader = runtime
    alive_before = set(threading.enumerate())
    before = _process_values(reader)
    release = threading.Event()
    threads = [threading.Thread(target=release.wait, args=(20,)) for _ in range(3)]
    files = [open(tmp_path / f"f{n}", "w") for n in range(5)]  # noqa: SIM115
    ballast = bytearray(b"\x01") * (64 * MiB)  # written, so resident
    spin_until = time.process_time() + 0.2
    while time.process_time() < spin_until:
        pass
    for thread in threads:
        thread.start()
    try:
        after = _process_values(reader)
        # Other tests' background threads may end meanwhile (a monitor with nothing to read,
        # a backend's worker finishing): the 3 started here are counted net of those.
        ended = len(alive_before - set(threading.enumerate()))
        found = {p.name: p for p in points(reader) if p.name.startswith("process.")}
    finally:
        release.set()
        for thread in threads:
            thread.join()
        for file in files:
            file.close()
    assert after[("process.memory.usage", "")] - before[("process.memory.usage", "")] >= 60 * MiB
    assert abs(after[("process.memory.usage", "")] - psutil.Process().memory_info().rss) < (
        32 * MiB
    )
    assert after[("process.thread.count", "")] >= before[("process.thread.count", "")] + 3 - ended
    assert after[(FD_COUNT, "")] >= before[(FD_COUNT, "")] + 5
    cpu = after[("process.cpu.time", "user")] + after[("process.cpu.time", "system")]
    assert cpu - before[("process.cpu.time", "user")] - before[("process.cpu.time", "system")] >= (
        0.15
    )
    assert (found["process.cpu.time"].unit, found["process.cpu.time"].monotonic) == ("s", True)
    assert (found["process.memory.usage"].unit, found["process.memory.usage"].monotonic) == (
        "By",
        False,
    )
    assert found["process.thread.count"].unit == "{thread}"
    assert found[FD_COUNT].unit == "{file_descriptor}"
    assert FD_COUNT_UNIX not in found  # the new name only when asked for
    del ballast


def test_file_descriptors_under_the_current_semconv_name_on_request(runtime: Any) -> None:
    _, reader = runtime
    try:
        report_file_descriptors_as(FD_COUNT_UNIX)
        names = {p.name for p in points(reader)}
        assert FD_COUNT_UNIX in names and FD_COUNT not in names
        report_file_descriptors_as(FD_COUNT, FD_COUNT_UNIX)  # both, while dashboards migrate
        found = {p.name: p.value or 0.0 for p in points(reader)}
        assert found[FD_COUNT] == found[FD_COUNT_UNIX] >= 3
        with pytest.raises(ValueError, match=r"process\.unix\.file_descriptor\.count"):
            report_file_descriptors_as("process.fds")
        with pytest.raises(ValueError):
            report_file_descriptors_as()
    finally:
        report_file_descriptors_as(FD_COUNT)


def test_a_forked_child_reports_itself_not_its_parent() -> None:
    parent = process._process()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what runtime reads as "this process"
        try:
            os.write(write, str(process._process().pid).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        reported = int(os.read(read, 64))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert reported == pid != parent.pid


def _collections(reader: Any, generation: str) -> float | None:
    return _by_generation(points(reader), "gym.gc.collections_total")[generation].value


def test_a_second_session_counts_collections_from_its_own_start() -> None:
    """Collections before a session (in an earlier one, or with the series off) are not its
    own: each session's counter starts at 0. Automatic collection is off meanwhile, so every
    collection counted is one this test forced."""
    gc.disable()
    try:
        with isolated_state():
            enable_runtime_metrics()
            with in_memory_telemetry() as (_, reader):
                for _ in range(5):
                    gc.collect(2)
                assert _collections(reader, "2") == 5
            for _ in range(2):
                gc.collect(2)  # between sessions: nobody's
            enable_runtime_metrics()
            with in_memory_telemetry() as (_, reader):
                assert _collections(reader, "2") == 0
                for _ in range(3):
                    gc.collect(2)
                assert _collections(reader, "2") == 3
    finally:
        gc.enable()


def test_cpu_time_keeps_user_and_system_apart(runtime: Any) -> None:
    """Each mode's point lies between this process's own reading of that mode just before and
    just after the collection. Spinning first puts user time well above system time, so a
    swap or a sum could not fall inside both brackets."""
    _, reader = runtime
    spin_until = time.process_time() + 0.3
    while time.process_time() < spin_until:
        pass
    process = psutil.Process()
    before = process.cpu_times()
    found = [p for p in points(reader) if p.name == "process.cpu.time"]
    after = process.cpu_times()
    by_mode = {p.attributes["cpu.mode"]: p.value for p in found}
    assert set(by_mode) == {"user", "system"} and len(found) == 2
    assert before.user <= by_mode["user"] <= after.user
    assert before.system <= by_mode["system"] <= after.system
    assert after.user - after.system > after.user - before.user + after.system - before.system


@pytest.mark.parametrize("interval_s", [None, "5", float("inf"), True])
def test_an_interval_that_is_no_number_of_seconds_is_refused_saying_so(interval_s: Any) -> None:
    """None or "5" failed with Python's own "'>' not supported between instances of
    'NoneType' and 'int'", naming neither the argument nor what to pass."""
    with pytest.raises((TypeError, ValueError), match="interval_s must be positive"):
        asyncio.run(_start("server", interval_s))
