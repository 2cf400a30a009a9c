"""The vLLM families against a running vLLM CPU engine serving a tiny random-weight model.

The model is written by the test (a 2-layer Llama saved with ``transformers``, a word-level
tokenizer built with ``tokenizers``; nothing is downloaded). vLLM serves it twice over:

- in process: ``vllm.LLM``'s engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), driven request by
  request through its ``LLMEngine`` so one request can be aborted mid-generation, read with
  :func:`read_registry`;
- as vLLM's OpenAI-compatible server in a child process on 127.0.0.1, read with :func:`scrape`.

Each step's keys are checked against vLLM's own totals read straight from its samples, and
``gen_ai.client.token.usage`` (from the token ids the engine returned) against the engine's
per-request token histograms. Runs in the ``vllm`` tox env; skips where vLLM is not importable.

What vLLM 0.32.0 itself does, as these tests show: a request the driver aborts
(``LLMEngine.abort_request``, or an HTTP client that disconnects) is counted in
``vllm:prompt_tokens`` and ``vllm:generation_tokens`` for the work done, but in no
``vllm:request_success`` reason and in neither request-length histogram; so it is in neither
``rl.vllm.generations.ok`` nor ``.failed``, and it is exactly the gap between the engine's
generated tokens and the ones the driver received.
"""

from __future__ import annotations

import gc
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from rlmetrics_vllm.engine import (
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_KEY,
    read_registry,
    scrape,
    step_metrics,
)
from rlmetrics_vllm.gen_ai import record_generation
from vllm_real import (
    MODEL,
    VOCAB_SIZE,
    engine_step,
    engine_totals,
    remove_vllm_metrics,
    require_vllm,
    write_tiny_model,
)

import rlmetrics
from rlmetrics.testing import points, single

vllm = require_vllm()

from vllm import LLM, SamplingParams  # noqa: E402

# What both engines need here: a small KV cache (vLLM's CPU default is 4 GiB, or most of the
# free memory), no OpenMP thread pinning (the machine is shared), and nothing from the network.
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 2048,
    "max_num_seqs": 8,
    "enforce_eager": True,
    "seed": 0,
    "served_model_name": MODEL,
}
SERVER_START_S = 300.0  # two imports of vLLM (server, engine core) on a loaded 2-core machine
SETTLE_S = 30.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-llama"), max_positions=2048)


# -- the step's requests -------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One request: its prompt token ids and how it should end."""

    prompt: tuple[int, ...]
    max_tokens: int
    ends: str  # "stop", "length" or "abort"

    def body(self) -> dict[str, Any]:
        """The sampling parameters, as SamplingParams keywords and as the server's JSON body.
        ``stop`` makes every token a stop token, so the request stops at its first token
        whatever the random weights sample; the others ignore EOS and run to max_tokens."""
        if self.ends == "stop":
            return {"max_tokens": self.max_tokens, "stop_token_ids": list(range(VOCAB_SIZE))}
        return {"max_tokens": self.max_tokens, "ignore_eos": True}


#: What the request meant to be aborted may generate: far more than the engine makes before
#: the driver (or the HTTP client, after two streamed tokens) aborts it, so it cannot finish
#: first even on a loaded machine (with 100 it sometimes did, and counted as "length").
ABORTED_TOKENS = 2000

# N = 5 requests: one stopped, three run to max_tokens, one aborted mid-generation.
STEP = (
    Ask((1, 5, 6, 7, 8, 9), 8, "stop"),
    Ask((1, 10, 11, 12), 6, "length"),
    Ask((1, *range(20, 40)), 3, "length"),
    Ask((1, 50, 51), 9, "length"),
    Ask((1, 60, 61, 62, 63), ABORTED_TOKENS, "abort"),
)


