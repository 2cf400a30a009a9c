"""The gen_ai family: per-request token usage and the batch's wall clock, read back from an
in-memory reader."""

from __future__ import annotations

import array
import time
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_vllm import gen_ai
from rlmetrics_vllm.gen_ai import (
    BATCH_DURATION_BUCKETS,
    TOKEN_USAGE_BUCKETS,
    record_generation,
)

import rlmetrics
from rlmetrics.testing import isolated_state, points, single

GENAI_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)


def _usage(found: list[Any], token_type: str) -> Any:
    return single(found, "gen_ai.client.token.usage", **{"gen_ai.token.type": token_type})


def test_buckets_follow_the_genai_conventions() -> None:
    assert TOKEN_USAGE_BUCKETS == (
        1,
        4,
        16,
        64,
        256,
        1024,
        4096,
        16384,
        65536,
        262144,
        1048576,
        4194304,
        16777216,
        67108864,
    )
    # The conventions' duration buckets, extended for batches that take minutes.
    assert BATCH_DURATION_BUCKETS[: len(GENAI_DURATION_BUCKETS)] == GENAI_DURATION_BUCKETS
    assert BATCH_DURATION_BUCKETS[-1] > 30 * 60


def test_one_batch_records_tokens_per_request_and_its_wall_clock(telemetry: Any) -> None:
    _, reader = telemetry
    started = time.perf_counter()
    input_lengths, output_lengths = [12, 40, 7], [100, 3, 2000]  # what generate() returned
    duration = time.perf_counter() - started
    record_generation(input_lengths, output_lengths, duration, model="Qwen/Qwen3-0.6B")

    found = points(reader)
    attributes = {
        "gen_ai.provider.name": "vllm",
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.model": "Qwen/Qwen3-0.6B",
    }
    for token_type, lengths in (("input", input_lengths), ("output", output_lengths)):
        point = _usage(found, token_type)
        assert point.attributes == {**attributes, "gen_ai.token.type": token_type}
        assert (point.kind, point.unit) == ("histogram", "{token}")
        assert (point.count, point.sum) == (len(lengths), sum(lengths))
        assert point.bounds == TOKEN_USAGE_BUCKETS
    # 3 in (1, 4], 100 in (64, 256], 2000 in (1024, 4096]
    assert _usage(found, "output").bucket_counts == (0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
    batch = single(found, "rl.vllm.batch.duration")
    assert batch.attributes == attributes
    assert (batch.kind, batch.unit, batch.count, batch.sum) == ("histogram", "s", 1, duration)
    assert batch.bounds == BATCH_DURATION_BUCKETS


def test_a_slow_batch_lands_in_an_extended_bucket(telemetry: Any) -> None:
    _, reader = telemetry
    record_generation(duration_s=600.0)
    batch = single(points(reader), "rl.vllm.batch.duration")
    assert batch.bucket_counts[BATCH_DURATION_BUCKETS.index(655.36)] == 1
    assert batch.bucket_counts[-1] == 0  # not in the overflow bucket


def test_lengths_as_arrays_and_custom_attributes(telemetry: Any) -> None:
    _, reader = telemetry
    # Anything with tolist() (NumPy arrays, torch tensors) is converted in one call.
    record_generation(
        array.array("i", [5, 6]),
        array.array("q", [1]),
        provider="my-vllm",
        operation="generate_content",
    )
    found = points(reader)
    point = _usage(found, "input")
    assert (point.count, point.sum) == (2, 11)
    # No model given: gen_ai.request.model is left out, as the conventions allow.
    assert point.attributes == {
        "gen_ai.provider.name": "my-vllm",
        "gen_ai.operation.name": "generate_content",
        "gen_ai.token.type": "input",
    }
    assert _usage(found, "output").count == 1
    assert not [p for p in found if p.name == "rl.vllm.batch.duration"]


def test_a_model_given_as_a_path_is_its_path(telemetry: Any, tmp_path: Path) -> None:
    """``model=`` given the checkpoint directory as a ``Path`` (what vLLM serves as the
    model's name when it has no other) dropped every point of the batch, each said
    "attribute 'gen_ai.request.model' must be a string"."""
    _, reader = telemetry
    checkpoint = tmp_path / "step_100" / "hf"
    record_generation([3, 4], [5], 1.5, model=checkpoint)
    found = points(reader)
    assert _usage(found, "input").attributes["gen_ai.request.model"] == str(checkpoint)
    assert _usage(found, "input").count == 2 and _usage(found, "output").count == 1
    duration = single(found, "rl.vllm.batch.duration")
    assert duration.attributes["gen_ai.request.model"] == str(checkpoint)


def test_bad_lengths_cost_only_themselves(telemetry: Any) -> None:
    _, reader = telemetry
    record_generation([3, -1, "x", None, 4], object(), 2.5)
    found = points(reader)
    point = _usage(found, "input")
    assert (point.count, point.sum) == (2, 7)  # the negative, the string and None dropped
    assert not [p for p in found if p.attributes.get("gen_ai.token.type") == "output"]
    assert single(found, "rl.vllm.batch.duration").sum == 2.5


def test_recording_is_a_no_op_when_not_exporting() -> None:
    with isolated_state():
        assert not rlmetrics.is_exporting()
        record_generation([1, 2], [3], 0.5)  # must not raise


def test_no_per_request_server_duration_is_declared() -> None:
    names = {spec.name for spec in gen_ai.SPECS}
    assert names == {
        "gen_ai.client.token.usage",
        "rl.vllm.batch.duration",
        "gen_ai.client.inference.usage.input_tokens",
        "gen_ai.client.inference.usage.output_tokens",
        "gen_ai.client.inference.operation.input_tokens",
        "gen_ai.client.inference.operation.output_tokens",
    }
    declared = {d.spec.name for d in rlmetrics.default_registry().declared()}
    assert "gen_ai.server.request.duration" not in declared
    assert names <= declared


STABLE_SHAPE = {"gen_ai.client.token.usage"}
#: semantic-conventions-genai PR #374: counters by modality, histograms per operation.
USAGE_COUNTERS_SHAPE = {
    "gen_ai.client.inference.usage.input_tokens",
    "gen_ai.client.inference.usage.output_tokens",
    "gen_ai.client.inference.operation.input_tokens",
    "gen_ai.client.inference.operation.output_tokens",
}
TINY = {
    "gen_ai.provider.name": "vllm",
    "gen_ai.operation.name": "text_completion",
    "gen_ai.request.model": "tiny",
}


def _token_series(reader: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for point in points(reader):
        if point.name.startswith("gen_ai."):
            found.setdefault(point.name, []).append(point)
    return found


def test_the_default_is_the_stable_histogram_alone(telemetry: Any) -> None:
    _, reader = telemetry
    gen_ai.record_generation([10, 20], [5], model="tiny")
    found = _token_series(reader)
    assert set(found) == STABLE_SHAPE  # never both shapes by default
    assert gen_ai.token_usage_names() == "spec"


def test_the_inference_usage_shape_is_counters_by_modality_and_operation_histograms(
    telemetry: Any,
) -> None:
    _, reader = telemetry
    gen_ai.set_token_usage_names("inference_usage")
    try:
        gen_ai.record_generation([10, 20], [5], model="tiny")
        gen_ai.record_generation([3], [7, 1], model="tiny")
    finally:
        gen_ai.set_token_usage_names(None)
    found = _token_series(reader)
    assert set(found) == USAGE_COUNTERS_SHAPE
    for side, total in (("input", 33), ("output", 13)):
        (counter,) = found[f"gen_ai.client.inference.usage.{side}_tokens"]
        assert (counter.kind, counter.monotonic, counter.unit) == ("sum", True, "{token}")
        assert counter.value == total  # every request's tokens added up
        assert counter.attributes == {**TINY, "gen_ai.token.modality": "text"}
        (histogram,) = found[f"gen_ai.client.inference.operation.{side}_tokens"]
        assert (histogram.kind, histogram.unit, histogram.sum) == ("histogram", "{token}", total)
        assert histogram.count == 3  # one point per request
        assert histogram.bounds == TOKEN_USAGE_BUCKETS
        # The per-operation histograms carry neither the token type nor the modality.
        assert histogram.attributes == TINY


def test_both_shapes_when_asked(telemetry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, reader = telemetry
    monkeypatch.setenv(gen_ai.TOKEN_USAGE_ENV, "both")
    gen_ai.record_generation([10, 20], [5], model="tiny")
    found = _token_series(reader)
    assert set(found) == STABLE_SHAPE | USAGE_COUNTERS_SHAPE
    stable = {p.attributes["gen_ai.token.type"]: p for p in found["gen_ai.client.token.usage"]}
    assert (stable["input"].sum, stable["output"].sum) == (30, 5)
    (counter,) = found["gen_ai.client.inference.usage.input_tokens"]
    assert counter.value == 30


def test_a_bad_environment_value_falls_back_to_the_stable_shape(
    telemetry: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _, reader = telemetry
    monkeypatch.setenv(gen_ai.TOKEN_USAGE_ENV, "counters")
    gen_ai.record_generation([4], [2])
    assert set(_token_series(reader)) == STABLE_SHAPE
    assert "RLMETRICS_GEN_AI_TOKEN_USAGE" in caplog.text


def test_token_usage_names_refuse_a_typo() -> None:
    with pytest.raises(ValueError, match="inference_usage"):
        gen_ai.set_token_usage_names("inference")


def test_rlmetrics_config_refuses_a_token_usage_name_that_is_none(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Before: ``rlmetrics config`` passed ``Spec`` (exit 0) and the run recorded ``spec``'s
    series after one warning at its first generation."""
    from rlmetrics.cli import main

    monkeypatch.setenv(gen_ai.TOKEN_USAGE_ENV, "Spec")
    assert main(["config"]) == 2
    assert "RLMETRICS_GEN_AI_TOKEN_USAGE='Spec': must be one of spec" in capsys.readouterr().err
    monkeypatch.setenv(gen_ai.TOKEN_USAGE_ENV, "inference_usage")
    assert main(["config"]) == 0
