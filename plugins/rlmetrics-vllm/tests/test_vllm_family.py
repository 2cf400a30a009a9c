"""The vllm family: a train dict's ``vllm/*`` keys reach ``rl.vllm.*`` through Logger.log_metrics,
read back from an in-memory reader."""

from __future__ import annotations

from typing import Any

import pytest
from rlmetrics_vllm import family
from rlmetrics_vllm.engine import (
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_KEY,
    SIGNAL_KEYS,
    STEP_KEYS,
    read_registry,
    step_metrics,
)
from vllm_support import VllmRegistry

import rlmetrics
from rlmetrics.testing import isolated_state, points, single

NAMES = {
    PROMPT_TOKENS_KEY: ("rl.vllm.prompt_tokens", "sum", "{token}"),
    GENERATION_TOKENS_KEY: ("rl.vllm.generation_tokens", "sum", "{token}"),
    PROMPT_LENGTH_MEAN_KEY: ("rl.vllm.prompt_length.mean", "gauge", "{token}"),
    GENERATION_LENGTH_MEAN_KEY: ("rl.vllm.generation_length.mean", "gauge", "{token}"),
    GENERATIONS_OK_KEY: ("rl.vllm.generations.ok", "sum", "{generation}"),
    GENERATIONS_FAILED_KEY: ("rl.vllm.generations.failed", "sum", "{generation}"),
}
SIGNAL_NAMES = {
    "vllm/prefix_cache_hit_rate": ("rl.vllm.prefix_cache.hit_rate", "gauge", "1"),
    "vllm/kv_cache_usage": ("rl.vllm.kv_cache.usage", "gauge", "1"),
    "vllm/preemptions": ("rl.vllm.preemptions", "sum", "{preemption}"),
    "vllm/cached_prompt_tokens": ("rl.vllm.cached_prompt_tokens", "sum", "{token}"),
    "vllm/awake_share": ("rl.vllm.engine.awake", "gauge", "1"),
    "vllm/mfu": ("rl.vllm.mfu", "gauge", "1"),
}


def _log(metrics: dict[str, Any], step: int = 1, prefix: str = "train") -> None:
    rlmetrics.Logger(backends={}).log_metrics(metrics, step=step, prefix=prefix)


def test_every_step_key_has_one_spec() -> None:
    keyed = [spec for spec in family.SPECS if spec.name != family.REQUESTS_WAITING]
    assert [spec.key for spec in keyed] == [*STEP_KEYS, *SIGNAL_KEYS]
    assert {spec.key: (spec.name, spec.unit) for spec in keyed} == {
        key: (name, unit) for key, (name, _, unit) in {**NAMES, **SIGNAL_NAMES}.items()
    }


def test_a_train_dict_from_a_real_registry_reaches_the_series(telemetry: Any) -> None:
    _, reader = telemetry
    engine = VllmRegistry()
    before = read_registry(engine.registry)
    for prompt, generated, reason in [(10, 30, "stop"), (20, 50, "length"), (30, 4, "abort")]:
        engine.finish("0", prompt, generated, reason)
    vllm_keys = step_metrics(before, read_registry(engine.registry))
    # The loop nests or merges the keys into its train dict; both flatten to vllm/*.
    _log({"loss": 0.5, "vllm": {k.split("/", 1)[1]: v for k, v in vllm_keys.items()}})

    found = points(reader)
    expected = {
        PROMPT_TOKENS_KEY: 60,
        GENERATION_TOKENS_KEY: 84,
        PROMPT_LENGTH_MEAN_KEY: 20.0,
        GENERATION_LENGTH_MEAN_KEY: 28.0,
        GENERATIONS_OK_KEY: 2,
        GENERATIONS_FAILED_KEY: 1,
    }
    for key, value in expected.items():
        name, kind, unit = NAMES[key]
        point = single(found, name)
        assert (point.value, point.kind, point.unit, point.attributes) == (value, kind, unit, {})
        if kind == "sum":
            assert point.monotonic is True


