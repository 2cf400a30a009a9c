"""The engine reader: names against vLLM 0.32.0's real exposition, step deltas from readings
derived from it, from a real prometheus_client registry, and over real HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import logging
import pickle
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import prometheus_client
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rlmetrics_vllm.engine import (
    ENGINE_FAMILIES,
    GENERATION_LENGTH_FAMILY,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_FAMILY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    OK_FINISH_REASONS,
    PROMPT_LENGTH_FAMILY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_FAMILY,
    PROMPT_TOKENS_KEY,
    REQUEST_SUCCESS_FAMILY,
    STEP_KEYS,
    Snapshot,
    merge_snapshots,
    read_families,
    read_registry,
    read_text,
    scrape,
    step_metrics,
)
from vllm_support import (
    AFTER,
    BEFORE,
    EXPECTED,
    FINISH_REASONS,
    EngineValues,
    TextServer,
    VllmRegistry,
)

from rlmetrics.testing import ExpositionServer, RefusingServer

Render = Callable[..., str]


# -- names -------------------------------------------------------------------------------------


def test_family_names_match_the_vllm_exposition_exactly(fixture_text: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(fixture_text)}
    for name, kind in ENGINE_FAMILIES.items():
        assert name in families, f"{name} is not in vLLM 0.32.0's /metrics"
        assert families[name].type == kind
        sample_names = {s.name for s in families[name].samples}
        wanted = {f"{name}_total"} if kind == "counter" else {f"{name}_sum", f"{name}_count"}
        assert wanted <= sample_names
    reasons = {s.labels["finished_reason"] for s in families[REQUEST_SUCCESS_FAMILY].samples}
    assert reasons == set(FINISH_REASONS)
    assert reasons >= OK_FINISH_REASONS


def test_the_fixture_with_no_request_served_gives_zero_counts_and_no_means(
    fixture_text: str,
) -> None:
    reading = read_text(fixture_text)
    assert step_metrics(reading, reading) == {
        PROMPT_TOKENS_KEY: 0,
        GENERATION_TOKENS_KEY: 0,
        GENERATIONS_OK_KEY: 0,
        GENERATIONS_FAILED_KEY: 0,
    }


# -- readings derived from the fixture -----------------------------------------------------------


def test_deltas_means_and_ok_failed_summed_over_engines(render: Render) -> None:
    result = step_metrics(read_text(render(BEFORE)), read_text(render(AFTER)))
    assert result == pytest.approx(EXPECTED)
    assert set(result) == set(STEP_KEYS)


def test_a_finish_reason_vllm_adds_later_counts_as_failed(render: Render) -> None:
    before = {"0": EngineValues(finished={"stop": 1, "timeout": 1})}
    after = {"0": EngineValues(finished={"stop": 2, "abort": 1, "timeout": 4})}
    result = step_metrics(read_text(render(before)), read_text(render(after)))
    assert result[GENERATIONS_OK_KEY] == 1
    assert result[GENERATIONS_FAILED_KEY] == 1 + 3  # abort + timeout
    assert result[GENERATIONS_OK_KEY] + result[GENERATIONS_FAILED_KEY] == 5


def test_a_step_with_no_request_served_omits_the_means(render: Render) -> None:
    result = step_metrics(read_text(render(AFTER)), read_text(render(AFTER)))
    assert PROMPT_LENGTH_MEAN_KEY not in result
    assert GENERATION_LENGTH_MEAN_KEY not in result
    assert result[PROMPT_TOKENS_KEY] == 0
    assert result[GENERATIONS_OK_KEY] == result[GENERATIONS_FAILED_KEY] == 0


@pytest.mark.parametrize(
    ("family", "gone"),
    [
        (PROMPT_TOKENS_FAMILY, {PROMPT_TOKENS_KEY}),
        (GENERATION_TOKENS_FAMILY, {GENERATION_TOKENS_KEY}),
        (PROMPT_LENGTH_FAMILY, {PROMPT_LENGTH_MEAN_KEY}),
        (GENERATION_LENGTH_FAMILY, {GENERATION_LENGTH_MEAN_KEY}),
        (REQUEST_SUCCESS_FAMILY, {GENERATIONS_OK_KEY, GENERATIONS_FAILED_KEY}),
    ],
)
def test_a_series_that_matches_nothing_is_omitted(
    render: Render, family: str, gone: set[str]
) -> None:
    drop = frozenset({family})
    for before, after in [
        (render(BEFORE, drop), render(AFTER, drop)),  # absent from both readings
        (render(BEFORE), render(AFTER, drop)),  # vanished between them
    ]:
        result = step_metrics(read_text(before), read_text(after))
        assert set(result) == set(STEP_KEYS) - gone
        assert result == pytest.approx({k: v for k, v in EXPECTED.items() if k not in gone})


def test_a_total_that_went_backwards_omits_that_series_only(render: Render) -> None:
    restarted = {
        # engine 1 restarted mid-step: its prompt tokens and histogram count dropped, while
        # engine 0's growth would otherwise hide that in the sum
        "0": AFTER["0"],
        "1": EngineValues(10, 150, 90, 1, 150, 4, {"stop": 2, "abort": 2}),
    }
    result = step_metrics(read_text(render(BEFORE)), read_text(render(restarted)))
    assert PROMPT_TOKENS_KEY not in result
    assert PROMPT_LENGTH_MEAN_KEY not in result
    assert result[GENERATION_TOKENS_KEY] == EXPECTED[GENERATION_TOKENS_KEY]
    assert result[GENERATION_LENGTH_MEAN_KEY] == pytest.approx(EXPECTED[GENERATION_LENGTH_MEAN_KEY])
    assert result[GENERATIONS_OK_KEY] == EXPECTED[GENERATIONS_OK_KEY]


def test_one_finish_reason_going_backwards_omits_ok_and_failed(render: Render) -> None:
    after = {"0": AFTER["0"], "1": EngineValues(90, 150, 90, 4, 150, 4, {"stop": 9, "abort": 0})}
    result = step_metrics(read_text(render(BEFORE)), read_text(render(after)))
    assert GENERATIONS_OK_KEY not in result
    assert GENERATIONS_FAILED_KEY not in result
    assert result[PROMPT_TOKENS_KEY] == EXPECTED[PROMPT_TOKENS_KEY]


def test_a_restart_whose_totals_passed_the_old_ones_is_seen_by_its_created_time(
    render: Render,
) -> None:
    # Engine 1 restarted and has already served more than before: every total grew, but each
    # of its series was created anew. Only its _created time tells.
    restarted = {
        "0": AFTER["0"],
        "1": EngineValues(900, 950, 900, 9, 950, 9, {"stop": 8, "abort": 1}, created=2e9),
    }
    result = step_metrics(read_text(render(BEFORE)), read_text(render(restarted)))
    assert result == {}
    # Engine 0 alone restarted the same way, engine 1 kept going: again nothing can be known.
    renewed = {"0": EngineValues(**{**vars(AFTER["0"]), "created": 2e9}), "1": AFTER["1"]}
    assert step_metrics(read_text(render(BEFORE)), read_text(render(renewed))) == {}
    # The same totals with unchanged creation times are an ordinary step.
    same = {"0": AFTER["0"], "1": EngineValues(**{**vars(restarted["1"]), "created": None})}
    assert step_metrics(read_text(render(BEFORE)), read_text(render(same)))[PROMPT_TOKENS_KEY] > 0


def test_an_engine_that_appeared_mid_step_omits_the_series(render: Render) -> None:
    result = step_metrics(read_text(render({"0": BEFORE["0"]})), read_text(render(AFTER)))
    assert result == {}


def test_data_parallel_leaders_merge_by_position(render: Render) -> None:
    # Two leaders, each calling its only engine "0"; their totals must not be matched together.
    leader_a = ({"0": BEFORE["0"]}, {"0": AFTER["0"]})
    leader_b = ({"0": BEFORE["1"]}, {"0": AFTER["1"]})
    before = [read_text(render(leader_a[0])), read_text(render(leader_b[0]))]
    after = [read_text(render(leader_a[1])), read_text(render(leader_b[1]))]
    assert step_metrics(before, after) == pytest.approx(EXPECTED)
    assert step_metrics(merge_snapshots(before), merge_snapshots(after)) == pytest.approx(EXPECTED)
    # A leader missing from one side leaves nothing that can be trusted.
    assert step_metrics(before, after[:1]) == {}


def test_a_leader_missing_from_one_side_is_said(
    render: Render, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: two leaders' readings before and one after (a reading not gathered, a list
    built wrong) omitted every key of every step without a word."""
    from rlmetrics_vllm.engine import engine_signals

    before = [read_text(render({"0": BEFORE["0"]})), read_text(render({"0": BEFORE["1"]}))]
    after = [read_text(render({"0": AFTER["0"]}))]
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert step_metrics(before, after) == {}
        assert engine_signals(before, after) == {}
    (warning,) = [r.getMessage() for r in caplog.records if "2 readings before" in r.getMessage()]
    assert "1 after" in warning and "same order" in warning, warning


