"""``rlmetrics mcp``: the answers of ``rlmetrics query`` as tools an agent calls, over MCP's
stdio transport (the official ``mcp`` Python SDK, the ``rlmetrics[mcp]`` extra).

Read-only and bounded: every path a tool is given is resolved inside the run folder the
server was started on (``--root``) and refused outside it; a file is read, never written;
an answer is at most :data:`MAX_ANSWER_BYTES` of JSON (the newest values are kept when
``last_values`` must be cut); a listing at most :data:`MAX_LIST` files. A refusal or a
question that cannot be answered is one line, as the tool's error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .backends.jsonl import open_regular
from .cli._output import input_problem
from .runstate import QueryError, run_state, select

__all__ = ["MAX_ANSWER_BYTES", "MAX_LIST", "RunFolder", "build_server", "serve"]

_T = TypeVar("_T")

#: The most JSON one answer carries (an agent's context is not a log).
MAX_ANSWER_BYTES = 256 * 1024
#: The most JSONL files ``list_runs`` names.
MAX_LIST = 200
#: How much of a file ``list_runs`` reads to tell a run's JSONL from other JSON lines.
_PEEK_LINES, _PEEK_BYTES = 8, 1024 * 1024
#: How every row the JSONL backend writes begins: its time, then its run id (a JSON string).
_ROW_START = re.compile(r'\{"time": [-+0-9.eE]+, "run_id": ("(?:[^"\\]|\\.)*")')
#: A run's JSONL by its name: ``metrics.jsonl``, and as logrotate leaves it, numbered
#: (``.1``) or dated (``-20261207``), compressed or not (``.gz``, ``.bz2``, ``.xz``: read
#: as they are, :func:`~rlmetrics.backends.jsonl.open_regular`).
_RUN_FILE = re.compile(r".+\.jsonl(?:[.-][0-9]+)?(?:\.(?:gz|bz2|xz))?")
_SAMPLES_FILE = re.compile(r".+\.samples\.jsonl(?:[.-][0-9]+)?(?:\.(?:gz|bz2|xz))?")


class RunFolder:
    """The folder the server answers about: every path is resolved inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def inside(self, resolved: Path) -> bool:
        """Whether a resolved path is the folder or in it: the one rule every tool applies."""
        return resolved == self.root or self.root in resolved.parents

    def path(self, given: str, what: str = "file") -> Path:
        """``given`` (relative to the folder, or absolute inside it), resolved; outside the
        folder (``..``, a symlink out, another absolute path) is refused."""
        candidate = Path(given)
        resolved = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if not self.inside(resolved):
            raise QueryError(f"{given!r} is outside the run folder {self.root}: refused")
        # Said as `rlmetrics query` says it: a folder is named as one, with its JSONL files.
        if what == "file" and (problem := input_problem(resolved)) is not None:
            raise QueryError(problem)
        if what == "folder" and not resolved.is_dir():  # else: listed as holding no run
            raise QueryError(f"{given!r}: no such folder in the run folder")
        return resolved

    def state(self, jsonl: str, traces: str | None, run: str | None) -> dict[str, Any]:
        answer = run_state(
            self.path(jsonl),
            traces=None if traces is None else self.path(traces),
            run=run,
        )
        return _bounded(answer)

    def runs(self, folder: str, limit: int) -> list[dict[str, Any]]:
        if not 1 <= limit <= MAX_LIST:
            raise QueryError(f"limit must be between 1 and {MAX_LIST}, got {limit}: refused")
        base = self.path(folder, what="folder")
        found = []
        # Every file is a candidate (a cap on files looked at hid runs behind traces files);
        # one that is no run costs the read of its first lines.
        for path in sorted(base.rglob("*.jsonl*")):
            if not _RUN_FILE.fullmatch(path.name) or _SAMPLES_FILE.fullmatch(path.name):
                continue
            resolved = path.resolve()  # a link out of the folder is refused, as run_state does
            if not self.inside(resolved) or not resolved.is_file() or not _starts_a_run(resolved):
                continue
            # None when an older rlmetrics wrote the rows (no run id): still a run.
            ids = _run_ids(resolved)
            found.append({"jsonl": str(path.relative_to(self.root)), "run_ids": ids[-20:]})
            if len(found) == limit:
                break
        return found