@dataclass
class Served:
    """What the driver got back: the finished requests' token ids, and how many tokens it had
    seen of the aborted one before aborting it."""

    prompts: list[list[int]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    aborted_tokens: int = 0
    duration_s: float = 0.0


def check_step(result: dict[str, float | int], engine: dict[str, float], served: Served) -> None:
    """The step's keys equal vLLM's own counters, and what those counters say about the
    requests served: every prompt prefilled, every token generated (the aborted request's
    included), the finished ones by reason, the aborted one in neither ok nor failed."""
    assert result == engine
    finished = [ask for ask in STEP if ask.ends != "abort"]
    assert served.reasons == [ask.ends for ask in finished]
    assert [len(p) for p in served.prompts] == [len(ask.prompt) for ask in finished]
    assert result[PROMPT_TOKENS_KEY] == sum(len(ask.prompt) for ask in STEP)
    assert served.aborted_tokens > 0
    assert result[GENERATION_TOKENS_KEY] >= sum(map(len, served.outputs)) + served.aborted_tokens
    assert (result[GENERATIONS_OK_KEY], result[GENERATIONS_FAILED_KEY]) == (len(finished), 0)
    assert result[PROMPT_LENGTH_MEAN_KEY] == sum(map(len, served.prompts)) / len(finished)
    assert result[GENERATION_LENGTH_MEAN_KEY] == sum(map(len, served.outputs)) / len(finished)


def check_gen_ai(
    reader: Any, served: Served, engine_before: dict[str, float], engine_after: dict[str, float]
) -> None:
    """gen_ai.client.token.usage from the returned token ids matches the engine's per-request
    token histograms for the same (finished) requests."""
    record_generation(
        [len(p) for p in served.prompts],
        [len(o) for o in served.outputs],
        served.duration_s,
        model=MODEL,
    )
    found = points(reader)
    usage = {
        side: single(found, "gen_ai.client.token.usage", **{"gen_ai.token.type": side})
        for side in ("input", "output")
    }

    def delta(sample: str) -> float:
        return engine_after[sample] - engine_before[sample]

    assert usage["input"].sum == delta("vllm:request_prompt_tokens_sum")
    assert usage["input"].count == delta("vllm:request_prompt_tokens_count")
    assert usage["output"].sum == delta("vllm:request_generation_tokens_sum")
    assert usage["output"].count == delta("vllm:request_generation_tokens_count")
    # The engine generated more than the driver received: the aborted request's tokens.
    assert delta("vllm:generation_tokens_total") - usage["output"].sum >= served.aborted_tokens
    batch = single(found, "rl.vllm.batch.duration")
    assert (batch.count, batch.attributes["gen_ai.request.model"]) == (1, MODEL)


def exported(reader: Any) -> dict[str, float]:
    """The exported rl.vllm.* step series (the batch-duration histogram aside)."""
    return {
        p.name: p.value
        for p in points(reader)
        if p.name.startswith("rl.vllm.") and p.name != "rl.vllm.batch.duration"
    }


def as_series(result: dict[str, float | int]) -> dict[str, float]:
    names = {
        PROMPT_TOKENS_KEY: "rl.vllm.prompt_tokens",
        GENERATION_TOKENS_KEY: "rl.vllm.generation_tokens",
        PROMPT_LENGTH_MEAN_KEY: "rl.vllm.prompt_length.mean",
        GENERATION_LENGTH_MEAN_KEY: "rl.vllm.generation_length.mean",
        GENERATIONS_OK_KEY: "rl.vllm.generations.ok",
        GENERATIONS_FAILED_KEY: "rl.vllm.generations.failed",
    }
    return {names[key]: value for key, value in result.items()}


# -- in process ------------------------------------------------------------------------------------


class InProcessEngine:
    """``vllm.LLM`` with its engine core in this process, stopped and cleaned up by
    :meth:`stop` (vLLM's own ``cleanup_dist_env_and_memory``), so a new one can start."""

    def __init__(self, model_dir: Path) -> None:
        self.llm: Any = LLM(model=str(model_dir), disable_log_stats=False, **ENGINE_ARGS)

    def serve(self, asks: Sequence[Ask] = STEP, abort_after_steps: int = 3) -> Served:
        engine = self.llm.llm_engine
        started = time.perf_counter()
        for index, ask in enumerate(asks):
            engine.add_request(
                str(index), {"prompt_token_ids": list(ask.prompt)}, SamplingParams(**ask.body())
            )
        latest: dict[str, Any] = {}
        aborted = {str(i) for i, ask in enumerate(asks) if ask.ends == "abort"}
        for step in range(1, 1000):  # bounded: 100 tokens at most per request
            if not engine.has_unfinished_requests():
                break
            for output in engine.step():
                latest[output.request_id] = output
            if step == abort_after_steps:
                engine.abort_request(sorted(aborted))
        served = Served(duration_s=time.perf_counter() - started)
        for index in range(len(asks)):
            output = latest[str(index)]
            if str(index) in aborted:
                served.aborted_tokens = len(output.outputs[0].token_ids)
                assert not output.finished
                continue
            assert output.finished
            served.prompts.append(list(output.prompt_token_ids))
            served.outputs.append(list(output.outputs[0].token_ids))
            served.reasons.append(output.outputs[0].finish_reason)
        return served

    def stop(self) -> None:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
        cleanup_dist_env_and_memory()


@pytest.fixture
def in_process(model_dir: Path) -> Iterator[list[InProcessEngine]]:
    """Starts the in-process engine; a list, so a test can restart it. Stopped at the end."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in {**ENGINE_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}.items():
            env.setenv(key, value)
        engines = [InProcessEngine(model_dir)]
        try:
            yield engines
        finally:
            engines[-1].stop()
            remove_vllm_metrics()  # a stopped engine leaves its families registered


def registry_totals() -> dict[str, float]:
    return engine_totals(REGISTRY.collect())


def test_in_process_engine_steps(in_process: list[InProcessEngine], telemetry: Any) -> None:
    _, reader = telemetry
    log = rlmetrics.Logger(backends={})
    engine = in_process[0]
    engine.serve(STEP[:2])  # an earlier step, not counted

    before, totals = read_registry(), registry_totals()
    served = engine.serve()
    result = step_metrics(before, read_registry())
    check_step(result, engine_step(totals, registry_totals()), served)
    # In process the abort is synchronous: every token generated reached the driver or was
    # seen in the aborted request's last output.
    assert result[GENERATION_TOKENS_KEY] == sum(map(len, served.outputs)) + served.aborted_tokens
    check_gen_ai(reader, served, totals, registry_totals())
    log.log_metrics({"loss": 0.5, **result}, step=1)
    assert exported(reader) == as_series(result)

    # A step with no request: counts of 0, and the means leave a gap.
    before = read_registry()
    idle = step_metrics(before, read_registry())
    assert idle == {
        k: 0
        for k in (
            PROMPT_TOKENS_KEY,
            GENERATION_TOKENS_KEY,
            GENERATIONS_OK_KEY,
            GENERATIONS_FAILED_KEY,
        )
    }
    log.log_metrics({"loss": 0.4, **idle}, step=2)
    assert exported(reader) == {
        k: v for k, v in as_series(result).items() if not k.endswith(".mean")
    }


def _registry_values() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the process registry, read here independently of the engine reader."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
    }


def _summed(values: dict[Any, float], name: str) -> float:
    return sum(v for (sample, _labels), v in values.items() if sample == name)


def test_in_process_engine_signals(in_process: list[InProcessEngine], telemetry: Any) -> None:
    """The engine's state and cache over a step, against the registry vLLM itself fills (the
    same prompts served twice, so the prefix cache is queried again)."""
    from rlmetrics_vllm.engine import engine_signals

    _, reader = telemetry
    engine = in_process[0]
    engine.serve(STEP[:2])
    before, old = read_registry(), _registry_values()
    engine.serve(STEP[:2])
    after, new = read_registry(), _registry_values()
    signals = engine_signals(before, after)

    def delta(name: str) -> float:
        return _summed(new, name) - _summed(old, name)

    queries = delta("vllm:prefix_cache_queries_total")
    assert queries > 0, "vLLM reported no prefix-cache query for a served step"
    assert signals["vllm/prefix_cache_hit_rate"] == delta("vllm:prefix_cache_hits_total") / queries
    # (Whether the repeat hits depends on the engine's cache settings and block size: on this
    # CPU engine and these short prompts it does not; the figure is vLLM's own either way.)
    assert signals["vllm/cached_prompt_tokens"] == delta("vllm:prompt_tokens_cached_total")
    assert signals["vllm/preemptions"] == delta("vllm:num_preemptions_total")
    assert signals["vllm/kv_cache_usage"] == _summed(new, "vllm:kv_cache_usage_perc")
    assert signals["vllm/awake_share"] == 1.0  # the engine never slept
    waiting = {k: v for k, v in signals.items() if k.startswith("vllm/requests_waiting/")}
    assert set(waiting) == {"vllm/requests_waiting/capacity", "vllm/requests_waiting/deferred"}
    assert not any(waiting.values())  # every request was served by the second reading
    rlmetrics.Logger(backends={}).log_metrics({"loss": 0.5, **signals}, step=1)
    found = points(reader)
    assert (
        single(found, "rl.vllm.prefix_cache.hit_rate").value
        == signals["vllm/prefix_cache_hit_rate"]
    )
    assert single(found, "rl.vllm.engine.awake").value == 1.0


def test_in_process_engine_restart_leaves_a_gap_and_counting_resumes(
    in_process: list[InProcessEngine], model_dir: Path, telemetry: Any
) -> None:
    _, reader = telemetry
    log = rlmetrics.Logger(backends={})
    before = read_registry()
    in_process[0].serve()
    first = step_metrics(before, read_registry())
    log.log_metrics(first, step=1)

    # Stop the engine and start a new one between the readings; it serves the same requests,
    # so its totals come back to where the old ones were: only the restart itself tells.
    before = read_registry()
    in_process[-1].stop()
    in_process.append(InProcessEngine(model_dir))
    in_process[-1].serve()
    assert registry_totals()["vllm:prompt_tokens_total"] == sum(len(a.prompt) for a in STEP)
    restart = step_metrics(before, read_registry())
    assert restart == {}
    log.log_metrics({"loss": 0.3, **restart}, step=2)
    assert exported(reader) == {
        k: v for k, v in as_series(first).items() if not k.endswith(".mean")
    }

    # Counting resumes from the new engine's totals.
    before, totals = read_registry(), registry_totals()
    served = in_process[-1].serve()
    resumed = step_metrics(before, read_registry())
    check_step(resumed, engine_step(totals, registry_totals()), served)
    log.log_metrics(resumed, step=3)
    found = exported(reader)
    assert found["rl.vllm.prompt_tokens"] == first[PROMPT_TOKENS_KEY] + resumed[PROMPT_TOKENS_KEY]
    assert found["rl.vllm.prompt_length.mean"] == resumed[PROMPT_LENGTH_MEAN_KEY]


# -- vLLM's OpenAI-compatible server on 127.0.0.1 ------------------------------------------------


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` in its own session (the API server and
    its engine-core process), on 127.0.0.1; :meth:`stop` ends that process group."""

    def __init__(self, model_dir: Path, log: Path, port: int | None = None) -> None:
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        self.port, self.log = port, log
        self.base = f"http://127.0.0.1:{port}"
        args = [f"--{k.replace('_', '-')}={v}" for k, v in ENGINE_ARGS.items() if v is not True]
        args += [f"--{k.replace('_', '-')}" for k, v in ENGINE_ARGS.items() if v is True]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    f"--model={model_dir}",
                    "--host=127.0.0.1",
                    f"--port={port}",
                    *args,
                ],
                env={**os.environ, **ENGINE_ENV},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started_s = self._wait_healthy()

    def _wait_healthy(self) -> float:
        started = time.monotonic()
        while time.monotonic() - started < SERVER_START_S:
            if self.process.poll() is not None:
                self.stop()
                pytest.fail(f"vLLM's server exited ({self.process.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as response:
                    if response.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        pytest.fail(f"vLLM's server was not healthy within {SERVER_START_S} s:\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def complete(self, ask: Ask) -> dict[str, Any]:
        body = {"model": MODEL, "prompt": list(ask.prompt), "return_token_ids": True, **ask.body()}
        request = urllib.request.Request(
            f"{self.base}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def abort_streaming(self, ask: Ask, tokens: int = 2) -> int:
        """Stream ``ask``, read ``tokens`` tokens, then hang up: the server aborts it."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        body = {"model": MODEL, "prompt": list(ask.prompt), "stream": True, **ask.body()}
        connection.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        seen = 0
        while seen < tokens:
            line = response.fp.readline()
            assert line, "the stream ended before the test hung up"
            if line.startswith(b"data: {"):
                seen += 1
        connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
        return seen

    def serve(self, asks: Sequence[Ask] = STEP) -> Served:
        served = Served()
        started = time.perf_counter()
        for ask in asks:
            if ask.ends == "abort":
                served.aborted_tokens = self.abort_streaming(ask)
                continue
            choice = self.complete(ask)["choices"][0]
            served.prompts.append(choice["prompt_token_ids"])
            served.outputs.append(choice["token_ids"])
            served.reasons.append(choice["finish_reason"])
        served.duration_s = time.perf_counter() - started
        return served

    def totals(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=10) as response:
            return engine_totals(text_string_to_metric_families(response.read().decode()))

    def settled(self, finished: float) -> dict[str, float]:
        """Wait (bounded) until the engine has counted ``finished`` finished requests and
        nothing runs; the API server records an iteration's stats after answering it."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            text = urllib.request.urlopen(f"{self.base}/metrics", timeout=10).read().decode()
            families = list(text_string_to_metric_families(text))
            totals = engine_totals(families)
            busy = sum(
                s.value
                for f in families
                for s in f.samples
                if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting")
            )
            done = sum(v for k, v in totals.items() if k.startswith("reason:"))
            if (done >= finished and busy == 0) or time.monotonic() > deadline:
                return totals
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 60 s; waits for every member."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        deadline = time.monotonic() + 30
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(self.process.pid):
            os.killpg(self.process.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    """vLLM's OpenAI-compatible server; a list, so a test can restart it on the same port."""
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    servers = [Server(model_dir, log)]
    try:
        yield servers
    finally:
        servers[-1].stop()
        assert not _group_alive(servers[-1].process.pid)


def test_openai_server_steps_over_http(server: list[Server], telemetry: Any) -> None:
    _, reader = telemetry
    log = rlmetrics.Logger(backends={})
    live = server[-1]
    url = f"{live.base}/metrics"
    finished = sum(v for k, v in live.settled(0).items() if k.startswith("reason:"))

    before, totals = scrape(url), live.settled(finished)
    served = live.serve()
    after_totals = live.settled(finished + 4)
    result = step_metrics(before, scrape(url))
    check_step(result, engine_step(totals, after_totals), served)
    check_gen_ai(reader, served, totals, after_totals)
    log.log_metrics({"loss": 0.5, **result}, step=1)
    assert exported(reader) == as_series(result)

    before = scrape(url)
    idle = step_metrics(before, scrape(url))
    assert set(idle) == {
        PROMPT_TOKENS_KEY,
        GENERATION_TOKENS_KEY,
        GENERATIONS_OK_KEY,
        GENERATIONS_FAILED_KEY,
    }
    assert not any(idle.values())
    log.log_metrics(idle, step=2)
    assert exported(reader) == {
        k: v for k, v in as_series(result).items() if not k.endswith(".mean")
    }


def test_openai_server_restart_leaves_a_gap_and_counting_resumes(
    server: list[Server], model_dir: Path, telemetry: Any
) -> None:
    _, reader = telemetry
    log = rlmetrics.Logger(backends={})
    live = server[-1]
    url = f"{live.base}/metrics"
    before = scrape(url)
    live.stop()
    server.append(Server(model_dir, live.log, port=live.port))  # same URL, new engine
    live = server[-1]
    live.serve(STEP[:2])
    live.settled(2)
    restart = step_metrics(before, scrape(url))
    assert restart == {}
    log.log_metrics({"loss": 0.2, **restart}, step=1)
    assert exported(reader) == {}

    before, totals = scrape(url), live.settled(2)
    served = live.serve()
    after_totals = live.settled(2 + 4)
    resumed = step_metrics(before, scrape(url))
    check_step(resumed, engine_step(totals, after_totals), served)
    log.log_metrics(resumed, step=2)
    assert exported(reader) == as_series(resumed)


def test_the_server_and_its_engine_core_are_one_process_group(server: list[Server]) -> None:
    """What the fixture's stop() ends: the API server and the engine-core process it spawned
    share the server's process group, so no engine outlives the tests."""
    group = server[-1].process.pid
    members = [pid for pid in _processes() if os.getpgid(pid) == group]
    assert group in members
    assert len(members) >= 2, "expected the API server and its engine-core process"


def _processes() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                os.getpgid(int(entry.name))
            except ProcessLookupError:
                continue
            pids.append(int(entry.name))
    return pids
