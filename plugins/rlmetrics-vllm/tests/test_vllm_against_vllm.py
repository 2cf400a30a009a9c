"""The engine reader against vLLM itself: the names it copies, the fixture, and step deltas from
vLLM's own ``PrometheusStatLogger`` driven with vLLM's own stats objects.

The stat logger is the object a running engine records into (``LLMEngine``/``AsyncLLM`` call its
``record`` once per engine iteration); here the test feeds it ``IterationStats`` built by vLLM's
own ``update_from_output``/``update_from_finished_request``, the way vLLM's ``OutputProcessor``
does, so the totals in ``prometheus_client.REGISTRY`` are the ones an engine serving those
requests would show. Runs in the ``vllm`` tox env; skips where vLLM is not importable.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from rlmetrics_vllm.engine import (
    ENGINE_FAMILIES,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    OK_FINISH_REASONS,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_KEY,
    REQUEST_SUCCESS_FAMILY,
    Snapshot,
    read_registry,
    scrape,
    step_metrics,
)
from vllm_real import (
    MODEL,
    VllmFamilies,
    engine_step,
    engine_totals,
    fixture_name,
    remove_vllm_metrics,
    require_vllm,
    stat_logger,
    vllm_config,
    vllm_exposition,
    write_tiny_config,
)
from vllm_support import FINISH_REASONS, FIXTURE

import rlmetrics
from rlmetrics.testing import points, single

vllm = require_vllm()

from prometheus_client import CollectorRegistry  # noqa: E402
from vllm.v1.engine import FINISH_REASON_STRINGS, EngineCoreOutput, FinishReason  # noqa: E402
from vllm.v1.metrics.stats import (  # noqa: E402
    IterationStats,
    LoRARequestStates,
    PrefillStats,
    RequestStateStats,
    SchedulerStats,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return vllm_config(write_tiny_config(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture
def new_logger(config: Any) -> Iterator[Callable[..., Any]]:
    """Builds vLLM's PrometheusStatLogger (as an engine does at start: every earlier vLLM
    collector is unregistered first); vLLM's collectors are removed after the test."""
    yield lambda engines=(0,): stat_logger(config, engines)
    remove_vllm_metrics()


# -- driving the stat logger with vLLM's own stats objects ---------------------------------------


@dataclass(frozen=True)
class Request:
    prompt: int
    generated: int
    reason: str = "stop"


def serve(logger: Any, requests: Sequence[Request], engine: int = 0) -> None:
    """Record ``requests`` into ``logger`` as engine ``engine`` would: the first iteration
    prefills every request and samples its first token, each later one a token per running
    request; a request finishes in the iteration of its last token (an abort with no token,
    in the first). One ``IterationStats`` per iteration, filled by vLLM's own methods."""
    lora = LoRARequestStates(log_stats=True)
    states = {index: RequestStateStats(arrival_time=time.time()) for index in range(len(requests))}
    emitted = dict.fromkeys(states, 0)
    running = set(states)
    iteration = 0
    while running:
        stats = IterationStats()
        for index in sorted(running):
            request = requests[index]
            prefilling = iteration == 0
            prefill = PrefillStats()
            if prefilling:
                prefill.set(request.prompt, 0, 0)
            new_tokens = [5] if emitted[index] < request.generated else []
            output = EngineCoreOutput(
                request_id=str(index),
                new_token_ids=new_tokens,
                prefill_stats=prefill if prefilling else None,
            )
            stats.update_from_output(
                output, time.monotonic(), prefilling, states[index], lora, None
            )
            emitted[index] += len(new_tokens)
            if emitted[index] == request.generated:
                stats.update_from_finished_request(
                    finish_reason=FinishReason[request.reason.upper()],
                    request_id=str(index),
                    num_prompt_tokens=request.prompt,
                    max_tokens_param=request.generated,
                    req_stats=states[index],
                )
                running.discard(index)
        logger.record(scheduler_stats=SchedulerStats(), iteration_stats=stats, engine_idx=engine)
        iteration += 1