def test_counters_accumulate_the_step_deltas(telemetry: Any) -> None:
    _, reader = telemetry
    _log({PROMPT_TOKENS_KEY: 7, GENERATIONS_OK_KEY: 2, GENERATIONS_FAILED_KEY: 0}, step=1)
    _log({PROMPT_TOKENS_KEY: 5, GENERATIONS_OK_KEY: 3, GENERATIONS_FAILED_KEY: 1}, step=2)
    found = points(reader)
    assert single(found, "rl.vllm.prompt_tokens").value == 12
    assert single(found, "rl.vllm.generations.ok").value == 5
    assert single(found, "rl.vllm.generations.failed").value == 1


def test_an_omitted_mean_leaves_a_gap_not_a_zero(telemetry: Any) -> None:
    _, reader = telemetry
    _log({PROMPT_TOKENS_KEY: 0, GENERATIONS_OK_KEY: 0})  # a step with no request served
    found = points(reader)
    assert single(found, "rl.vllm.prompt_tokens").value == 0
    assert not [p for p in found if p.name.endswith(".mean")]


def test_a_step_without_requests_ends_the_previous_mean(telemetry: Any) -> None:
    _, reader = telemetry
    _log({PROMPT_TOKENS_KEY: 40, PROMPT_LENGTH_MEAN_KEY: 20.0, GENERATION_LENGTH_MEAN_KEY: 5.0})
    assert single(points(reader), "rl.vllm.prompt_length.mean").value == 20.0
    _log({PROMPT_TOKENS_KEY: 0, GENERATIONS_OK_KEY: 0}, step=2)
    found = points(reader)
    assert single(found, "rl.vllm.prompt_tokens").value == 40
    assert not [p for p in found if p.name.endswith(".mean")]
    _log({PROMPT_TOKENS_KEY: 10, PROMPT_LENGTH_MEAN_KEY: 10.0}, step=3)  # served again
    assert single(points(reader), "rl.vllm.prompt_length.mean").value == 10.0


def test_an_engine_restart_step_leaves_the_means_a_gap(telemetry: Any) -> None:
    """A step whose totals went backwards (the engine restarted mid-step) omits its deltas;
    the means must not go on showing the previous step's values either."""
    _, reader = telemetry
    engine = VllmRegistry()
    before = read_registry(engine.registry)
    engine.finish("0", prompt=10, generated=30)
    engine.finish("0", prompt=20, generated=50)
    _log({"loss": 0.5, **step_metrics(before, read_registry(engine.registry))}, step=1)
    found = points(reader)
    assert single(found, "rl.vllm.prompt_length.mean").value == 15.0
    assert single(found, "rl.vllm.generation_length.mean").value == 40.0

    before = read_registry(engine.registry)
    engine.restart()
    engine.finish("0", prompt=4, generated=6)
    restart_step = step_metrics(before, read_registry(engine.registry))
    assert restart_step == {}  # every total went backwards: nothing about the step is known
    _log({"loss": 0.4, **restart_step}, step=2)
    found = points(reader)
    assert not [p for p in found if p.name.endswith(".mean")]
    assert single(found, "rl.vllm.prompt_tokens").value == 30  # step 1's only
    assert single(found, "rl.policy.loss").value == 0.4

    # Counting resumes on the restarted engine.
    before = read_registry(engine.registry)
    engine.finish("0", prompt=8, generated=2)
    _log({"loss": 0.3, **step_metrics(before, read_registry(engine.registry))}, step=3)
    found = points(reader)
    assert single(found, "rl.vllm.prompt_length.mean").value == 8.0
    assert single(found, "rl.vllm.generation_length.mean").value == 2.0
    assert single(found, "rl.vllm.prompt_tokens").value == 38


def test_a_second_train_dict_of_the_same_step_leaves_the_means_alone(telemetry: Any) -> None:
    _, reader = telemetry
    _log({PROMPT_TOKENS_KEY: 40, PROMPT_LENGTH_MEAN_KEY: 20.0}, step=1)
    _log({"loss": 1.0}, step=1)  # the same step, logged in two dicts
    assert single(points(reader), "rl.vllm.prompt_length.mean").value == 20.0


@pytest.mark.parametrize("prefix", ["", "train"])
def test_both_train_prefixes_are_teed(telemetry: Any, prefix: str) -> None:
    _, reader = telemetry
    _log({GENERATION_TOKENS_KEY: 9}, prefix=prefix)
    assert single(points(reader), "rl.vllm.generation_tokens").value == 9