def test_readers_never_raise_and_a_failed_reading_omits_everything(render: Render) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
    assert dead == Snapshot()
    assert read_text("this is {not prometheus") == Snapshot()
    assert read_text('{\n  {engine="0"} 1\n\t\n') == Snapshot()  # lines without a name
    assert read_registry(object()) == Snapshot()  # type: ignore[arg-type]
    assert step_metrics(read_text(render(BEFORE)), dead) == {}
    assert step_metrics(dead, dead) == {}
    # A failed leader keeps its position, so the other leader's engines stay matched right.
    good = read_text(render(BEFORE))
    assert step_metrics([good, good], [good, dead]) == {}


def test_an_exposition_given_as_bytes_reads_as_its_text_and_a_non_text_is_said_once(
    fixture_text: str, caplog: pytest.LogCaptureFixture
) -> None:
    """read_text promises never to raise: an exposition as the HTTP body's bytes
    (``response.content``) raised TypeError into the loop, and a list of lines was reported
    as "1 malformed line" of the text. Bytes are read as UTF-8; anything else is an empty
    reading saying what read_text takes."""
    assert read_text(fixture_text.encode()) == read_text(fixture_text)
    assert read_text(bytearray(fixture_text.encode())) == read_text(fixture_text)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for given in (fixture_text.splitlines(), 5):
            assert read_text(given) == Snapshot()  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "takes the exposition as a str" in said[0], said
    assert "malformed" not in said[0]