def expected(requests: Sequence[Request]) -> dict[str, float | int]:
    """The step's keys computed from the requests themselves, independently of any reader."""
    ok = sum(1 for r in requests if r.reason in ("stop", "length"))
    out: dict[str, float | int] = {
        PROMPT_TOKENS_KEY: sum(r.prompt for r in requests),
        GENERATION_TOKENS_KEY: sum(r.generated for r in requests),
        GENERATIONS_OK_KEY: ok,
        GENERATIONS_FAILED_KEY: len(requests) - ok,
    }
    if requests:
        out[PROMPT_LENGTH_MEAN_KEY] = sum(r.prompt for r in requests) / len(requests)
        out[GENERATION_LENGTH_MEAN_KEY] = sum(r.generated for r in requests) / len(requests)
    return out


# The step of the spec: one request of each finish reason vLLM has.
STEP = (
    Request(prompt=12, generated=7, reason="stop"),
    Request(prompt=30, generated=16, reason="length"),
    Request(prompt=5, generated=3, reason="abort"),
    Request(prompt=9, generated=1, reason="error"),
    Request(prompt=20, generated=11, reason="repetition"),
    Request(prompt=8, generated=16, reason="length"),
)


# -- names ---------------------------------------------------------------------------------------


def test_engine_metric_names_match_vllm(new_logger: Callable[..., Any]) -> None:
    """The copied family names, types and labels are the ones vLLM's stat logger registers."""
    new_logger()
    families = {family.name: family for family in VllmFamilies().collect()}
    for name, kind in ENGINE_FAMILIES.items():
        assert name in families, f"vLLM {vllm.__version__} registers no {name}"
        assert families[name].type == kind
        for sample in families[name].samples:
            assert {"engine", "model_name"} <= sample.labels.keys()
            assert sample.labels["model_name"] == MODEL
    reasons = {s.labels["finished_reason"] for s in families[REQUEST_SUCCESS_FAMILY].samples}
    assert reasons == set(FINISH_REASON_STRINGS) == set(FINISH_REASONS)
    assert reasons >= OK_FINISH_REASONS
    assert {str(reason) for reason in FinishReason} == reasons


def test_the_fixture_is_what_this_vllm_exposes(new_logger: Callable[..., Any]) -> None:
    """The checked-in exposition is this vLLM's own, but for the series' creation times."""
    path = FIXTURES / fixture_name(vllm.__version__)
    assert path.exists(), (
        f"no fixture for vLLM {vllm.__version__}: run "
        "`tox exec -e vllm -- python plugins/rlmetrics-vllm/tools/regenerate_fixture.py`"
    )
    assert path == FIXTURE, f"point vllm_support.FIXTURE at {path.name}"
    new_logger()

    def timeless(text: str) -> str:
        return re.sub(r"^(\S+_created(?:\{[^}]*\})?) \S+$", r"\1 T", text, flags=re.MULTILINE)

    assert timeless(vllm_exposition()) == timeless(path.read_text())