@pytest.mark.parametrize("prefix", ["validation", "timing/setup", "eval"])
def test_other_prefixes_are_not_teed(telemetry: Any, prefix: str) -> None:
    _, reader = telemetry
    _log({GENERATION_TOKENS_KEY: 9, PROMPT_LENGTH_MEAN_KEY: 3.0}, prefix=prefix)
    assert not [p for p in points(reader) if p.name.startswith("rl.vllm.")]


def test_one_bad_value_does_not_silence_the_others(telemetry: Any) -> None:
    _, reader = telemetry
    _log(
        {
            PROMPT_TOKENS_KEY: "lots",  # not a number
            GENERATION_TOKENS_KEY: -4,  # a counter cannot go down
            PROMPT_LENGTH_MEAN_KEY: float("nan"),
            GENERATION_LENGTH_MEAN_KEY: 12.5,
            GENERATIONS_OK_KEY: 3,
        }
    )
    found = [p for p in points(reader) if p.name.startswith("rl.vllm.")]
    assert {p.name: p.value for p in found} == {
        "rl.vllm.generation_length.mean": 12.5,
        "rl.vllm.generations.ok": 3,
    }


def test_the_tee_is_a_no_op_when_not_exporting() -> None:
    with isolated_state():
        assert not rlmetrics.is_exporting()
        family.log_metrics({PROMPT_TOKENS_KEY: 1}, 1, "train")  # must not raise
        _log({PROMPT_TOKENS_KEY: 1})


def test_only_the_vllm_keys_of_train_dicts_are_teed(telemetry: Any) -> None:
    _handle, reader = telemetry
    logger = rlmetrics.Logger(backends={})
    metrics = {PROMPT_TOKENS_KEY: 1, "loss": 2.0, GENERATIONS_OK_KEY: None}
    for step, prefix in enumerate(("train", "", "validation")):
        logger.log_metrics(metrics, step=step, prefix=prefix)
    found = [p for p in points(reader) if p.name.startswith("rl.vllm.")]
    assert [(p.name, p.value) for p in found] == [("rl.vllm.prompt_tokens", 2)]


def test_engine_signals_reach_their_series_and_a_restart_step_leaves_a_gap(
    telemetry: Any,
) -> None:
    from rlmetrics_vllm.engine import Snapshot, engine_signals, read_text
    from vllm_support import EngineValues, render_exposition

    _, reader = telemetry

    def reading(values: EngineValues, at: float) -> Snapshot:
        return Snapshot(read_text(render_exposition({"0": values})).parts, at)

    before = reading(EngineValues(prefix_queries=100, prefix_hits=10, flops=0), 0.0)
    after = reading(
        EngineValues(
            prefix_queries=300,
            prefix_hits=110,
            preemptions=2,
            cached_prompt_tokens=100,
            flops=2e15,
            kv_usage=0.5,
            waiting={"capacity": 4},
        ),
        10.0,
    )
    _log({"loss": 0.5, **engine_signals(before, after, peak_flops_per_gpu=1e15)}, step=1)
    found = points(reader)
    expected = {
        "rl.vllm.prefix_cache.hit_rate": 0.5,
        "rl.vllm.kv_cache.usage": 0.5,
        "rl.vllm.preemptions": 2,
        "rl.vllm.cached_prompt_tokens": 100,
        "rl.vllm.engine.awake": 1.0,
        "rl.vllm.mfu": 0.2,
    }
    for name, value in expected.items():
        assert single(found, name).value == value, name
    waiting = {
        p.attributes["rl.vllm.waiting.reason"]: p.value
        for p in found
        if p.name == "rl.vllm.requests.waiting"
    }
    assert waiting == {"capacity": 4, "deferred": 0}

    # The next step an engine restarted: every engine-state gauge is a gap, not step 1's.
    restarted = reading(EngineValues(prefix_queries=5, created=2e9), 20.0)
    _log({"loss": 0.4, **engine_signals(after, restarted), "vllm/prompt_tokens": 1}, step=2)
    names = {p.name for p in points(reader)}
    assert not names & {
        "rl.vllm.prefix_cache.hit_rate",
        "rl.vllm.kv_cache.usage",
        "rl.vllm.engine.awake",
        "rl.vllm.mfu",
        "rl.vllm.requests.waiting",
    }