def _run_ids(path: Path) -> list[str]:
    """The run ids of ``path``'s rows, in the order first written. A row the JSONL backend
    wrote names its run id at its start and is not parsed (a run of 10^5 steps is 90 MB);
    any other line is, and one that is no JSON object is passed over (run_state counts it)."""
    ids: dict[str, None] = {}
    written: set[str] = set()  # the ids as the backend's rows spell them, each read once
    try:
        with open_regular(path) as handle:
            for line in handle:
                start = _ROW_START.match(line)
                if start is not None:
                    if start.group(1) in written:
                        continue
                    written.add(start.group(1))
                try:
                    row = json.loads(start.group(1) if start else line)
                except (ValueError, RecursionError):
                    continue
                run_id = row if start else row.get("run_id") if isinstance(row, dict) else None
                if isinstance(run_id, str):
                    ids[run_id] = None
    except (OSError, EOFError, ValueError):  # gone, or compressed and cut short: what was read
        pass
    return list(ids)


def _starts_a_run(path: Path) -> bool:
    """Whether the first JSON object among the first lines of ``path`` is a row of a run's
    metrics JSONL (every row the JSONL backend writes carries its run id; an older one's metric
    rows none): a traces file or another tool's JSON lines is told apart without reading it
    whole. A file of several ranks' raw rows (Ray Train's ``rlmetrics.ranks.jsonl``, whose
    rows carry their ``rank``), which run_state refuses, is told by two ranks among its first
    rows."""
    starts: bool | None = None
    ranks: set[int] = set()
    try:
        with open_regular(path) as handle:
            for _ in range(_PEEK_LINES):
                line = handle.readline(_PEEK_BYTES)
                if not line:
                    break
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # a torn or foreign line: the next one may be a row
                if not isinstance(row, dict):
                    return bool(starts)
                if starts is None:
                    starts = _a_run_row(row)
                if type(rank := row.get("rank")) is not int:
                    return starts  # a run's own rows carry no rank: no need to look further
                ranks.add(rank)
                if len(ranks) > 1:
                    return False
    except (OSError, EOFError, ValueError):  # unreadable, or compressed and cut or damaged
        return False
    return bool(starts)


def _a_run_row(row: dict[str, Any]) -> bool:
    if "run_id" not in row:  # an older rlmetrics wrote its metric rows without one
        return isinstance(row.get("metrics"), dict)
    return isinstance(row["run_id"], str) and ("metrics" in row or "kind" in row)


def _bounded(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` within :data:`MAX_ANSWER_BYTES`: the oldest ``last_values`` go first."""
    values = answer["last_values"]
    while len(json.dumps(answer)) > MAX_ANSWER_BYTES and values:
        keep = dict(list(values.items())[len(values) // 2 :])
        answer["last_values"] = values = keep
        answer["findings"] = [*answer["findings"], "last_values cut to fit the answer's bound"]
    return answer


def build_server(root: str | os.PathLike[str]) -> Any:
    """The MCP server for the run folder ``root`` (``mcp`` imported here)."""
    from mcp.server.mcpserver import MCPServer

    runs_root = RunFolder(root)
    server = MCPServer(
        "rlmetrics",
        instructions=(
            "Read-only answers about RL training runs under one folder: call list_runs, then "
            "run_state on a run's JSONL (schema rlmetrics.query/1: pace, stalls, last values, "
            "slowest phases, regressions, findings), or run_field for one part of it."
        ),
    )

    def list_runs(folder: str = ".", limit: int = 50) -> list[dict[str, Any]]:
        """The runs' JSONL files under ``folder`` (relative to the run folder), each with the
        run ids it holds; at most ``limit`` (1-200) files."""
        return folder_call(lambda: runs_root.runs(folder, limit))

    def run_state(jsonl: str, traces: str | None = None, run: str | None = None) -> dict[str, Any]:
        """A run's state (schema rlmetrics.query/1): identity and hyperparameters, steps and
        pace, stalls, the last value of each key, the slowest phases (with ``traces``, the
        otlp_file output), regressions and findings. ``jsonl`` and ``traces`` are paths in the
        run folder; ``run`` a run id (default: the file's last)."""
        return folder_call(lambda: runs_root.state(jsonl, traces, run))

    def run_field(jsonl: str, path: str, traces: str | None = None, run: str | None = None) -> Any:
        """One part of ``run_state``'s answer: ``path`` is dotted keys and ``[n]`` indexes,
        for example ``steps.last`` or ``last_values["train/reward"].value``."""
        return folder_call(lambda: select(runs_root.state(jsonl, traces, run), path))

    # Registered by call, not as decorators: the SDK's decorator is untyped to mypy.
    for tool in (list_runs, run_state, run_field):
        server.tool()(tool)
    return server


def folder_call(answer: Callable[[], _T]) -> _T:
    """A tool's answer, or its refusal as one line: a ``ToolError``, which the SDK hands the
    agent as the call's error (any other exception reaches it only as "Error executing
    tool")."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return answer()
    except QueryError as exc:
        raise ToolError(str(exc)) from None


def serve(root: str | os.PathLike[str]) -> None:
    """Serve the run folder ``root`` over stdio until the client closes it."""
    build_server(root).run("stdio")