def test_the_regeneration_script_writes_the_fixture(tmp_path: Path) -> None:
    import importlib.util

    script = Path(__file__).parent.parent / "tools" / "regenerate_fixture.py"
    spec = importlib.util.spec_from_file_location("regenerate_fixture", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = module.regenerate([tmp_path])
    assert written == [tmp_path / fixture_name(vllm.__version__)]
    names = {line.split()[2] for line in written[0].read_text().splitlines() if "# TYPE" in line}
    assert names == {
        line.split()[2] for line in FIXTURE.read_text().splitlines() if "# TYPE" in line
    }
    assert not [c for c in REGISTRY.collect() if c.name.startswith("vllm:")]  # cleaned up


# -- step deltas from vLLM's own stat logger -----------------------------------------------------


@pytest.fixture(params=["registry", "http"])
def read(
    request: pytest.FixtureRequest, serve_registry: Callable[[CollectorRegistry], str]
) -> Callable[[], Snapshot]:
    """A reading of prometheus_client.REGISTRY, in process or scraped over HTTP on 127.0.0.1."""
    if request.param == "registry":
        return read_registry
    url = serve_registry(REGISTRY)
    return lambda: scrape(url)


def test_a_step_of_every_finish_reason(
    new_logger: Callable[..., Any], read: Callable[[], Snapshot]
) -> None:
    logger = new_logger()
    serve(logger, [Request(4, 2), Request(6, 1, "abort")])  # an earlier step, not counted
    before, totals = read(), engine_totals(REGISTRY.collect())
    serve(logger, STEP)
    result = step_metrics(before, read())
    assert result == expected(STEP)
    assert result == {
        PROMPT_TOKENS_KEY: 84,
        GENERATION_TOKENS_KEY: 54,
        PROMPT_LENGTH_MEAN_KEY: 14.0,
        GENERATION_LENGTH_MEAN_KEY: 9.0,
        GENERATIONS_OK_KEY: 3,
        GENERATIONS_FAILED_KEY: 3,
    }
    # ... and equals what vLLM itself counted, read from its samples directly.
    assert result == engine_step(totals, engine_totals(REGISTRY.collect()))


def test_a_step_where_no_request_finished_omits_the_means(
    new_logger: Callable[..., Any], read: Callable[[], Snapshot]
) -> None:
    logger = new_logger()
    serve(logger, STEP[:2])
    before = read()
    logger.record(scheduler_stats=SchedulerStats(), iteration_stats=IterationStats())
    logger.record(scheduler_stats=SchedulerStats(), iteration_stats=None)
    assert step_metrics(before, read()) == {
        PROMPT_TOKENS_KEY: 0,
        GENERATION_TOKENS_KEY: 0,
        GENERATIONS_OK_KEY: 0,
        GENERATIONS_FAILED_KEY: 0,
    }


def test_engines_of_one_logger_are_summed(
    new_logger: Callable[..., Any], read: Callable[[], Snapshot]
) -> None:
    logger = new_logger((0, 1))
    before = read()
    serve(logger, STEP[:3], engine=0)
    serve(logger, STEP[3:], engine=1)
    assert step_metrics(before, read()) == pytest.approx(expected(STEP))


def test_an_engine_restart_leaves_a_gap_and_counting_resumes(
    new_logger: Callable[..., Any], read: Callable[[], Snapshot]
) -> None:
    logger = new_logger()
    serve(logger, STEP[:1])
    before = read()
    logger = new_logger()  # the engine restarted: vLLM registers its families anew
    serve(logger, STEP)  # and has served more than before, so no total went backwards
    assert engine_totals(REGISTRY.collect())["vllm:prompt_tokens_total"] > STEP[0].prompt
    assert step_metrics(before, read()) == {}
    before = read()
    serve(logger, STEP[1:3])
    assert step_metrics(before, read()) == expected(STEP[1:3])


def test_rl_vllm_series_from_vllms_stat_logger(
    new_logger: Callable[..., Any], telemetry: Any
) -> None:
    """Through Logger.log_metrics to the exported rl.vllm.* points: deltas, ok/failed and
    exact means, then a restart step that leaves the means a gap, then counting resumes."""
    _, reader = telemetry
    log = rlmetrics.Logger(backends={})
    logger = new_logger()
    before = read_registry()
    serve(logger, STEP)
    log.log_metrics({"loss": 0.1, **step_metrics(before, read_registry())}, step=1)
    found = points(reader)
    values = {p.name: p.value for p in found if p.name.startswith("rl.vllm.")}
    assert values == {
        "rl.vllm.prompt_tokens": 84,
        "rl.vllm.generation_tokens": 54,
        "rl.vllm.prompt_length.mean": 14.0,
        "rl.vllm.generation_length.mean": 9.0,
        "rl.vllm.generations.ok": 3,
        "rl.vllm.generations.failed": 3,
    }

    before = read_registry()
    logger = new_logger()  # restart mid-step
    serve(logger, STEP[:2])
    log.log_metrics({"loss": 0.2, **step_metrics(before, read_registry())}, step=2)
    found = points(reader)
    assert not [p for p in found if p.name.endswith(".mean")]
    assert single(found, "rl.vllm.prompt_tokens").value == 84

    before = read_registry()
    serve(logger, STEP[:2])
    log.log_metrics({"loss": 0.3, **step_metrics(before, read_registry())}, step=3)
    found = points(reader)
    assert single(found, "rl.vllm.prompt_tokens").value == 84 + 42
    assert single(found, "rl.vllm.prompt_length.mean").value == 21.0
    assert single(found, "rl.vllm.generations.ok").value == 3 + 2
