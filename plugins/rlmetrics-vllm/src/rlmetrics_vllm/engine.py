"""Per-step vLLM engine metrics from two readings of vLLM's own Prometheus counters.

vLLM already counts tokens, request lengths and finish reasons in its Prometheus registry. The
counters are cumulative since the engine started, so one step's work is the difference between
a reading taken before generation and one taken after. A reading comes from the engine's
in-process ``prometheus_client`` registry (:func:`read_registry`) or from an HTTP scrape of a
running server's ``/metrics`` (:func:`scrape`); both go through ``prometheus_client``'s own
family model, so they give the same :class:`Snapshot` for the same engine state.

:func:`step_metrics` turns a pair of snapshots into the logger keys the training loop merges
into its train dict; the ``vllm`` family (:mod:`rlmetrics_vllm.family`) tees those keys into
the ``rl.vllm.*`` series. Readers and :func:`step_metrics` never raise: a failed reading is an
empty snapshot, and everything that cannot be known for the step is left out, never guessed.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from rlmetrics import resets_process_state, warn_once
from rlmetrics.values import finite_float

__all__ = [
    "AWAKE_SHARE_KEY",
    "CACHED_PROMPT_TOKENS_KEY",
    "ENGINE_FAMILIES",
    "KV_CACHE_USAGE_KEY",
    "MFU_KEY",
    "PREEMPTIONS_KEY",
    "PREFIX_CACHE_HIT_RATE_KEY",
    "REQUESTS_WAITING_PREFIX",
    "SIGNAL_FAMILIES",
    "SIGNAL_KEYS",
    "canonical_name",
    "engine_signals",
    "FINISHED_REASON_LABEL",
    "GENERATIONS_FAILED_KEY",
    "GENERATIONS_OK_KEY",
    "GENERATION_LENGTH_FAMILY",
    "GENERATION_LENGTH_MEAN_KEY",
    "GENERATION_TOKENS_FAMILY",
    "GENERATION_TOKENS_KEY",
    "OK_FINISH_REASONS",
    "PROMPT_LENGTH_FAMILY",
    "PROMPT_LENGTH_MEAN_KEY",
    "PROMPT_TOKENS_FAMILY",
    "PROMPT_TOKENS_KEY",
    "REQUEST_SUCCESS_FAMILY",
    "STEP_KEYS",
    "Snapshot",
    "merge_snapshots",
    "read_families",
    "read_registry",
    "read_text",
    "scrape",
    "step_metrics",
]

# -- vLLM's names ------------------------------------------------------------------------------
# Family names as prometheus_client reports them, from an in-process registry and from its
# text parser alike: a counter's family name has no ``_total``, its sample names do.

PROMPT_TOKENS_FAMILY = "vllm:prompt_tokens"
GENERATION_TOKENS_FAMILY = "vllm:generation_tokens"
REQUEST_SUCCESS_FAMILY = "vllm:request_success"
PROMPT_LENGTH_FAMILY = "vllm:request_prompt_tokens"
GENERATION_LENGTH_FAMILY = "vllm:request_generation_tokens"

#: Every family read, with its Prometheus type.
ENGINE_FAMILIES: Mapping[str, str] = {
    PROMPT_TOKENS_FAMILY: "counter",
    GENERATION_TOKENS_FAMILY: "counter",
    REQUEST_SUCCESS_FAMILY: "counter",
    PROMPT_LENGTH_FAMILY: "histogram",
    GENERATION_LENGTH_FAMILY: "histogram",
}

# The engine's state and cache (vLLM 0.32.0's registry, checked as the families above are).
PREFIX_CACHE_QUERIES_FAMILY = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS_FAMILY = "vllm:prefix_cache_hits"
PREEMPTIONS_FAMILY = "vllm:num_preemptions"
CACHED_PROMPT_TOKENS_FAMILY = "vllm:prompt_tokens_cached"
FLOPS_FAMILY = "vllm:estimated_flops_per_gpu"
KV_CACHE_USAGE_FAMILY = "vllm:kv_cache_usage_perc"
WAITING_BY_REASON_FAMILY = "vllm:num_requests_waiting_by_reason"
SLEEP_STATE_FAMILY = "vllm:engine_sleep_state"

#: The families behind the engine-state keys, with their Prometheus type.
SIGNAL_FAMILIES: Mapping[str, str] = {
    PREFIX_CACHE_QUERIES_FAMILY: "counter",
    PREFIX_CACHE_HITS_FAMILY: "counter",
    PREEMPTIONS_FAMILY: "counter",
    CACHED_PROMPT_TOKENS_FAMILY: "counter",
    FLOPS_FAMILY: "counter",
    KV_CACHE_USAGE_FAMILY: "gauge",
    WAITING_BY_REASON_FAMILY: "gauge",
    SLEEP_STATE_FAMILY: "gauge",
}
_REASON_LABEL = "reason"
_SLEEP_LABEL = "sleep_state"
_AWAKE = "awake"

FINISHED_REASON_LABEL = "finished_reason"
#: The finish reasons that leave a usable sample. ``length`` is a normal RL outcome (a rollout
#: runs to max_tokens); everything else, including reasons a future vLLM adds, is failed.
OK_FINISH_REASONS: frozenset[str] = frozenset({"stop", "length"})

# -- logger keys (what step_metrics returns; the vllm family tees exactly these) --------------

PROMPT_TOKENS_KEY = "vllm/prompt_tokens"
GENERATION_TOKENS_KEY = "vllm/generation_tokens"
PROMPT_LENGTH_MEAN_KEY = "vllm/prompt_length_mean"
GENERATION_LENGTH_MEAN_KEY = "vllm/generation_length_mean"
GENERATIONS_OK_KEY = "vllm/generations_ok"
GENERATIONS_FAILED_KEY = "vllm/generations_failed"

# The engine's state and cache over the step.
PREFIX_CACHE_HIT_RATE_KEY = "vllm/prefix_cache_hit_rate"
KV_CACHE_USAGE_KEY = "vllm/kv_cache_usage"
PREEMPTIONS_KEY = "vllm/preemptions"
CACHED_PROMPT_TOKENS_KEY = "vllm/cached_prompt_tokens"
AWAKE_SHARE_KEY = "vllm/awake_share"
MFU_KEY = "vllm/mfu"
#: ``vllm/requests_waiting/<reason>``: requests waiting at the step's end, by vLLM's reason.
REQUESTS_WAITING_PREFIX = "vllm/requests_waiting/"
#: The engine-state keys :func:`engine_signals` returns (besides the waiting reasons).
SIGNAL_KEYS: tuple[str, ...] = (
    PREFIX_CACHE_HIT_RATE_KEY,
    KV_CACHE_USAGE_KEY,
    PREEMPTIONS_KEY,
    CACHED_PROMPT_TOKENS_KEY,
    AWAKE_SHARE_KEY,
    MFU_KEY,
)

STEP_KEYS: tuple[str, ...] = (
    PROMPT_TOKENS_KEY,
    GENERATION_TOKENS_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATIONS_OK_KEY,
    GENERATIONS_FAILED_KEY,
)

#: The keys each family read gives, for saying what a vLLM without the family costs.
_FEEDS: Mapping[str, tuple[str, ...]] = {
    PROMPT_TOKENS_FAMILY: (PROMPT_TOKENS_KEY,),
    GENERATION_TOKENS_FAMILY: (GENERATION_TOKENS_KEY,),
    REQUEST_SUCCESS_FAMILY: (GENERATIONS_OK_KEY, GENERATIONS_FAILED_KEY),
    PROMPT_LENGTH_FAMILY: (PROMPT_LENGTH_MEAN_KEY,),
    GENERATION_LENGTH_FAMILY: (GENERATION_LENGTH_MEAN_KEY,),
    PREFIX_CACHE_QUERIES_FAMILY: (PREFIX_CACHE_HIT_RATE_KEY,),
    PREFIX_CACHE_HITS_FAMILY: (PREFIX_CACHE_HIT_RATE_KEY,),
    PREEMPTIONS_FAMILY: (PREEMPTIONS_KEY,),
    CACHED_PROMPT_TOKENS_FAMILY: (CACHED_PROMPT_TOKENS_KEY,),
    FLOPS_FAMILY: (MFU_KEY,),
    KV_CACHE_USAGE_FAMILY: (KV_CACHE_USAGE_KEY,),
    WAITING_BY_REASON_FAMILY: (REQUESTS_WAITING_PREFIX + "*",),
    SLEEP_STATE_FAMILY: (AWAKE_SHARE_KEY,),
}

# The samples kept from each family: cumulative totals (buckets would give approximate means;
# the exact ones come from _sum/_count) and each series' ``_created`` timestamp, which changes
# when an engine restarts even if its new totals have already passed the old ones. An
# in-process registry reports ``_created`` inside the family; the text parser reads it as a
# family of its own, so both names are kept.
_READ = {**ENGINE_FAMILIES, **SIGNAL_FAMILIES}
_WANTED: Mapping[str, frozenset[str]] = {
    **{
        name: (
            frozenset({f"{name}_total", f"{name}_created"})
            if kind == "counter"
            else frozenset({name})
            if kind == "gauge"
            else frozenset({f"{name}_sum", f"{name}_count", f"{name}_created"})
        )
        for name, kind in _READ.items()
    },
    **{
        f"{name}_created": frozenset({f"{name}_created"})
        for name, kind in _READ.items()
        if kind != "gauge"
    },
}

_SCRAPE_HEADERS = {
    # Ask for the classic text format: it is what vLLM serves by default and what
    # prometheus_client's text parser reads.
    "Accept": "text/plain;version=0.0.4",
}

Labels = tuple[tuple[str, str], ...]
SampleKey = tuple[str, Labels]
# A series' identity across readings: (part index, sample name, labels). The part index keeps
# two data-parallel leaders that both call their engine "0" apart.
_SourceKey = tuple[int, str, Labels]


@dataclass(frozen=True)
class Snapshot:
    """Cumulative totals of vLLM's engine families at one instant.

    ``parts`` holds one reading per source (an engine process or an HTTP server): a mapping of
    ``(sample name, sorted labels)`` to the cumulative value, or for ``_created`` samples to the
    series' creation time. Merged snapshots (several data-parallel leaders) hold several parts,
    in the order they were merged. A snapshot is plain data, so it pickles across process
    boundaries (Ray actors, RPC).
    """

    parts: tuple[dict[SampleKey, float], ...] = field(default_factory=lambda: ({},))
    #: Unix time of the reading (of the first source, for a merged snapshot); None when unknown.
    taken_at: float | None = field(default=None, compare=False)

    def sources(self) -> dict[_SourceKey, float]:
        """Every sample with its part index, the identity :func:`step_metrics` matches on."""
        return {
            (index, name, labels): value
            for index, part in enumerate(self.parts)
            for (name, labels), value in part.items()
        }


# -- readers -----------------------------------------------------------------------------------


#: The names vLLM renamed its cache families from (vLLM 0.10, PR 18354: the same values, the
#: ``gpu_`` dropped as they are not GPU-specific), each sample name to the current one. vLLM
#: 0.10 and 0.11 serve both; earlier ones only these.
_RENAMED_SAMPLES: Mapping[str, str] = {
    f"{older}{suffix}": f"{current}{suffix}"
    for older, current in (
        ("vllm:gpu_cache_usage_perc", KV_CACHE_USAGE_FAMILY),
        ("vllm:gpu_prefix_cache_queries", PREFIX_CACHE_QUERIES_FAMILY),
        ("vllm:gpu_prefix_cache_hits", PREFIX_CACHE_HITS_FAMILY),
    )
    for suffix in ("", "_total", "_created")
}


def _vllm_name(name: str) -> str:
    """``name`` with an OpenTelemetry-style ``vllm.`` / ``vllm_`` prefix read as ``vllm:``."""
    if name.startswith(("vllm.", "vllm_")):
        return "vllm:" + name[5:].replace(".", "_")
    return name


def canonical_name(name: str) -> str:
    """vLLM's current Prometheus name for ``name``: an engine that pushes OpenTelemetry-style
    names (``vllm.prompt_tokens``, exposed through an OTel pipeline as
    ``vllm_prompt_tokens_total``) is read as ``vllm:prompt_tokens``, and a name vLLM renamed
    (``vllm:gpu_cache_usage_perc``, before vLLM 0.10) as the one it has now."""
    name = _vllm_name(name)
    return _RENAMED_SAMPLES.get(name, name)


def read_families(families: Iterable[Metric]) -> Snapshot:
    """A snapshot from ``prometheus_client`` metric families (``Metric`` objects).

    Keeps the ``_total`` samples of the counter families, the ``_sum``/``_count`` samples of
    the histogram families and their ``_created`` samples; label sets stay apart, so engines
    are summed only when a step's deltas are taken (that is what lets a restart of one engine
    be detected). Never raises: families that cannot be read (a collector that raised while
    they were collected, objects that are no families) give an empty snapshot, said once.
    """
    try:
        return _read_families(families)
    except Exception:
        warn_once(
            "vllm:read_families",
            "rlmetrics-vllm: reading the given metric families failed (read_families takes "
            "prometheus_client Metric objects, such as registry.collect() yields); this "
            "reading is empty, so the step's rl.vllm.* series are omitted",
        )
        return Snapshot()


def _read_families(families: Iterable[Metric]) -> Snapshot:
    part: dict[SampleKey, float] = {}
    for family in families:
        if canonical_name(family.name) in _WANTED:
            _keep(part, family.samples)
    return Snapshot((part,), time.time())


def read_registry(registry: Collector | None = None) -> Snapshot:
    """A snapshot of an in-process registry (default: ``prometheus_client.REGISTRY``, where
    vLLM's ``PrometheusStatLogger`` registers). Never raises: a failure gives an empty snapshot.
    """
    try:
        snapshot = _read_families((REGISTRY if registry is None else registry).collect())
    except Exception:
        warn_once(
            "vllm:read_registry",
            "rlmetrics-vllm: reading the prometheus_client registry "
            "failed; this reading is empty, so the step's rl.vllm.* series are omitted",
        )
        return Snapshot()
    if not any(snapshot.parts):
        # The usual cause in process: vllm.LLM defaults to disable_log_stats=True, and vLLM
        # registers its metrics only when it logs stats.
        warn_once(
            "vllm:read_registry-empty",
            "rlmetrics-vllm: the prometheus_client registry holds no vLLM series (vllm:*), so "
            "the step's rl.vllm.* series are omitted. In process, vLLM registers them only "
            "when it logs stats: pass disable_log_stats=False to vllm.LLM (and read after the "
            "engine is built)",
            expected=True,
        )
    return snapshot


#: Every sample name read, whichever family (or none) a text exposition files it under.
_WANTED_SAMPLES: frozenset[str] = frozenset().union(*_WANTED.values())


def _sample_name(line: str) -> str:
    """The sample name a text exposition line starts with (empty for a line without one)."""
    head = line.split("{", 1)[0].split(None, 1)
    return head[0] if head else ""


def read_text(text: str | bytes) -> Snapshot:
    """A snapshot of a Prometheus text exposition (what a vLLM server's ``/metrics`` serves),
    as text or as the body's bytes (read as UTF-8).

    Each sample line of a family read is parsed on its own by ``prometheus_client``'s text
    parser, and the other lines (comments, families not read) are not parsed at all: a line
    that does not parse costs that line only, reported once with the count. (Its series then
    differs between the step's two readings, so :func:`step_metrics` omits that family's
    value for the step and keeps the others.) Never raises."""
    part: dict[SampleKey, float] = {}
    malformed = 0
    if isinstance(text, (bytes, bytearray, memoryview)):
        # The HTTP body as fetched (response.content): a byte that is no UTF-8 costs its line.
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        warn_once(
            "vllm:read_text-type",
            "rlmetrics-vllm: read_text takes the exposition as a str (or the bytes of the "
            f"body), got a {type(text).__name__}; this reading is empty, so the step's "
            "rl.vllm.* series are omitted",
        )
        return Snapshot()
    for line in text.splitlines():
        if line.startswith("#") or canonical_name(_sample_name(line)) not in _WANTED_SAMPLES:
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n"))
        except Exception:
            malformed += 1
            continue
        for family in families:
            _keep(part, family.samples)
    if malformed:
        warn_once(
            "vllm:read_text",
            f"rlmetrics-vllm: {malformed} malformed line(s) of the vLLM metrics text skipped; "
            "a metric family they held is omitted for the step, the others are read. Later "
            "readings with malformed lines are reported at DEBUG",
        )
    return Snapshot((part,), time.time())


def _keep(part: dict[SampleKey, float], samples: Iterable[Any]) -> None:
    """Add the wanted, finite samples to ``part``."""
    for sample in samples:
        name = canonical_name(sample.name)
        if name not in _WANTED_SAMPLES:
            continue
        labels = tuple(sorted(sample.labels.items()))
        if (name, labels) in part and name != _vllm_name(sample.name):
            continue  # a renamed series served beside its current name: the current one counts
        value = finite_float(sample.value)
        if value is None:
            warn_once(
                "vllm:non-finite",
                f"rlmetrics-vllm: {name}{dict(sample.labels)} is not a finite number "
                f"({str(sample.value)[:40]}); that series is left out of the reading, so its "
                "family is omitted for the step. Later ones are reported at DEBUG",
            )
            continue
        part[(name, labels)] = value


#: How long a scrape may take when the caller gives no usable bound.
_SCRAPE_TIMEOUT_S = 5.0


def scrape(url: str, *, timeout_s: float = _SCRAPE_TIMEOUT_S) -> Snapshot:
    """A snapshot scraped over HTTP from a running vLLM server (``http://host:port/metrics``),
    the whole request (connection, answer and body) bounded by ``timeout_s``. Never raises:
    an unreachable, slow or wrong server gives an empty snapshot. A ``timeout_s`` that is no
    positive number of seconds (None would wait for as long as the server takes) is said once
    and the default bounds the scrape."""
    if not (
        isinstance(timeout_s, (int, float))
        and not isinstance(timeout_s, bool)
        and math.isfinite(timeout_s)
        and timeout_s > 0
    ):
        warn_once(
            "vllm:scrape-timeout",
            f"rlmetrics-vllm: scrape(timeout_s=...) timeout_s must be a positive number of "
            f"seconds, got {timeout_s!r:.40}; the scrape is bounded by {_SCRAPE_TIMEOUT_S:g} s "
            "instead",
        )
        timeout_s = _SCRAPE_TIMEOUT_S
    try:
        text = _fetch_within(url, timeout_s)
    except Exception as exc:
        # An unreachable or wrong address is a condition to fix, said in one line.
        warn_once(
            f"vllm:scrape:{url}",
            f"rlmetrics-vllm: scraping {url} failed ({_scrape_failure(exc)}); this reading is "
            f"empty, so the step's rl.vllm.* series are omitted. {_scrape_advice(exc, url)}",
            expected=True,
        )
        return Snapshot()
    snapshot = read_text(text)
    if not any(snapshot.parts):
        warn_once(
            f"vllm:scrape-foreign:{url}",
            f"rlmetrics-vllm: {url} answered, but its answer holds no vLLM series (vllm:*): "
            "is it a vLLM server's /metrics? The step's rl.vllm.* series are omitted",
            expected=True,
        )
    return snapshot


# The URLs whose scrape overran its timeout and is still running on its thread: not scraped
# again until it ends, so a server that never finishes costs one thread, not one per step.
# (Scrapes that merely run at the same time are not held back.)
_overrunning: set[str] = set()
_overrunning_lock = threading.Lock()


@resets_process_state
def _forget_overrunning() -> None:
    with _overrunning_lock:
        _overrunning.clear()


def _fetch(url: str, timeout_s: float) -> str:
    request = urllib.request.Request(url, headers=_SCRAPE_HEADERS)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        charset = response.headers.get_content_charset() or "utf-8"
        return str(response.read().decode(charset))


def _fetch_within(url: str, timeout_s: float) -> str:
    """``url``'s answer, or TimeoutError once ``timeout_s`` passed. urllib's timeout bounds
    each socket read, not the request: a server that sends a little now and then would hold
    the training loop for as long as it goes on, so the request runs on a thread of its own
    and is waited for ``timeout_s`` (it ends on its own, each read still bounded)."""
    with _overrunning_lock:
        if url in _overrunning:
            raise TimeoutError("an earlier scrape of it overran its timeout and still runs")
    outcome: list[Any] = []

    def run() -> None:
        try:
            result: Any = _fetch(url, timeout_s)
        except BaseException as exc:
            result = exc
        with _overrunning_lock:  # one step with the check below: the mark never outlives it
            outcome.append(result)
            _overrunning.discard(url)

    thread = threading.Thread(target=run, name="rlmetrics-vllm-scrape", daemon=True)
    thread.start()
    thread.join(timeout_s)
    with _overrunning_lock:
        if not outcome:
            _overrunning.add(url)  # until run() ends
            raise TimeoutError(f"no whole answer within {timeout_s:g} s")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return str(outcome[0])


def _scrape_failure(error: BaseException) -> str:
    """What a failed scrape met: the HTTP status and reason, else the connection's error."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP Error {error.code}: {error.reason}"
    reason = getattr(error, "reason", None)  # a URLError's own error, or its text
    return f"{type(error).__name__}: {reason if reason is not None else error}"


def _scrape_advice(error: BaseException, url: str) -> str:
    """What to change after a failed scrape."""
    if "://" not in url:  # `host:port/metrics`, as a server's log prints its address
        return f"Give the URL with its scheme: http://{url}"
    if isinstance(error, urllib.error.HTTPError):
        if error.code == 404:
            return "vLLM serves its metrics at /metrics: give http://host:port/metrics"
        return "The server refused the scrape"
    if isinstance(error, TimeoutError) or isinstance(getattr(error, "reason", None), TimeoutError):
        return "The server answers too slowly: give scrape() a larger timeout_s"
    return "Check the address and that a vLLM server listens there"


def merge_snapshots(snapshots: Iterable[Snapshot]) -> Snapshot:
    """One snapshot of several sources (data-parallel leaders), their parts kept in order.

    Merge the before and the after readings in the same order: a source is matched with
    itself by its position.
    """
    snapshots = list(snapshots)
    times = [s.taken_at for s in snapshots if s.taken_at is not None]
    return Snapshot(
        tuple(part for snapshot in snapshots for part in snapshot.parts),
        times[0] if times else None,
    )


# -- deltas ------------------------------------------------------------------------------------


def step_metrics(
    before: Snapshot | Iterable[Snapshot],
    after: Snapshot | Iterable[Snapshot],
) -> dict[str, float | int]:
    """The step's logger keys (:data:`STEP_KEYS`) from a reading before and one after.

    Counters carry the step's delta summed over every engine and source; the means are the
    histograms' sum delta over their count delta. A key is left out when its family matched
    nothing, when a total went backwards, a series was created anew (its ``_created`` time
    changed) or a source appeared or vanished between the readings (an engine restarted: the
    step's work is unknowable), and, for the means, when the engine served no request.
    Several snapshots on either side are merged. Never raises.
    """
    try:
        pair = _pair(before, after)
        if pair is None:
            return {}
        _say_missing(pair[1], ENGINE_FAMILIES)
        return _step_metrics(pair[0].sources(), pair[1].sources())
    except Exception:
        warn_once(
            "vllm:step_metrics",
            "rlmetrics-vllm: step_metrics failed; no rl.vllm.* values for this step",
        )
        return {}


def engine_signals(
    before: Snapshot | Iterable[Snapshot],
    after: Snapshot | Iterable[Snapshot],
    *,
    peak_flops_per_gpu: float | None = None,
    during: Sequence[Snapshot | Iterable[Snapshot]] = (),
) -> dict[str, float | int]:
    """The engine's state and cache over the step, from the same two readings as
    :func:`step_metrics` (merge both into the train dict). Every key is left out of a step in
    which an engine restarted, and each one whose families the engine does not serve. Never
    raises.

    - ``vllm/prefix_cache_hit_rate``: prefix-cache hits over queries (token deltas);
    - ``vllm/cached_prompt_tokens``, ``vllm/preemptions``: deltas;
    - ``vllm/kv_cache_usage``: the engines' mean KV-cache usage (0 to 1) in ``after``;
    - ``vllm/requests_waiting/<reason>``: requests waiting in ``after``, summed over engines;
    - ``vllm/awake_share``: the share of the step the engines were awake, time-weighted over
      ``before``, the ``during`` readings and ``after`` (each interval counted in the state
      read at its start: pass a reading taken around each ``sleep()``/``wake_up()`` for the
      exact share);
    - ``vllm/mfu``: model FLOPs utilisation, the engines' mean
      ``vllm:estimated_flops_per_gpu`` delta over the seconds between the readings and
      ``peak_flops_per_gpu`` (only when given, and only when the engine counts FLOPs).
    """
    try:
        pair = _pair(before, after)
        if pair is None:
            return {}
        first, last = pair
        families = [f for f in SIGNAL_FAMILIES if f != FLOPS_FAMILY or peak_flops_per_gpu]
        _say_missing(last, families)
        if _restarted(first.sources(), last.sources()):
            return {}
        return _signals([first, *(_one(s) for s in during), last], peak_flops_per_gpu)
    except Exception:
        warn_once(
            "vllm:engine_signals",
            "rlmetrics-vllm: engine_signals failed; no engine-state values for this step",
        )
        return {}


def _one(snapshots: Snapshot | Iterable[Snapshot]) -> Snapshot:
    return snapshots if isinstance(snapshots, Snapshot) else merge_snapshots(snapshots)


def _pair(
    before: Snapshot | Iterable[Snapshot], after: Snapshot | Iterable[Snapshot]
) -> tuple[Snapshot, Snapshot] | None:
    """Both sides merged; None (said once) when they hold different numbers of readings:
    leaders are matched by position, so then no leader's series can be trusted."""
    first, last = _one(before), _one(after)
    if len(first.parts) != len(last.parts):
        warn_once(
            "vllm:leaders-mismatch",
            f"rlmetrics-vllm: {len(first.parts)} readings before the step, {len(last.parts)} "
            "after: data-parallel leaders are matched by position, so give both sides every "
            "leader's reading, in the same order. The step's rl.vllm.* series are omitted",
        )
        return None
    return first, last


def _say_missing(reading: Snapshot, families: Iterable[str]) -> None:
    """Say once which of ``families`` a reading with vLLM series lacks entirely, and the keys
    that leaves out of every step (an empty reading was said by its reader)."""
    names = {name for part in reading.parts for name, _labels in part}
    if not names:
        return
    missing = [
        family for family in families if not names & (_WANTED[family] - {f"{family}_created"})
    ]
    if not missing:
        return
    keys = ", ".join(dict.fromkeys(key for family in missing for key in _FEEDS[family]))
    warn_once(
        "vllm:missing:" + ",".join(missing),
        f"rlmetrics-vllm: the vLLM read serves no {', '.join(missing)}, so {keys} "
        "cannot be given and are left out of every step (a vLLM other than 0.32.0 may lack "
        "them or name them otherwise; see docs/vllm.md)",
        expected=True,
    )


def _step_metrics(
    before: Mapping[_SourceKey, float], after: Mapping[_SourceKey, float]
) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for key, family in (
        (PROMPT_TOKENS_KEY, PROMPT_TOKENS_FAMILY),
        (GENERATION_TOKENS_KEY, GENERATION_TOKENS_FAMILY),
    ):
        deltas = _deltas(before, after, f"{family}_total")
        if deltas is not None:
            out[key] = _tidy(sum(deltas.values()))
    for key, family in (
        (PROMPT_LENGTH_MEAN_KEY, PROMPT_LENGTH_FAMILY),
        (GENERATION_LENGTH_MEAN_KEY, GENERATION_LENGTH_FAMILY),
    ):
        sums = _deltas(before, after, f"{family}_sum")
        counts = _deltas(before, after, f"{family}_count")
        if sums is None or counts is None:
            continue
        count = sum(counts.values())
        if count > 0:  # no request served: a mean of nothing is omitted, not 0
            out[key] = sum(sums.values()) / count
    finished = _deltas(before, after, f"{REQUEST_SUCCESS_FAMILY}_total")
    if finished is not None:
        total = sum(finished.values())
        ok = sum(
            v
            for (_, labels), v in finished.items()
            if dict(labels).get(FINISHED_REASON_LABEL) in OK_FINISH_REASONS
        )
        out[GENERATIONS_OK_KEY] = _tidy(ok)
        # The remainder, not a list of failure reasons: a reason vLLM adds later is counted,
        # and ok + failed is the engine's own total.
        out[GENERATIONS_FAILED_KEY] = _tidy(total - ok)
    return out


def _restarted(before: Mapping[_SourceKey, float], after: Mapping[_SourceKey, float]) -> bool:
    """Whether an engine restarted between the readings: a counter series came or went, was
    created anew, or went backwards."""
    for index, name, labels in set(before) | set(after):
        if name.endswith("_created") or not (name.endswith("_total") or name.endswith("_count")):
            continue
        key = (index, name, labels)
        if key not in before or key not in after or after[key] < before[key]:
            return True
        created = (index, f"{name.rpartition('_')[0]}_created", labels)
        if before.get(created) != after.get(created):
            return True
    return False


def _gauge(reading: Mapping[_SourceKey, float], family: str) -> dict[tuple[int, Labels], float]:
    return {(index, labels): v for (index, name, labels), v in reading.items() if name == family}


def _signals(readings: list[Snapshot], peak_flops: float | None) -> dict[str, float | int]:
    first, last = readings[0].sources(), readings[-1].sources()
    out: dict[str, float | int] = {}
    for key, family in (
        (CACHED_PROMPT_TOKENS_KEY, CACHED_PROMPT_TOKENS_FAMILY),
        (PREEMPTIONS_KEY, PREEMPTIONS_FAMILY),
    ):
        deltas = _deltas(first, last, f"{family}_total")
        if deltas is not None:
            out[key] = _tidy(sum(deltas.values()))
    queries = _deltas(first, last, f"{PREFIX_CACHE_QUERIES_FAMILY}_total")
    hits = _deltas(first, last, f"{PREFIX_CACHE_HITS_FAMILY}_total")
    if queries is not None and hits is not None and sum(queries.values()) > 0:
        out[PREFIX_CACHE_HIT_RATE_KEY] = sum(hits.values()) / sum(queries.values())
    usage = _gauge(last, KV_CACHE_USAGE_FAMILY)
    if usage:
        out[KV_CACHE_USAGE_KEY] = sum(usage.values()) / len(usage)
    waiting: dict[str, float] = {}
    for (_index, labels), value in _gauge(last, WAITING_BY_REASON_FAMILY).items():
        reason = dict(labels).get(_REASON_LABEL)
        if reason:
            waiting[reason] = waiting.get(reason, 0.0) + value
    for reason, value in waiting.items():
        out[REQUESTS_WAITING_PREFIX + reason] = _tidy(value)
    share = _awake_share(readings)
    if share is not None:
        out[AWAKE_SHARE_KEY] = share
    mfu = _mfu(readings[0], readings[-1], peak_flops)
    if mfu is not None:
        out[MFU_KEY] = mfu
    return out


def _awake(reading: Snapshot) -> float | None:
    """The engines' mean awake state (0 or 1 each) in one reading."""
    states = [
        value
        for (_index, labels), value in _gauge(reading.sources(), SLEEP_STATE_FAMILY).items()
        if dict(labels).get(_SLEEP_LABEL) == _AWAKE
    ]
    return sum(states) / len(states) if states else None


def _awake_share(readings: list[Snapshot]) -> float | None:
    points: list[tuple[float, float]] = []
    for reading in readings:
        state = _awake(reading)
        if reading.taken_at is None or state is None:
            return None
        points.append((reading.taken_at, state))
    points.sort()
    span = points[-1][0] - points[0][0]
    if span <= 0:
        return points[0][1]
    awake = sum((b_time - a_time) * state for (a_time, state), (b_time, _) in pairwise(points))
    return min(1.0, max(0.0, awake / span))


def _mfu(before: Snapshot, after: Snapshot, peak_flops: float | None) -> float | None:
    if (
        peak_flops is None
        or not (isinstance(peak_flops, (int, float)) and math.isfinite(peak_flops))
        or peak_flops <= 0
        or before.taken_at is None
        or after.taken_at is None
        or after.taken_at <= before.taken_at
    ):
        return None
    flops = _deltas(before.sources(), after.sources(), f"{FLOPS_FAMILY}_total")
    if not flops or sum(flops.values()) <= 0:
        return None  # the engine does not count FLOPs (or did nothing): no figure, not a zero
    per_gpu = sum(flops.values()) / len(flops)
    return per_gpu / (after.taken_at - before.taken_at) / peak_flops


def _deltas(
    before: Mapping[_SourceKey, float], after: Mapping[_SourceKey, float], sample: str
) -> dict[tuple[int, Labels], float] | None:
    """Per-source deltas of one sample name, or None when the step's value is unknowable."""
    old = {(index, labels): v for (index, name, labels), v in before.items() if name == sample}
    new = {(index, labels): v for (index, name, labels), v in after.items() if name == sample}
    if not new or old.keys() != new.keys():
        # Nothing matched (a visible gap), or an engine came or went mid-step.
        return None
    created = f"{sample.rpartition('_')[0]}_created"
    for index, labels in new:
        if before.get((index, created, labels)) != after.get((index, created, labels)):
            return None  # the series was created anew: an engine restarted mid-step
    deltas = {source: value - old[source] for source, value in new.items()}
    if any(delta < 0 for delta in deltas.values()):
        return None  # a total went backwards: an engine restarted mid-step
    return deltas


def _tidy(value: float) -> float | int:
    """Counts as ints when they are whole (they always are for vLLM's counters)."""
    return int(value) if float(value).is_integer() else value