def test_read_families_never_raises(vllm_registry: VllmRegistry) -> None:
    """The docs' "readers never raise" held for read_registry and scrape, not for
    read_families: a collector raising while its families were collected, or objects that are
    no families, raised into the loop."""

    def collected_then_failed() -> Iterator[Any]:
        yield from vllm_registry.registry.collect()
        raise RuntimeError("a collector failed")

    assert read_families(collected_then_failed()) == Snapshot()
    for given in (None, ["vllm:prompt_tokens"], [object()]):
        assert read_families(given) == Snapshot()  # type: ignore[arg-type]
    assert any(read_families(vllm_registry.registry.collect()).parts)


def test_a_malformed_line_costs_that_line_and_its_family_only(
    render: Render, caplog: pytest.LogCaptureFixture
) -> None:
    """One torn sample line (engine 1's prompt tokens) and a garbled HELP line: the families
    they held are omitted for the step, every other family's deltas land, and the reading
    says how many lines it skipped."""
    after = render(AFTER).splitlines()
    engine_1 = f'{PROMPT_TOKENS_FAMILY}_total{{engine="1"'
    torn = next(i for i, line in enumerate(after) if line.startswith(engine_1))
    after[torn] = after[torn][:30]
    help_line = next(i for i, line in enumerate(after) if line.startswith("# HELP vllm:"))
    after[help_line] = "# HELP vllm:num_requests_running \\x unterminated \\"
    with caplog.at_level("WARNING", logger="rlmetrics"):
        result = step_metrics(read_text(render(BEFORE)), read_text("\n".join(after) + "\n"))
    assert result == pytest.approx({k: v for k, v in EXPECTED.items() if k != PROMPT_TOKENS_KEY})
    assert "1 malformed line" in caplog.text


