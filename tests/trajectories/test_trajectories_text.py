"""The text policy: with ``off`` (the default) a marker in every prompt, completion and tool
text reaches no output at all — the JSONL metrics and samples files, the spans (in memory and
in the OTLP/JSON file), the metrics; ``hash``, ``redacted`` and ``full`` keep what they say,
cut to the cell cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.backends.jsonl import samples_path
from rlmetrics.testing import points, wait_until
from rlmetrics.testing.traces import in_memory_tracing, span_records
from rlmetrics.trajectories import TextPolicy, configure

from ._records import Rows, rollout

MARKER = "SECRET-MARKER-7f3a"


def run_with_text(tmp_path: Path, live: bool = True) -> tuple[Path, list[Any], str, Path]:
    """Log a batch and a live trajectory whose every text holds the marker; returns the
    metrics file, the spans, the collected metrics as text and the OTLP/JSON spans file."""
    metrics_file = tmp_path / "run.jsonl"
    traces_file = tmp_path / "traces.otlp.jsonl"
    with in_memory_tracing(exporters={"otlp_file": {"path": str(traces_file)}}) as (
        _handle,
        reader,
        exporter,
    ):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": str(metrics_file)}})
        with rlmetrics.step(1, logger=logger):
            logger.log_trajectories([rollout(i, text=MARKER) for i in range(3)], step=1)
            if live:
                with rlmetrics.trajectory("live", logger=logger) as t, t.turn():
                    t.generation("m", prompt=MARKER, completion=MARKER, latency_s=0.01)
                    t.tool_call("search", arguments=MARKER, result=MARKER)
        logger.finish()
        spans = span_records(exporter)
        collected = repr(points(reader))
    wait_until(lambda: traces_file.exists() and traces_file.stat().st_size, 10, "the spans file")
    return metrics_file, spans, collected, traces_file


def test_text_off_lets_no_marker_reach_any_output(tmp_path: Path) -> None:
    metrics_file, spans, collected, traces_file = run_with_text(tmp_path)
    samples = samples_path(metrics_file)
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    trajectories = [r["sample"] for r in rows if r["name"] == "trajectories"]
    assert sorted(r["sample_id"] for r in trajectories) == ["live", "s0", "s1", "s2"]
    for path in (metrics_file, samples, traces_file):
        assert MARKER not in path.read_text(), path
    assert spans and MARKER not in repr([s.attributes for s in spans])
    assert MARKER not in collected
    assert "rl.trajectory.completed" in collected


def _texts(spans: list[Any]) -> list[str]:
    return [
        str(v)
        for s in spans
        for k, v in s.attributes.items()
        if k.startswith("gen_ai.input") or k.startswith("gen_ai.output") or ".call." in k
    ]


def test_hash_keeps_a_digest_never_the_text(tmp_path: Path) -> None:
    configure(text="hash")
    metrics_file, spans, _, traces_file = run_with_text(tmp_path)
    texts = _texts(spans)
    assert texts and all("sha256:" in t for t in texts)
    for path in (metrics_file, samples_path(metrics_file), traces_file):
        assert MARKER not in path.read_text()
    assert "sha256:" in samples_path(metrics_file).read_text()


def test_redacted_shows_what_the_hook_returns(tmp_path: Path) -> None:
    seen: list[str] = []

    def redact(text: str, field: str) -> str:
        seen.append(field)
        return text.replace(MARKER, "[redacted]")

    configure(text="redacted", redact=redact)
    metrics_file, spans, _, _ = run_with_text(tmp_path)
    texts = _texts(spans)
    assert texts and all(MARKER not in t for t in texts)
    assert any("[redacted]" in t for t in texts)
    assert {"prompt", "completion", "tool_arguments", "tool_result"} <= set(seen)
    assert MARKER not in samples_path(metrics_file).read_text()


def test_full_keeps_the_text_cut_to_the_cap(tmp_path: Path) -> None:
    configure(text="full", max_text_bytes=64)
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={})
        record = rollout(0, text=MARKER)
        record["completion"] = MARKER + "x" * 10_000_000  # a 10 MB completion
        logger.log_trajectories([record], step=1)
        spans = span_records(exporter)
    [agent] = [s for s in spans if s.name.startswith("invoke_agent")]
    output = json.loads(agent.attributes["gen_ai.output.messages"])
    content = output[0]["parts"][0]["content"]
    assert content.startswith(MARKER) and len(content.encode()) == 64


def test_full_text_reaches_the_span_as_the_loop_gave_it(tmp_path: Path) -> None:
    """Before: the messages' JSON escaped every character past ASCII (漢字 as \\u6f22\\u5b57),
    so Phoenix, MLflow and any trace UI showing the attribute showed escapes for a Chinese or
    accented prompt. A lone surrogate (no UTF-8 text: OTLP could not encode it) stays escaped."""
    configure(text="full")
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0") as t, t.turn():
            t.generation("m", prompt="漢字 café", completion="bad \udc80 byte")
        spans = span_records(exporter)
    [chat] = [s for s in spans if s.name == "chat m"]
    prompt = chat.attributes["gen_ai.input.messages"]
    assert "漢字 café" in prompt and json.loads(prompt)[0]["parts"][0]["content"] == "漢字 café"
    completion = chat.attributes["gen_ai.output.messages"]
    completion.encode("utf-8")  # OTLP's strings are UTF-8
    assert json.loads(completion)[0]["parts"][0]["content"] == "bad \udc80 byte"


def test_a_policy_mistake_fails_at_once() -> None:
    with pytest.raises(ValueError, match="one of"):
        configure(text="everything")
    with pytest.raises(ValueError, match="redact="):
        configure(text="redacted")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "64"])
def test_a_bad_max_text_bytes_is_named_as_configure_takes_it(value: object) -> None:
    """Before: ``configure(max_text_bytes=0)`` raised "max_bytes must be a positive int", an
    argument the call does not have."""
    with pytest.raises(ValueError, match=r"^max_text_bytes must be a positive int"):
        configure(max_text_bytes=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_bytes must be a positive int"):
        TextPolicy(max_bytes=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("as it is", "as it is"),
        (None, None),
        ([{"role": "user", "content": "é"}], '[{"role": "user", "content": "é"}]'),
        ({"set": {1}}, '{"set": "{1}"}'),  # what JSON cannot write as itself, as its str
        ({1: float("nan")}, '{"1": NaN}'),
    ],
)
def test_as_text_is_a_str_as_it_is_and_anything_else_as_json(value: Any, text: Any) -> None:
    from rlmetrics.trajectories import as_text

    assert as_text(value) == text


def test_as_text_never_raises() -> None:
    from rlmetrics.trajectories import as_text

    cycle: list[Any] = []
    cycle.append(cycle)
    assert as_text(cycle) is None


def test_a_conversation_is_kept_as_its_json_text(caplog: pytest.LogCaptureFixture) -> None:
    """Before: a prompt or completion given as a conversation's messages (the chat format TRL,
    verl and the OpenAI-style agent frameworks hold) or tool arguments given as their dict
    were not kept under ``full``, ``hash`` or ``redacted`` (said once: "must be a str"), though
    the TRL and Gym integrations keep the same values as their JSON (``as_text``). Now a list
    or dict is kept as its JSON text, as they keep it."""
    configure(text="full")
    messages = [{"role": "user", "content": "What is 2+2?"}]
    with in_memory_tracing() as (_handle, _reader, exporter):
        with caplog.at_level("WARNING", logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={})
            logger.log_trajectories(
                [{"sample_id": "s", "prompt": messages, "completion": {"content": "4"}}], step=1
            )
            with rlmetrics.trajectory("live") as t, t.turn():
                t.generation("m", prompt=messages)
                t.tool_call("python", arguments={"code": "2+2"}, result=["4"])
        spans = span_records(exporter)
    assert not [r.getMessage() for r in caplog.records if "must be a str" in r.getMessage()]
    [agent] = [s for s in spans if s.attributes.get("rl.sample.id") == "s"]
    prompt = json.loads(agent.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"]
    assert json.loads(prompt) == messages
    [chat] = [s for s in spans if s.name == "chat m"]
    assert "What is 2+2?" in chat.attributes["gen_ai.input.messages"]
    [tool] = [s for s in spans if s.name == "execute_tool python"]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"code": "2+2"}
    assert json.loads(tool.attributes["gen_ai.tool.call.result"]) == ["4"]


@pytest.mark.parametrize("live", [True, False])
def test_a_row_shows_the_text_its_generations_kept(tmp_path: Path, rows: Rows, live: bool) -> None:
    """Before: under ``full`` the live form's row (the W&B / MLflow / JSONL table) had no
    prompt or completion: the live API takes text only on its generations, and the row read
    only a record's own ``prompt`` / ``completion``. A row without them now shows its first
    generation's prompt and its last generation's completion (a record's own win)."""
    configure(text="full")
    with in_memory_tracing() as (_handle, _reader, _exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        if live:
            with rlmetrics.trajectory("s0", logger=logger, step=1) as t:
                for turn in range(3):
                    with t.turn():
                        t.generation("m", prompt=f"ask {turn}", completion=f"say {turn}")
                        t.tool_call("calc", arguments="1+1", result="2")
        else:
            record = rollout(0)
            del record["prompt"], record["completion"]
            record["turns"][-1]["generations"][0]["completion"] = "the last"
            logger.log_trajectories([record, rollout(1, text=MARKER)], step=1)
        logger.finish()
    first = next(r for r in rows.rows if r["sample_id"] == "s0")
    if live:
        assert (first["prompt"], first["completion"]) == ("ask 0", "say 2")
    else:
        assert (first["prompt"], first["completion"]) == ("turn prompt ", "the last")
        own = next(r for r in rows.rows if r["sample_id"] == "s1")
        assert own["prompt"] == f"question 1 {MARKER}"  # the record's own
        assert own["completion"] == f"answer 1 {MARKER}"
