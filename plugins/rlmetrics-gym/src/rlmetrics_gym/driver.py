"""The rollout driver (``gym eval run``): how much work it holds, where that work waits, and
what each completed rollout looked like.

- ``gym.driver.rollouts.offered_total``: rollouts handed to dispatch.
- ``gym.driver.rollouts.resident`` / ``.active``: rollout tasks that exist and have not finished
  / that were admitted past the concurrency limit and are running. Resident minus active is
  the number waiting for admission. Plain integer counts read at export.
- ``gym.driver.admission_duration_ms``: how long one rollout waited for the concurrency limit.
- ``gym.driver.output_write_duration_ms`` / ``.output_write_bytes``: writing and flushing one
  rollout's output row, and its size.
- ``gym.driver.materialize_duration_ms``: reading, repeating and writing a run's input rows
  before dispatch.
- ``gym.driver.rollout.input_items`` / ``.output_items`` / ``.turns`` / ``.tool_calls``: the shape
  of one completed rollout. Turns come only from ``ng_perf``; tool calls from ``ng_perf``, else
  counted from the final response's ``function_call`` items.

A driver that logs each result row through ``rlmetrics.Logger`` under the ``gym/rollout``
prefix gets the shape histograms from the ``log_metrics`` hook (the row is flattened by then:
``response/output``, ``ng_perf/num_turns`` are read as such).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any, Final

import rlmetrics
from rlmetrics import (
    Kind,
    MetricSpec,
    as_number,
    hookimpl,
    is_exporting,
    record,
    resets_process_state,
    warn_once,
)
from rlmetrics.spec import SUM

from ._tally import Tally
from .resources import Limit, acquire
from .rollouts import ROLLOUT_PREFIX

__all__ = [
    "ACTIVE",
    "ADMISSION_DURATION",
    "GROUP",
    "INPUT_ITEMS",
    "MATERIALIZE_DURATION",
    "OFFERED",
    "OUTPUT_ITEMS",
    "OUTPUT_WRITE_BYTES",
    "OUTPUT_WRITE_DURATION",
    "RESIDENT",
    "SPECS",
    "TOOL_CALLS",
    "TURNS",
    "DriverRollout",
    "driver_rollout",
    "log_metrics",
    "materializing",
    "record_output_write",
    "record_rollout_shape",
    "rollout_shape",
    "write_output_row",
]

GROUP = "gym.driver"
OFFERED: Final = "gym.driver.rollouts.offered_total"
RESIDENT: Final = "gym.driver.rollouts.resident"
ACTIVE: Final = "gym.driver.rollouts.active"
ADMISSION_DURATION: Final = "gym.driver.admission_duration_ms"
OUTPUT_WRITE_DURATION: Final = "gym.driver.output_write_duration_ms"
OUTPUT_WRITE_BYTES: Final = "gym.driver.output_write_bytes"
MATERIALIZE_DURATION: Final = "gym.driver.materialize_duration_ms"
INPUT_ITEMS: Final = "gym.driver.rollout.input_items"
OUTPUT_ITEMS: Final = "gym.driver.rollout.output_items"
TURNS: Final = "gym.driver.rollout.turns"
TOOL_CALLS: Final = "gym.driver.rollout.tool_calls"

# Where Gym rows keep what the shape histograms read.
NG_PERF_KEY: Final = "ng_perf"
NG_PERF_TURNS_KEY: Final = "num_turns"
NG_PERF_TOOL_CALLS_KEY: Final = "num_tool_calls"
FUNCTION_CALL_TYPE: Final = "function_call"

_WAIT_BUCKETS = (
    *(0.1, 0.5, 1, 5, 10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000),
    *(30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000),
)
# A local JSONL append plus flush: microseconds; a network filesystem under load: seconds.
_WRITE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1_000, 5_000)
# Powers of 4 from 256 B to 1 GiB: a short answer to a long agentic transcript.
_BYTES_BUCKETS = tuple(float(4**i) for i in range(4, 16))
_MATERIALIZE_BUCKETS = (1, 10, 100, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000)
# Counts: 0 has its own bucket (a rollout without tool calls is the common case).
_COUNT_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_024, 4_096)

_resident: Tally[tuple[()]] = Tally(overflow=(), group=GROUP)
_active: Tally[tuple[()]] = Tally(overflow=(), group=GROUP)


@resets_process_state
def _forget_rollouts() -> None:
    _resident.reset()
    _active.reset()


def _unlabelled(_key: tuple[()]) -> Mapping[str, str]:
    return {}


def _histogram(name: str, unit: str, description: str, buckets: tuple[float, ...]) -> MetricSpec:
    return MetricSpec(
        name, Kind.HISTOGRAM, unit=unit, description=description, buckets=buckets, reduce=SUM
    )


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        OFFERED,
        Kind.COUNTER,
        unit="{rollout}",
        description="Rollouts handed to dispatch.",
        reduce=SUM,
    ),
    MetricSpec(
        RESIDENT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{rollout}",
        description="Rollout tasks that exist and have not finished (waiting for admission "
        "or running).",
        callback=lambda: _resident.observations(_unlabelled),
        reduce=SUM,
    ),
    MetricSpec(
        ACTIVE,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{rollout}",
        description="Rollouts admitted past the concurrency limit and running.",
        callback=lambda: _active.observations(_unlabelled),
        reduce=SUM,
    ),
    _histogram(
        ADMISSION_DURATION,
        "ms",
        "Time one rollout waited for the concurrency limit before it started.",
        _WAIT_BUCKETS,
    ),
    _histogram(
        OUTPUT_WRITE_DURATION,
        "ms",
        "Time to write and flush one rollout's output row.",
        _WRITE_BUCKETS,
    ),
    _histogram(OUTPUT_WRITE_BYTES, "By", "Size of one rollout's output row.", _BYTES_BUCKETS),
    _histogram(
        MATERIALIZE_DURATION,
        "ms",
        "Time to read, repeat and write a run's input rows before dispatch.",
        _MATERIALIZE_BUCKETS,
    ),
    _histogram(
        INPUT_ITEMS, "{item}", "Input items one completed rollout started with.", _COUNT_BUCKETS
    ),
    _histogram(
        OUTPUT_ITEMS,
        "{item}",
        "Output items in one completed rollout's final response.",
        _COUNT_BUCKETS,
    ),
    _histogram(
        TURNS,
        "{turn}",
        "Agent turns in one completed rollout (only when ng_perf reports them).",
        _COUNT_BUCKETS,
    ),
    _histogram(
        TOOL_CALLS,
        "{call}",
        "Tool calls in one completed rollout (from ng_perf, else the final response's "
        "function_call items).",
        _COUNT_BUCKETS,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)


# -- admission ----------------------------------------------------------------------------------


class DriverRollout:
    """One dispatched rollout's life: ``async with driver_rollout(limit): run it``.

    Entering counts it offered and resident, then waits for ``limit`` (the driver's
    concurrency limit; None for none) and counts it active; leaving releases the limit and ends
    both counts, whether the rollout returned, raised or was cancelled.
    """

    __slots__ = ("_acquired", "_limit", "_running", "admission_ms")

    def __init__(self, limit: Limit | None) -> None:
        self._limit = limit
        self._acquired = False
        self._running = False
        #: How long this rollout waited for admission (None before, or without a limit).
        self.admission_ms: float | None = None

    async def __aenter__(self) -> DriverRollout:
        record(GROUP, {OFFERED: 1})
        _resident.add(())
        limit = self._limit
        if limit is not None:
            waited = time.perf_counter()
            try:
                await acquire(limit)
            except BaseException:
                _resident.add((), -1)  # cancelled while waiting for admission
                raise
            self._acquired = True
            self.admission_ms = (time.perf_counter() - waited) * 1000.0
            record(GROUP, {ADMISSION_DURATION: self.admission_ms})
        _active.add(())
        self._running = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._running:
            self._running = False
            _active.add((), -1)
            _resident.add((), -1)
        if self._acquired:
            self._acquired = False
            self._limit.release()  # type: ignore[union-attr]


def driver_rollout(limit: Limit | None) -> DriverRollout:
    """See :class:`DriverRollout`."""
    return DriverRollout(limit)


# -- output rows and materialization ------------------------------------------------------------


def record_output_write(duration_ms: float, nbytes: int) -> None:
    """Record one output row written by the caller's own writer. Never raises."""
    record(GROUP, {OUTPUT_WRITE_DURATION: duration_ms, OUTPUT_WRITE_BYTES: nbytes})