def test_a_restart_step_that_omits_every_key_ends_the_waiting_gauges(telemetry: Any) -> None:
    """An engine restart in which every total went backwards gives neither step_metrics nor
    engine_signals a key: the requests waiting must be a gap then, as the means are, not the
    previous step's counts."""
    from rlmetrics_vllm.engine import Snapshot, engine_signals, read_text
    from vllm_support import EngineValues, render_exposition

    _, reader = telemetry

    def reading(values: EngineValues, at: float) -> Snapshot:
        return Snapshot(read_text(render_exposition({"0": values})).parts, at)

    before = reading(EngineValues(prompt_tokens=10, kv_usage=0.1), 0.0)
    after = reading(EngineValues(prompt_tokens=50, kv_usage=0.5, waiting={"capacity": 4}), 10.0)
    _log({"loss": 0.5, **step_metrics(before, after), **engine_signals(before, after)}, step=1)
    assert [p.value for p in points(reader) if p.name == "rl.vllm.requests.waiting"] == [4, 0]

    restarted = reading(EngineValues(prompt_tokens=3, created=2e9), 20.0)
    restart_step = {**step_metrics(after, restarted), **engine_signals(after, restarted)}
    assert restart_step == {}
    _log({"loss": 0.4, **restart_step}, step=2)
    names = {p.name for p in points(reader)}
    assert "rl.vllm.kv_cache.usage" not in names
    assert "rl.vllm.requests.waiting" not in names

    # A later train dict of the restart step does not bring them back; the next reading does.
    _log({"loss": 0.3}, step=2)
    assert "rl.vllm.requests.waiting" not in {p.name for p in points(reader)}
    again = reading(EngineValues(prompt_tokens=9, created=2e9, waiting={"deferred": 2}), 30.0)
    _log({"loss": 0.2, **engine_signals(restarted, again)}, step=3)
    waiting = {
        p.attributes["rl.vllm.waiting.reason"]: p.value
        for p in points(reader)
        if p.name == "rl.vllm.requests.waiting"
    }
    assert waiting == {"capacity": 0, "deferred": 2}


def test_the_logger_key_the_docs_give_requests_waiting_is_the_one_it_reads(telemetry: Any) -> None:
    """docs/vllm.md's generated table gives each series the key to log: for the requests
    waiting, that is the pattern of the keys engine_signals returns (one reason per key). It
    gave the series' name, and logging that recorded an unlabelled point beside the reasons."""
    from rlmetrics.catalogue import metrics_table
    from rlmetrics.key_patterns import pattern_regex
    from rlmetrics.registry import default_registry

    _, reader = telemetry
    spec = next(spec for spec in family.SPECS if spec.name == family.REQUESTS_WAITING)
    assert pattern_regex(spec.key).fullmatch("vllm/requests_waiting/capacity")
    table = metrics_table(default_registry().declared(), ["rlmetrics_vllm.family"])
    row = next(line for line in table.splitlines() if "`rl.vllm.requests.waiting`" in line)
    assert "| `vllm/requests_waiting/*` |" in row
    _log({"loss": 0.5, "rl.vllm.requests.waiting": 3, "vllm/requests_waiting/capacity": 2})
    waiting = {
        tuple(p.attributes.items()): p.value
        for p in points(reader)
        if p.name == "rl.vllm.requests.waiting"
    }
    assert waiting == {(("rl.vllm.waiting.reason", "capacity"),): 2}


def test_the_requests_waiting_of_the_ranks_add_up_as_the_series_declares() -> None:
    """Each rank's ``vllm/requests_waiting/<reason>`` merges across ranks by the series' own
    reduction (a sum, as the docs' table says), not as an undeclared key (a mean)."""
    from rlmetrics.ranks import Reductions
    from rlmetrics.spec import Reduce

    columns = Reductions().columns(["vllm/requests_waiting/capacity", "vllm/preemptions"])
    assert [column.kind for column in columns] == [Reduce.SUM, Reduce.SUM]