def test_a_count_past_floats_range_costs_its_line_only(render: Render) -> None:
    """A sample of 400 digits parses as an int no float can hold (found by the 10**5 fuzz
    run: math.isfinite raised OverflowError and the whole reading was lost). It is not a
    finite value, so it is left out like +Inf; every other family's deltas land."""
    after = render(AFTER).splitlines()
    engine_1 = f'{PROMPT_TOKENS_FAMILY}_total{{engine="1"'
    huge = next(i for i, line in enumerate(after) if line.startswith(engine_1))
    after[huge] = after[huge].rsplit(" ", 1)[0] + " " + "9" * 400
    result = step_metrics(read_text(render(BEFORE)), read_text("\n".join(after) + "\n"))
    assert result == pytest.approx({k: v for k, v in EXPECTED.items() if k != PROMPT_TOKENS_KEY})


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_a_non_finite_sample_costs_its_family_only_and_is_said(
    render: Render, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a NaN or infinite total was dropped without a word, and its key went missing
    from the step as if vLLM had no such family."""
    after = render(AFTER).splitlines()
    engine_1 = f'{PROMPT_TOKENS_FAMILY}_total{{engine="1"'
    bad = next(i for i, line in enumerate(after) if line.startswith(engine_1))
    after[bad] = after[bad].rsplit(" ", 1)[0] + " " + value
    with caplog.at_level("WARNING", logger="rlmetrics"):
        result = step_metrics(read_text(render(BEFORE)), read_text("\n".join(after) + "\n"))
    assert result == pytest.approx({k: v for k, v in EXPECTED.items() if k != PROMPT_TOKENS_KEY})
    (warning,) = [r.getMessage() for r in caplog.records if "not a finite number" in r.getMessage()]
    assert f"{PROMPT_TOKENS_FAMILY}_total" in warning, warning


def test_a_snapshot_pickles(render: Render) -> None:
    snapshot = merge_snapshots([read_text(render(BEFORE)), read_text(render(AFTER))])
    assert pickle.loads(pickle.dumps(snapshot)) == snapshot


# -- a real prometheus_client registry -------------------------------------------------------------


def _serve_step(engine: VllmRegistry) -> None:
    """Engine 0 of the registry finishes four requests: two stop, one length, one abort."""
    engine.finish("0", prompt=10, generated=30, reason="stop")
    engine.finish("0", prompt=20, generated=50, reason="stop")
    engine.finish("0", prompt=30, generated=64, reason="length")
    engine.finish("0", prompt=40, generated=0, reason="abort")


STEP_FROM_REGISTRY = {
    PROMPT_TOKENS_KEY: 100,
    GENERATION_TOKENS_KEY: 144,
    PROMPT_LENGTH_MEAN_KEY: 25.0,
    GENERATION_LENGTH_MEAN_KEY: 36.0,
    GENERATIONS_OK_KEY: 3,
    GENERATIONS_FAILED_KEY: 1,
}


def test_step_from_an_in_process_registry(vllm_registry: VllmRegistry) -> None:
    vllm_registry.finish("0", prompt=7, generated=9)  # an earlier step, not counted
    before = read_registry(vllm_registry.registry)
    _serve_step(vllm_registry)
    after = read_registry(vllm_registry.registry)
    assert step_metrics(before, after) == STEP_FROM_REGISTRY


def test_a_registry_without_vllm_series_says_how_to_get_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: vllm.LLM's default disable_log_stats=True registers no vLLM metric, so every
    reading of the registry was empty and every vllm/* key went missing without a word."""
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("other_requests", "not vLLM's", registry=registry).inc()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert read_registry(registry) == Snapshot()
        assert read_registry(registry) == Snapshot()
    (warning,) = [r.getMessage() for r in caplog.records if "no vLLM series" in r.getMessage()]
    assert "disable_log_stats=False" in warning, warning


def test_step_from_the_default_registry() -> None:
    """vLLM registers in prometheus_client.REGISTRY; read_registry() reads it by default."""
    engine = VllmRegistry.__new__(VllmRegistry)
    engine.registry, engine.engines, engine.model = prometheus_client.REGISTRY, ("0",), "m"
    engine._build()
    try:
        before = read_registry()
        _serve_step(engine)
        assert step_metrics(before, read_registry()) == STEP_FROM_REGISTRY
    finally:
        for collector in engine._collectors:
            prometheus_client.REGISTRY.unregister(collector)


def test_registry_and_its_text_exposition_read_the_same(vllm_registry: VllmRegistry) -> None:
    _serve_step(vllm_registry)
    text = generate_latest(vllm_registry.registry).decode()
    assert "vllm:prompt_tokens_total{" in text  # samples carry _total on this path
    assert read_text(text) == read_registry(vllm_registry.registry)


def test_an_engine_restart_in_the_registry_omits_every_series(vllm_registry: VllmRegistry) -> None:
    _serve_step(vllm_registry)
    before = read_registry(vllm_registry.registry)
    vllm_registry.restart()
    vllm_registry.finish("0", prompt=5, generated=5)
    result = step_metrics(before, read_registry(vllm_registry.registry))
    assert result == {}
    assert all(v >= 0 for v in result.values())


def test_a_restarted_engine_that_served_more_than_before_omits_every_series(
    vllm_registry: VllmRegistry,
) -> None:
    vllm_registry.finish("0", prompt=3, generated=2)
    before = read_registry(vllm_registry.registry)
    vllm_registry.restart()
    _serve_step(vllm_registry)  # every new total is above the old one
    after = read_registry(vllm_registry.registry)
    assert all(
        after.parts[0][key] >= value
        for key, value in before.parts[0].items()
        if not key[0].endswith("_created")
    )
    assert step_metrics(before, after) == {}
    # Counting resumes from the restarted engine's own totals.
    before = after
    _serve_step(vllm_registry)
    assert step_metrics(before, read_registry(vllm_registry.registry)) == STEP_FROM_REGISTRY


def test_engines_in_one_registry_are_summed() -> None:
    engine = VllmRegistry(engines=("0", "1"))
    before = read_registry(engine.registry)
    engine.finish("0", prompt=10, generated=20, reason="stop")
    engine.finish("1", prompt=30, generated=40, reason="error")
    result = step_metrics(before, read_registry(engine.registry))
    assert result == {
        PROMPT_TOKENS_KEY: 40,
        GENERATION_TOKENS_KEY: 60,
        PROMPT_LENGTH_MEAN_KEY: 20.0,
        GENERATION_LENGTH_MEAN_KEY: 30.0,
        GENERATIONS_OK_KEY: 1,
        GENERATIONS_FAILED_KEY: 1,
    }


@pytest.mark.parametrize("over_http", [False, True], ids=["in-process", "http"])
def test_no_request_and_missing_families_from_a_real_registry(
    vllm_registry: VllmRegistry, serve_registry: Callable[..., str], over_http: bool
) -> None:
    url = serve_registry(vllm_registry.registry) if over_http else ""

    def read() -> Snapshot:
        return scrape(url) if over_http else read_registry(vllm_registry.registry)

    before = read()
    assert step_metrics(before, read()) == {  # no request served: counts 0, no means
        PROMPT_TOKENS_KEY: 0,
        GENERATION_TOKENS_KEY: 0,
        GENERATIONS_OK_KEY: 0,
        GENERATIONS_FAILED_KEY: 0,
    }
    # An engine without two of the families (an older vLLM, say): those keys leave a gap.
    vllm_registry.registry.unregister(vllm_registry.generation_tokens)
    vllm_registry.registry.unregister(vllm_registry.generation_length)
    before = read()
    _serve_step(vllm_registry)
    expected = dict(STEP_FROM_REGISTRY)
    del expected[GENERATION_TOKENS_KEY], expected[GENERATION_LENGTH_MEAN_KEY]
    assert step_metrics(before, read()) == expected


# -- real HTTP servers on 127.0.0.1 ------------------------------------------------------------


def test_step_from_scrapes_of_a_served_registry(
    vllm_registry: VllmRegistry, serve_registry: Callable[..., str]
) -> None:
    url = serve_registry(vllm_registry.registry)
    before = scrape(url)
    assert before == read_registry(vllm_registry.registry)  # same reading on both paths
    _serve_step(vllm_registry)
    assert step_metrics(before, scrape(url)) == STEP_FROM_REGISTRY
    # The engine restarts behind the same URL: the step's totals went backwards.
    before = scrape(url)
    vllm_registry.restart()
    vllm_registry.finish("0", prompt=1, generated=1)
    assert step_metrics(before, scrape(url)) == {}
    # ... or it restarts and serves more than before: only the creation times tell.
    before = scrape(url)
    vllm_registry.restart()
    _serve_step(vllm_registry)
    _serve_step(vllm_registry)
    assert step_metrics(before, scrape(url)) == {}


def test_step_from_scrapes_of_a_server_serving_fixture_readings(
    text_server: TextServer, render: Render
) -> None:
    assert scrape(text_server.url) == read_text(text_server.text)
    text_server.text = render(BEFORE)
    before = scrape(text_server.url)
    text_server.text = render(AFTER)
    assert step_metrics(before, scrape(text_server.url)) == pytest.approx(EXPECTED)
    text_server.text = render(AFTER, frozenset({GENERATION_TOKENS_FAMILY}))
    assert GENERATION_TOKENS_KEY not in step_metrics(before, scrape(text_server.url))


def test_data_parallel_leaders_scraped_over_http(render: Render) -> None:
    servers = [TextServer(render({"0": BEFORE["0"]})), TextServer(render({"0": BEFORE["1"]}))]
    try:
        before = [scrape(s.url) for s in servers]
        servers[0].text, servers[1].text = render({"0": AFTER["0"]}), render({"0": AFTER["1"]})
        result = step_metrics(before, [scrape(s.url) for s in servers])
        assert result == pytest.approx(EXPECTED)
    finally:
        for server in servers:
            server.close()


# -- the engine's state and cache ------------------------------------------------------------

from rlmetrics_vllm.engine import (  # noqa: E402
    SIGNAL_FAMILIES,
    engine_signals,
)
from vllm_support import render_exposition  # noqa: E402


def test_signal_families_are_in_the_vllm_exposition_as_read(fixture_text: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(fixture_text)}
    for name, kind in SIGNAL_FAMILIES.items():
        assert name in families, f"{name} is not in vLLM 0.32.0's /metrics"
        assert families[name].type == kind, name
    reasons = {s.labels["reason"] for s in families["vllm:num_requests_waiting_by_reason"].samples}
    assert reasons == {"capacity", "deferred"}
    states = {s.labels["sleep_state"] for s in families["vllm:engine_sleep_state"].samples}
    assert "awake" in states


def _reading(engines: dict[str, EngineValues], at: float) -> Snapshot:
    reading = read_text(render_exposition(engines))
    return Snapshot(reading.parts, at)


SIGNALS_BEFORE = {
    "0": EngineValues(
        prefix_queries=1000,
        prefix_hits=200,
        preemptions=1,
        cached_prompt_tokens=200,
        flops=1e15,
        awake=0.0,
    ),
    "1": EngineValues(
        prefix_queries=500,
        prefix_hits=100,
        preemptions=0,
        cached_prompt_tokens=100,
        flops=2e15,
        awake=0.0,
    ),
}
SIGNALS_AFTER = {
    "0": EngineValues(
        prefix_queries=1600,
        prefix_hits=500,
        preemptions=3,
        cached_prompt_tokens=500,
        flops=5e15,
        kv_usage=0.25,
        waiting={"capacity": 3, "deferred": 1},
    ),
    "1": EngineValues(
        prefix_queries=900,
        prefix_hits=300,
        preemptions=0,
        cached_prompt_tokens=300,
        flops=8e15,
        kv_usage=0.75,
        waiting={"capacity": 2},
    ),
}


def test_engine_signals_from_two_engines() -> None:
    # Asleep at the step's start (the policy trained), woken 2 s in, read again at 10 s.
    before = _reading(SIGNALS_BEFORE, 100.0)
    woken = _reading(
        {k: EngineValues(**{**vars(v), "awake": 1.0}) for k, v in SIGNALS_BEFORE.items()}, 102.0
    )
    after = _reading(SIGNALS_AFTER, 110.0)
    assert engine_signals(before, after, peak_flops_per_gpu=1e14, during=[woken]) == {
        "vllm/prefix_cache_hit_rate": (300 + 200) / (600 + 400),
        "vllm/cached_prompt_tokens": 300 + 200,
        "vllm/preemptions": 2,
        "vllm/kv_cache_usage": 0.5,
        "vllm/requests_waiting/capacity": 5,
        "vllm/requests_waiting/deferred": 1,
        "vllm/awake_share": 0.8,  # asleep 2 s of 10
        # each engine's flops per GPU over 10 s: (4e15 + 6e15) / 2 / 10 s / 1e14
        "vllm/mfu": 5.0,
    }
    # Without the peak FLOPs there is no MFU; with only two readings the state at the start
    # stands for the step.
    signals = engine_signals(before, after)
    assert "vllm/mfu" not in signals and signals["vllm/awake_share"] == 0.0


def test_no_query_no_hit_rate_and_no_flops_no_mfu(fixture_text: str) -> None:
    reading = read_text(fixture_text)
    signals = engine_signals(
        reading, Snapshot(reading.parts, (reading.taken_at or 0) + 1), peak_flops_per_gpu=1e14
    )
    assert "vllm/prefix_cache_hit_rate" not in signals and "vllm/mfu" not in signals
    assert signals["vllm/kv_cache_usage"] == 0.0 and signals["vllm/awake_share"] == 1.0


@pytest.mark.parametrize("how", ["backwards", "created", "engine-gone"])
def test_a_restart_step_omits_every_signal(how: str) -> None:
    after = dict(SIGNALS_AFTER)
    if how == "backwards":
        after["0"] = EngineValues(**{**vars(SIGNALS_AFTER["0"]), "prefix_queries": 10})
    elif how == "created":
        after["1"] = EngineValues(**{**vars(SIGNALS_AFTER["1"]), "created": 2e9})
    else:
        del after["1"]
    assert engine_signals(_reading(SIGNALS_BEFORE, 0.0), _reading(after, 10.0)) == {}


def test_otel_style_names_read_as_vllms() -> None:
    """An engine pushing OpenTelemetry-style names (vllm.prefix_cache_hits, exposed through an
    OTel pipeline as vllm_prefix_cache_hits_total) reads as vLLM's own."""
    text = render_exposition(SIGNALS_AFTER).replace("vllm:", "vllm_")
    assert read_text(text) == read_text(render_exposition(SIGNALS_AFTER))


#: vLLM's renames of its cache families (PR 18354, vLLM 0.10): the names before it.
_OLDER_NAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries": "vllm:gpu_prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:gpu_prefix_cache_hits",
}


