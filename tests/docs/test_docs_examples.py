"""Every Python example of the README and docs/*.md runs, and the series it promises reach the
in-memory reader (issue 32, "the first hour": docs/trackers.md logged ``reward`` as a nested
dict, which never reached ``rl.reward.mean``).

Each block runs on its own in a fresh registry, in a temporary folder, with telemetry started
for it (its own ``rlmetrics.start(...)`` gets an in-memory reader beside its exporters; OTLP
goes to a real receiver on 127.0.0.1, Prometheus to a free port). A block that starts no
telemetry runs as a module would: its imports, definitions and declarations first, then the
rest inside a started session, with the pages' common context: ``rlmetrics`` imported and
``logger``, the loop's ``rlmetrics.Logger``. The series a block promises
are every declared series it names and those its marker lists. An HTML comment on the line
before a block's fence says what it needs, never silently:

- ``<!-- example: reaches NAME NAME -->``: these series must have a point (names the block
  does not spell, such as the report column a tracker example feeds);
- ``<!-- example: optional wandb mlflow -->``: run only where these packages import (skipped
  with their names otherwise);
- ``<!-- example: given CODE -->``: an excerpt of a larger program (a server's handler, a
  driver's loop) runs with CODE first, which binds the names the program around it would
  (``row = {...}; index = 3``); an excerpt that awaits runs in an event loop;
- ``<!-- example: skip REASON -->``: never run here (a real remote server or cluster, or a
  plugin's module loaded through its entry point); the reason is the skip's.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_plugin_page import _unbound

import rlmetrics
from rlmetrics.plugins import register
from rlmetrics.registry import default_registry
from rlmetrics.telemetry import current
from rlmetrics.testing import in_memory_telemetry, points
from rlmetrics.testing.peers import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "integrations").glob("*.md")),
]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_MARKER = re.compile(r"<!--\s*example:\s*(reaches|optional|given|skip)\b(.*?)-->", re.S)
_SERIES_NAME = re.compile(r"[\"'`]([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)[\"'`]")


@attrs.frozen
class Example:
    page: str
    line: int
    code: str
    markers: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def marked(self, kind: str) -> list[str]:
        return [text for k, text in self.markers if k == kind]


def examples() -> Iterator[Example]:
    for page in PAGES:
        text = page.read_text()
        for block in _BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rsplit("\n", 3)
            # The markers sit in the comment lines right above the fence.
            markers = tuple(
                (m.group(1), " ".join(m.group(2).split()))
                for line in before[-3:]
                for m in _MARKER.finditer(line)
            )
            line = text[: block.start()].count("\n") + 1
            yield Example(str(page.relative_to(ROOT)), line, block.group(1), markers)


ALL = list(examples())


def test_the_docs_have_examples_and_every_marker_is_understood() -> None:
    assert len(ALL) > 30
    pages = {e.page for e in ALL}
    assert {"README.md", "docs/trackers.md", "docs/integrations.md"} <= pages
    for page in PAGES:  # a misspelt marker would silently run (or skip) nothing
        for comment in re.findall(r"<!--\s*example\b.*?-->", page.read_text(), re.S):
            assert _MARKER.search(comment), f"{page.name}: unknown marker {comment!r}"


#: The pages whose blocks are programs to copy whole (a trainer's page, the quickstart): each
#: binds every name it uses, but for the pages' common context and what its ``given`` binds.
_COPIED_WHOLE = (
    "README.md",
    "docs/architecture.md",
    "docs/concepts.md",
    "docs/configuration.md",
    "docs/conventions.md",
    "docs/families.md",
    "docs/integrations.md",
    "docs/integrations/",
    "docs/writing-a-plugin.md",
)


@pytest.mark.parametrize(
    "example", [e for e in ALL if e.page.startswith(_COPIED_WHOLE)], ids=lambda e: e.id
)
def test_a_block_imports_every_name_it_uses(example: Example) -> None:
    """docs/integrations/trl.md used ``GRPOTrainer`` and ray-train.md ``TorchTrainer`` without
    importing them, and nemo-rl.md's call did not compile: a skipped block (a trainer, a
    cluster) is never run, so a copied one failed at its first line."""
    code = "\n".join([*example.marked("given"), example.code])
    assert _unbound(code, example.id) - {"rlmetrics", "logger"} == set(), example.id


@pytest.fixture
def collector() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


#: An excerpt of an async handler awaits at its top level.
_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_DECLARING = re.compile(r"\b(declare|tee_scalar|tee_dataset_metric)\(")


def _import_time(example: Example) -> tuple[Any, Any]:
    """The block split where a module's import would end: up to its last declaration (a
    ``declare``/``tee_scalar`` call, a hook implementation), then the rest (what the loop does
    once telemetry runs)."""
    tree = compile(example.code, example.id, "exec", flags=ast.PyCF_ONLY_AST | _AWAIT)
    split = 0
    for index, node in enumerate(tree.body):
        source = ast.get_source_segment(example.code, node) or ""
        if _DECLARING.search(source) or "hookimpl" in source:
            split = index + 1
    parts = (tree.body[:split], tree.body[split:])
    return tuple(
        compile(ast.Module(body=body, type_ignores=[]), example.id, "exec", flags=_AWAIT)
        for body in parts
    )


#: Calls that start telemetry: rlmetrics' own and a plugin's wrapper of it.
_STARTS = {"start", "start_server_telemetry"}


def _starts_telemetry(code: str) -> bool:
    """Whether the block calls ``rlmetrics.start(...)`` (or one of :data:`_STARTS` by name)
    itself, not in a comment or a string."""
    tree = compile(code, "<example>", "exec", flags=ast.PyCF_ONLY_AST | _AWAIT)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in _STARTS:
            return True
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "start"
            and isinstance(func.value, ast.Name)
            and func.value.id == "rlmetrics"
        ):
            return True
    return False


def _run(code: Any, namespace: dict[str, Any]) -> None:
    """``exec`` that also runs a block which awaits (its code is then a coroutine)."""
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        asyncio.run(result)


@pytest.mark.parametrize("example", ALL, ids=[e.id for e in ALL])
def test_the_example_runs_and_feeds_the_series_it_shows(
    example: Example,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    collector: OtlpReceiver,
) -> None:
    for reason in example.marked("skip"):
        pytest.skip(f"{example.id}: {reason}")
    for needed in example.marked("optional"):
        missing = [name for name in needed.split() if importlib.util.find_spec(name) is None]
        if missing:
            pytest.skip(f"{example.id} needs {', '.join(missing)}")
    monkeypatch.chdir(tmp_path)
    if "wandb" in sys.modules:
        # W&B fixes its folder process-wide at its first run (a later chdir or WANDB_DIR is
        # not seen); a page's program is a fresh process, so it starts from a fresh W&B.
        sys.modules["wandb"].teardown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    readers: list[Any] = []
    start = rlmetrics.start

    def start_with_a_reader(*args: Any, **kwargs: Any) -> Any:
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        readers.append(reader)
        kwargs["readers"] = [reader, *kwargs.get("readers", ())]
        return start(*args, **kwargs)

    monkeypatch.setattr(rlmetrics, "start", start_with_a_reader)
    found: set[str] = set()

    class Snapshot:
        """What the reader holds when the example shuts its telemetry down."""

        @rlmetrics.hookimpl
        def telemetry_stopping(self, telemetry: Any) -> None:
            if readers:
                found.update(p.name for p in points(readers[-1]))

    register(Snapshot(), "docs-example-snapshot")
    # The pages' common context: `rlmetrics` imported and `logger`, the loop's Logger.
    namespace: dict[str, Any] = {"__name__": "docs_example", "rlmetrics": rlmetrics}
    before, after = _import_time(example)
    try:
        for given in example.marked("given"):  # what the program around an excerpt binds
            exec(given, namespace)
        if _starts_telemetry(example.code):
            _run(compile(example.code, example.id, "exec", flags=_AWAIT), namespace)
            assert readers, f"{example.id}: calls start( but started no telemetry"
            if current() is not None:
                found.update(p.name for p in points(readers[-1]))
        else:
            _run(before, namespace)  # a module's import: its declarations precede start()
            with in_memory_telemetry() as (_handle, reader):
                if "logger" not in namespace:  # unless the excerpt's program has its own
                    jsonl = {"jsonl": {"path": "run.jsonl"}}
                    namespace["logger"] = rlmetrics.Logger(backends=jsonl)
                _run(after, namespace)
                found.update(p.name for p in points(reader))
    finally:  # while the collector still listens
        handle = current()
        if handle is not None:
            handle.shutdown(timeout_s=5)
    declared = {d.spec.name for d in default_registry().declared()}
    promised = {name for name in _SERIES_NAME.findall(example.code) if name in declared}
    promised |= {name for text in example.marked("reaches") for name in text.split()}
    missing = sorted(promised - found)
    assert not missing, f"{example.id}: the series it shows never got a point: {missing}"
    if '"wandb": {' in example.code and '"dir"' not in example.code:
        # A page's program is a fresh process: W&B writes under the folder it runs in, never
        # into the checkout an earlier test left W&B's process-wide settings pointing at.
        assert (tmp_path / "wandb").is_dir(), f"{example.id}: W&B wrote its run elsewhere"