def write_output_row(handle: IO[Any], row: Mapping[str, Any] | str | bytes) -> int:
    """Write one output row as a JSON line to ``handle`` (text or binary), flush it, and record
    the write's duration and size. Returns the bytes written.

    A mapping is serialized with ``json.dumps``; a str or bytes row is written as given, with a
    newline added when missing, encoded to or decoded from UTF-8 as the handle wants. A text
    handle is an ``io.TextIOBase`` (or has a text ``mode``); a binary one an ``io`` buffered or
    raw stream (``gzip``, ``bz2``, ``lzma`` files, ``BytesIO``) or has a ``"b"`` mode; any other
    is given the row as it is and, if its ``write`` refuses that type (``TypeError``, nothing
    written), the other. The write is the caller's: an I/O error propagates (the row did not
    land) and nothing is recorded for it.
    """
    if isinstance(row, Mapping):
        line: str | bytes = json.dumps(row, ensure_ascii=False) + "\n"
    elif isinstance(row, bytes):
        line = row if row.endswith(b"\n") else row + b"\n"
    else:
        line = row if row.endswith("\n") else row + "\n"
    binary = _is_binary(handle)
    if binary is None:
        started = time.perf_counter()
        try:
            handle.write(line)
            data = line
        except TypeError:  # refused before writing anything: the other type, then
            data = line.decode("utf-8") if isinstance(line, bytes) else line.encode("utf-8")
            handle.write(data)
    else:
        if binary:
            data = line.encode("utf-8") if isinstance(line, str) else line
        else:
            data = line.decode("utf-8") if isinstance(line, bytes) else line
        started = time.perf_counter()
        handle.write(data)
    handle.flush()
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    nbytes = len(data) if isinstance(data, bytes) else len(data.encode("utf-8"))
    record_output_write(elapsed_ms, nbytes)
    return nbytes


