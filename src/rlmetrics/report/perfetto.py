"""Every process's spans of a run on one timeline: Chrome's Trace Event Format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open (``rlmetrics report --perfetto out.json``).

Each process (a rank, a worker: its resource's instance id and pid, see
:attr:`~rlmetrics.report.traces.Span.process`) is a Perfetto process named after its service,
rank or worker group and pid; each thread is a lane; each span a complete event (``ph: X``)
whose category is its ``rl.bucket`` (``span`` without one). Times are microseconds from the
run's first span, on the wall clock every process shares, so steps line up across ranks; each
``rl.step`` span also drops a global instant marker (``step N``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..tracing import ITERATION_ATTR, STEP_SPANS
from .traces import Span, TraceSet

__all__ = ["trace_events", "write_perfetto"]

#: Resource attributes that name a process, the first found wins.
_PROCESS_NAMES = ("rlmetrics.rank", "rank", "rl.worker_group", "service.name")


#: The first tid of a lane other than a process's main thread (no pid reaches it).
_OTHER_TIDS = 1_000_000


def _process_name(span: Span) -> str:
    resource = span.resource
    parts = [str(resource[key]) for key in _PROCESS_NAMES if resource.get(key) is not None][:2]
    pid = resource.get("process.pid")
    if pid is not None:
        parts.append(f"pid {pid}")
    return " / ".join(parts) or Path(span.source).name


def _args(span: Span) -> dict[str, Any]:
    args: dict[str, Any] = {
        key: value
        for key, value in span.attributes.items()
        if isinstance(value, (str, int, float, bool))
    }
    args["trace_id"], args["span_id"] = span.trace_id, span.span_id
    if span.parent_id:
        args["parent_id"] = span.parent_id
    return args


def trace_events(traces: TraceSet) -> dict[str, Any]:
    """The Trace Event Format document of ``traces`` (``{"traceEvents": [...], ...}``)."""
    spans = sorted(traces.spans, key=lambda s: (s.start_ns, -s.end_ns))
    origin = spans[0].start_ns if spans else 0
    pids: dict[tuple[Any, ...], int] = {}
    tids: dict[tuple[int, str | None], int] = {}
    events: list[dict[str, Any]] = []
    for span in spans:
        pid = pids.get(span.process)
        if pid is None:
            pid = pids[span.process] = len(pids) + 1
            events.append(_meta("process_name", pid, 0, {"name": _process_name(span)}))
            # Ranks in rank order (whichever started first), the other processes after them.
            rank = span.rank
            order = rank if rank is not None else _OTHER_TIDS + pid
            events.append(_meta("process_sort_index", pid, 0, {"sort_index": order}))
        lane = (pid, span.thread)
        tid = tids.get(lane)
        if tid is None:
            # Perfetto takes the thread whose tid is its pid for the process's main thread:
            # the main lane's tid is its pid; the other lanes' are past every pid.
            tid = tids[lane] = pid if span.thread is None else _OTHER_TIDS + len(tids)
            events.append(_meta("thread_name", pid, tid, {"name": span.thread or "main"}))
        start_us = (span.start_ns - origin) / 1000
        events.append(
            {
                "name": span.name,
                "cat": span.bucket or "span",
                "ph": "X",
                "ts": start_us,
                "dur": max(0, span.end_ns - span.start_ns) / 1000,
                "pid": pid,
                "tid": tid,
                "args": _args(span),
            }
        )
        if span.name in STEP_SPANS and span.attributes.get(ITERATION_ATTR) is not None:
            events.append(
                {
                    "name": f"step {span.attributes[ITERATION_ATTR]}",
                    "cat": "step",
                    "ph": "i",
                    "s": "g",
                    "ts": start_us,
                    "pid": pid,
                    "tid": tid,
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"sources": list(traces.sources), "origin_unix_ns": origin},
    }


def _meta(name: str, pid: int, tid: int, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": dict(args)}


def write_perfetto(traces: TraceSet, path: str | os.PathLike[str]) -> int:
    """Write :func:`trace_events` to ``path``; the number of spans written."""
    document = trace_events(traces)
    Path(path).write_text(json.dumps(document), encoding="utf-8")
    return sum(1 for event in document["traceEvents"] if event["ph"] == "X")