def _with_older_names(text: str) -> str:
    for current, older in _OLDER_NAMES.items():
        text = text.replace(current + "_", older + "_").replace(current + "{", older + "{")
        text = text.replace(current + " ", older + " ").replace(current + "\n", older + "\n")
    return text


def test_an_older_vllms_names_of_the_cache_families_read_as_the_current_ones() -> None:
    """A vLLM before 0.10 names the KV-cache usage vllm:gpu_cache_usage_perc and the prefix
    cache's counters vllm:gpu_prefix_cache_queries / _hits: the same values under the names
    vLLM renamed them from. They were left out, unsaid, so such a vLLM gave no
    vllm/kv_cache_usage and no vllm/prefix_cache_hit_rate."""
    older = _with_older_names(render_exposition(SIGNALS_AFTER))
    assert "vllm:gpu_cache_usage_perc{" in older and "vllm:kv_cache_usage_perc" not in older
    assert read_text(older) == read_text(render_exposition(SIGNALS_AFTER))
    before = Snapshot(read_text(_with_older_names(render_exposition(SIGNALS_BEFORE))).parts, 0.0)
    after = Snapshot(read_text(older).parts, 10.0)
    signals = engine_signals(before, after)
    assert signals == engine_signals(_reading(SIGNALS_BEFORE, 0.0), _reading(SIGNALS_AFTER, 10.0))
    assert {"vllm/kv_cache_usage", "vllm/prefix_cache_hit_rate"} <= set(signals)

    registry = prometheus_client.CollectorRegistry()
    usage = prometheus_client.Gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage.",
        ["engine", "model_name"],
        registry=registry,
    )
    usage.labels("0", "m").set(0.4)
    reading = read_registry(registry)
    assert engine_signals(reading, reading)["vllm/kv_cache_usage"] == 0.4