def _is_binary(handle: Any) -> bool | None:
    """True for a binary handle, False for a text one, None when neither its class nor its
    ``mode`` says (gzip's files have an int ``mode``; bz2's, lzma's and BytesIO none)."""
    if isinstance(handle, io.TextIOBase):
        return False
    if isinstance(handle, (io.BufferedIOBase, io.RawIOBase)):
        return True
    try:
        mode = getattr(handle, "mode", None)
    except Exception:
        return None
    return ("b" in mode) if isinstance(mode, str) else None


class materializing:
    """Time a run's input materialization (``with materializing(): ...``): recorded when the
    block returns; a materialization that raised did not happen and records nothing."""

    __slots__ = ("_started",)

    def __enter__(self) -> materializing:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            record(GROUP, {MATERIALIZE_DURATION: (time.perf_counter() - self._started) * 1000.0})


# -- rollout shape ------------------------------------------------------------------------------


def _field(row: Mapping[str, Any], *path: str) -> Any:
    """``row[a][b]`` in a nested row, or ``row["a/b"]`` in one the Logger flattened."""
    flat = row.get("/".join(path))
    if flat is not None:
        return flat
    node: Any = row
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _count(value: Any) -> int | None:
    number = as_number(value)
    if number is None or number < 0 or number != int(number):
        return None
    return int(number)


def rollout_shape(row: Mapping[str, Any], input_items: Any = None) -> dict[str, int]:
    """The shape histograms' values for one completed rollout's result row (by metric name).

    - input items: ``input_items`` when given, else the length of the row's
      ``responses_create_params.input`` (a string input is one item);
    - output items: the length of ``response.output``;
    - turns: ``ng_perf.num_turns``, only when ``ng_perf`` reports it;
    - tool calls: ``ng_perf.num_tool_calls``, else the ``function_call`` items of
      ``response.output``.

    A value that cannot be known is left out. Pure; never raises on odd rows.
    """
    shape: dict[str, int] = {}
    try:
        given = _count(input_items) if input_items is not None else None
        if given is None:
            inputs = _field(row, "responses_create_params", "input")
            if isinstance(inputs, str):
                given = 1
            elif isinstance(inputs, list):
                given = len(inputs)
        if given is not None:
            shape[INPUT_ITEMS] = given
        output = _field(row, "response", "output")
        if isinstance(output, list):
            shape[OUTPUT_ITEMS] = len(output)
        turns = _count(_field(row, NG_PERF_KEY, NG_PERF_TURNS_KEY))
        if turns is not None:
            shape[TURNS] = turns
        tool_calls = _count(_field(row, NG_PERF_KEY, NG_PERF_TOOL_CALLS_KEY))
        if tool_calls is None and isinstance(output, list):
            tool_calls = sum(
                1
                for item in output
                if isinstance(item, Mapping) and item.get("type") == FUNCTION_CALL_TYPE
            )
        if tool_calls is not None:
            shape[TOOL_CALLS] = tool_calls
    except Exception:
        warn_once("gym:driver:shape", "rlmetrics-gym: reading a rollout row's shape failed")
    return shape


def record_rollout_shape(row: Mapping[str, Any], input_items: Any = None) -> dict[str, int]:
    """Record :func:`rollout_shape` of one completed rollout; returns what was recorded.
    Never raises."""
    if not is_exporting():
        return {}
    shape = rollout_shape(row, input_items)
    record(GROUP, shape)
    return shape


@hookimpl(tee=True, prefixes=[ROLLOUT_PREFIX])
def log_metrics(metrics: Mapping[str, Any], prefix: str) -> None:
    """A rollout result row logged under ``gym/rollout``: its shape, when it has a response."""
    if prefix != ROLLOUT_PREFIX or not is_exporting():
        return
    if _field(metrics, "response", "output") is not None:
        record_rollout_shape(metrics)