def test_a_vllm_serving_the_older_names_beside_the_current_ones_is_read_by_the_current() -> None:
    """vLLM 0.10 and 0.11 serve the deprecated names beside the current ones: the current ones
    are read, whichever comes first in the exposition, and nothing is counted twice."""
    current = render_exposition(SIGNALS_AFTER)
    older_copies = _with_older_names(
        render_exposition(
            {"0": EngineValues(prefix_queries=9e6, prefix_hits=1, kv_usage=0.99)}, only_read=True
        )
    )
    copies = "".join(
        line + "\n" for line in older_copies.splitlines() if ":gpu_" in line and "#" not in line
    )
    assert copies
    for both in (current + copies, copies + current):
        assert read_text(both) == read_text(current)


def test_a_family_the_vllm_does_not_serve_is_said_once_with_the_keys_it_costs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A vLLM without a family read (an older one: no waiting reasons, no sleep state) gave
    its steps without those keys and said nothing; now the first step says once which
    families are missing and which keys that leaves out. A complete reading says nothing."""
    waiting, sleep = "vllm:num_requests_waiting_by_reason", "vllm:engine_sleep_state"
    dropped = frozenset({waiting, sleep, GENERATION_LENGTH_FAMILY})
    before = _reading_of(render_exposition(SIGNALS_BEFORE, drop=dropped), 0.0)
    after = _reading_of(render_exposition(SIGNALS_AFTER, drop=dropped), 10.0)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for _ in range(3):
            signals = engine_signals(before, after)
            keys = step_metrics(before, after)
    assert "vllm/awake_share" not in signals and "vllm/kv_cache_usage" in signals
    assert "vllm/generation_length_mean" not in keys and "vllm/prompt_tokens" in keys
    said = [r.getMessage() for r in caplog.records if "serves no" in r.getMessage()]
    assert len(said) == 2, said
    signals_said, step_said = sorted(said, key=lambda message: "awake" not in message)
    for part in (waiting, sleep, "vllm/requests_waiting/*"):
        assert part in signals_said, signals_said
    assert "vllm/awake_share" in signals_said and "kv_cache" not in signals_said
    assert GENERATION_LENGTH_FAMILY in step_said and "vllm/generation_length_mean" in step_said

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        full = _reading(SIGNALS_AFTER, 10.0)
        engine_signals(full, full)
        step_metrics(full, full)
        engine_signals(Snapshot(), Snapshot())  # an empty reading is its reader's to say
    assert not [r for r in caplog.records if "serves no" in r.getMessage()]


def _reading_of(text: str, at: float) -> Snapshot:
    return Snapshot(read_text(text).parts, at)


@pytest.mark.parametrize("answer", ["a path vLLM does not serve", "metrics that are not vLLM's"])
def test_a_scrape_of_no_vllm_metrics_endpoint_says_what_it_got(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a 404 (the server's address without /metrics, the API's /v1) was "scraping URL
    failed", naming no cause; another process's metrics (a node exporter, Ray's) were read as
    an engine with no series, and every step's rl.vllm.* series went missing unsaid."""
    if answer == "a path vLLM does not serve":
        server: Any = RefusingServer(404, {"detail": "Not Found"})
        url = f"{server.endpoint}/v1"
        said = ("HTTP Error 404: Not Found", "vLLM serves its metrics at /metrics")
    else:
        server = ExpositionServer(
            lambda: "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"
        )
        url = server.url
        said = ("holds no vLLM series", "is it a vLLM server's /metrics?")
    try:
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            assert scrape(url, timeout_s=5) == Snapshot()
    finally:
        server.close()
    (warning,) = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    assert all(part in warning for part in said), warning


def test_an_address_without_its_scheme_is_said_with_the_url_to_give(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``scrape("127.0.0.1:8000/metrics")``, the address as a server log prints it, was
    "unknown url type: 127.0.0.1 ... Check the address and that a vLLM server listens there",
    sending the user to look for a server that is there; it says to give the scheme."""
    server = ExpositionServer(lambda: "vllm:prompt_tokens_total 5\n")
    try:
        url = server.url.removeprefix("http://")
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            assert scrape(url, timeout_s=5) == Snapshot()
        assert any(scrape(server.url, timeout_s=5).parts)  # the server is there
    finally:
        server.close()
    (warning,) = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    assert f"Give the URL with its scheme: http://{url}" in warning, warning
    assert "Check the address" not in warning


class TricklingServer:
    """An HTTP endpoint on 127.0.0.1 that answers 200 at once, then sends its body one line
    at a time, each well within a socket timeout, for a minute (or until closed): a loaded
    server streaming its exposition slowly. ``finished`` is set once it sent every line."""

    LINES = 300

    def __init__(self, line: bytes, every_s: float = 0.2) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/metrics"
        self.line, self.every_s = line, every_s
        self.finished = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            connection, _ = self._sock.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                for _ in range(self.LINES):
                    if self._closed.wait(self.every_s):
                        return
                    connection.sendall(self.line)
                self.finished.set()

    def close(self) -> None:
        self._closed.set()
        self._sock.close()
        self._thread.join(10)


def test_a_scrape_of_a_trickling_server_ends_within_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: timeout_s bounded each socket read, not the scrape, so a server that kept
    sending a line now and then held the training loop for as long as it went on."""
    server = TricklingServer(b'vllm:prompt_tokens_total{engine="0",model_name="m"} 1.0\n')
    try:
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            assert scrape(server.url, timeout_s=0.5) == Snapshot()
        assert not server.finished.is_set()  # returned while the server was still sending
    finally:
        server.close()
    (warning,) = [r.getMessage() for r in caplog.records if server.url in r.getMessage()]
    assert "no whole answer within 0.5 s" in warning, warning
    assert "larger timeout_s" in warning, warning


@pytest.mark.parametrize("timeout_s", [None, "5", -1.0])
def test_a_scrape_given_no_usable_timeout_is_still_bounded_and_says_so(
    timeout_s: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``scrape(url, timeout_s=None)`` (a config's ``null`` for "no timeout") waited for as
    long as the server took, a server that never answers holding the training loop forever;
    "5" failed with "Check the address". Such a timeout is said once and the default bounds
    the scrape."""
    server = TricklingServer(b'vllm:prompt_tokens_total{engine="0",model_name="m"} 1.0\n')
    try:
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            assert scrape(server.url, timeout_s=timeout_s) == Snapshot()
        assert not server.finished.is_set()  # returned while the server was still sending
    finally:
        server.close()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "timeout_s must be a positive number of seconds" in said, said
    assert "Check the address" not in said, said


def test_two_scrapes_of_one_server_at_once_both_read_it(fixture_text: str) -> None:
    """Only a scrape that overran its timeout keeps its URL from being scraped again: two
    at once (a loop's reading and a monitor's, say) both get the server's answer."""
    arrived: list[int] = []
    both = threading.Event()

    def render() -> str:
        arrived.append(1)
        if len(arrived) >= 2:
            both.set()
        both.wait(30)  # each request is held until both are in
        return fixture_text

    server = ExpositionServer(render)
    try:
        results: list[Snapshot] = []
        threads = [
            threading.Thread(target=lambda: results.append(scrape(server.url, timeout_s=60)))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
    finally:
        server.close()
    assert len(results) == 2 and all(any(result.parts) for result in results)
