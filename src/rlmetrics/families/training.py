"""Training scalars: the per-step keys every RL loop logs, mirrored as unlabelled gauges;
reward components and per-dataset validation metrics, as one gauge each with a bounded
attribute.

Each row is declared from the logger key its algorithm logs, so a rename cannot leave a gauge
silently reporting nothing. A downstream algorithm adds its own row with :func:`tee_scalar`
(or :func:`tee_dataset_metric`) from the constant it logs with — no rlmetrics release, no
edit here.

Keys whose middle is a name the loop chose (``reward/<component>``,
``validation/<dataset>/<metric>``) are not one series per name: that would be a series nobody
declared per component, reaching only the trackers. They become one gauge per quantity with
the name as an attribute (``rl.reward.component``, ``rl.dataset``), bounded per telemetry
session: the first :data:`MAX_REWARD_COMPONENTS` components (:data:`MAX_DATASETS` datasets)
stand for themselves, every later one is recorded as ``other``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import hookimpl
from ..events import TRAIN_PREFIXES, VALIDATION_PREFIX
from ..key_patterns import ANY
from ..keyplans import KeyPlans
from ..known_keys import declare_keys
from ..registry import (
    _caller_module,
    declare,
    default_registry,
    is_exporting,
    record_declared,
    record_points,
)
from ..spec import (
    LAST,
    MAX,
    MEAN,
    OPEN,
    STRAGGLER,
    SUM,
    Kind,
    MetricSpec,
    Reduction,
    weighted_mean,
)
from ..values import AttributeSet, BoundedValues, key_attribute

__all__ = [
    "COMPONENT_ATTR",
    "DATASET_ATTR",
    "DATASET_GROUP",
    "GROUP",
    "MAX_DATASETS",
    "MAX_REWARD_COMPONENTS",
    "NEMO_RL_BACKEND_ONLY",
    "NEMO_RL_BACKEND_ONLY_PREFIXES",
    "REWARD_COMPONENT",
    "REWARD_COMPONENT_GROUP",
    "SAMPLES",
    "UNNAMED_DATASET",
    "VALIDATION_PREFIX",
    "dataset_metrics",
    "record_dataset_metrics",
    "record_reward_components",
    "reward_components",
    "tee_dataset_metric",
    "tee_scalar",
]

GROUP = "rl.train"


def tee_scalar(
    logger_key: str,
    name: str,
    *,
    unit: str = "1",
    description: str = "",
    reduce: Reduction | str | None = None,
) -> MetricSpec:
    """Declare that ``logger_key`` in a ``train`` (or ``""``) dict is teed as gauge ``name``,
    merged across ranks as ``reduce`` says (:class:`~rlmetrics.spec.Reduction`; a mean when
    left out).

    Call it at import time of the module that logs the key, with the same constant::

        ACCURACY = "accuracy"
        tee_scalar(ACCURACY, "rl.dpo.accuracy", description="Preference accuracy")
        ...
        logger.log_metrics({ACCURACY: acc}, step, prefix="train")
    """
    _refuse_a_carried_prefix(logger_key, name)
    spec = MetricSpec(
        name, Kind.GAUGE, unit=unit, description=description, key=logger_key, reduce=reduce
    )
    default_registry().declare(GROUP, [spec], owner=_caller_module(1))
    return spec


def _refuse_a_carried_prefix(logger_key: str, name: str) -> None:
    """A key written with the prefix a dict's keys may carry (``train/acc``) is read as the
    rest of it under that prefix, so a scalar declared with it would never be teed."""
    from ..registry import DeclarationError
    from ..routing import KEY_PREFIXES

    if not isinstance(logger_key, str):
        return  # MetricSpec says what a key must be
    for prefix in sorted(KEY_PREFIXES, key=len, reverse=True):
        if not logger_key.startswith(f"{prefix}/") or len(logger_key) == len(prefix) + 1:
            continue
        rest = logger_key[len(prefix) + 1 :]
        if prefix in TRAIN_PREFIXES:
            raise DeclarationError(
                f"tee_scalar({logger_key!r}, {name!r}): a dict's {prefix}/ keys are read as "
                f"logged under prefix {prefix!r}, so declare the key without it: "
                f"tee_scalar({rest!r}, {name!r}) reads {{{logger_key!r}: v}} logged without a "
                f"prefix and {{{rest!r}: v}} with prefix={prefix!r}"
            )
        raise DeclarationError(
            f"tee_scalar({logger_key!r}, {name!r}): keys under '{prefix}/' are read as logged "
            f"under prefix {prefix!r}, never the training scalars (they read 'train' and ''); "
            "declare the training key, or tee_dataset_metric for a validation metric"
        )


#: The series a rank's per-sample means are weighted by when ranks merge: the samples the
#: rank's step trained on, logged as ``num_samples`` beside them (absent, ranks weigh alike).
SAMPLES = "rl.train.samples"
BY_SAMPLES = weighted_mean(SAMPLES)

# NeMo-RL's rows (see the spec's "Training scalars" tables). kl_penalty holds the divergence
# itself (the coefficient is divided back out), hence rl.kl.divergence. Across ranks, means
# over samples weigh by samples, losses are the data-parallel mean, grad norm and learning
# rate are one value every rank holds (the max is it, and shows a rank that disagrees), times
# are phases (the slowest rank's, with the straggler series) and throughputs add up.
tee_scalar(
    "num_samples",
    SAMPLES,
    unit="{sample}",
    description="Samples the step trained on (summed over ranks)",
    reduce=SUM,
)
tee_scalar(
    "reward", "rl.reward.mean", description="Mean reward of the step's samples", reduce=BY_SAMPLES
)
tee_scalar(
    "kl_penalty",
    "rl.kl.divergence",
    description="KL divergence to the reference policy",
    reduce=BY_SAMPLES,
)
tee_scalar("loss", "rl.policy.loss", description="Policy loss", reduce=MEAN)
tee_scalar("critic/loss", "rl.value.loss", description="Value (critic) loss (PPO)", reduce=MEAN)
tee_scalar(
    "approx_entropy", "rl.entropy", description="Approximate policy entropy", reduce=BY_SAMPLES
)
tee_scalar(
    "mean_gen_tokens_per_sample",
    "rl.response.length.mean",
    unit="{token}",
    description="Mean generated tokens per sample",
    reduce=BY_SAMPLES,
)
tee_scalar("grad_norm", "rl.grad_norm", description="Gradient norm", reduce=MAX)
tee_scalar("lr", "rl.learning_rate", description="Learning rate", reduce=LAST)
tee_scalar(
    "loader_latency_max",
    "rl.sft_v2.loader.latency.max",
    unit="s",
    description="SFT v2: slowest data-loader fetch of the step",
    reduce=MAX,
)
tee_scalar(
    "policy_time",
    "rl.sft_v2.policy.duration",
    unit="s",
    description="SFT v2: policy time",
    reduce=STRAGGLER,
)
tee_scalar(
    "total_step_time",
    "rl.sft_v2.step.duration",
    unit="s",
    description="SFT v2: step wall time",
    reduce=STRAGGLER,
)
tee_scalar(
    "valid_tokens_per_second",
    "rl.sft_v2.valid_tokens_per_second",
    unit="{token}/s",
    description="SFT v2: valid (non-padding) tokens processed per second",
    reduce=SUM,
)

#: NeMo-RL's own train keys that no series reads (GRPO's loop, its loss function and its
#: workers; PPO's critic statistics): they reach the trackers only, and are not typos to
#: ``Logger(unknown_keys=...)`` (docs/integrations/nemo-rl.md).
NEMO_RL_BACKEND_ONLY = (
    *("filtered_reward", "mean_prompt_length", "total_num_tokens", "advantages/*"),
    *("draft_grad_norm", "moe/*", "mtp/*", "histogram/*", "generation_logger_metrics/**"),
    *("probs_ratio", "probs_ratio_clamped", "probs_ratio_min", "probs_ratio_max"),
    *("probs_ratio_clamped_min", "probs_ratio_clamped_max", "sampling_importance_ratio"),
    *("token_mult_prob_error", "gen_kl_error", "policy_kl_error", "js_divergence_error"),
    *("num_valid_samples", "positive_nll_loss", "wd", "global_valid_seqs", "global_valid_toks"),
    *("mean_total_tokens_per_sample", "max_gen_tokens_per_sample", "mean_env_tokens_per_sample"),
    *("total_turns", "avg_turns_per_sample", "natural_termination_rate", "truncation_rate"),
    *("max_turns_reached_rate", "critic/grad_norm", "critic/explained_var"),
    *("critic/returns_mean", "critic/values_mean"),
    # GRPO's sequence log-prob error checks (always logged), truncated importance sampling,
    # tool-call and thinking penalties, dynamic sampling, the baseline's reward mix, and the
    # async multi-turn rollout's statistics.
    *(f"{s}_seq_mult_prob_error{m}" for s in ("max", "mean", "min") for m in ("", "_after_mask")),
    *("num_masked_seqs_by_logprob_error", "masked_correct_pct", "is_oob_ratio"),
    *("invalid_tool_call_rate", "malformed_thinking_rate", "num_invalid_tool_calls"),
    *("num_malformed_thinking", "num_assistant_messages", "dynamic_sampling_*"),
    *("baseline_reward/*", "max_turns_per_sample", "max_gen_tokens_per_turn/*"),
    *("mean_total_reward", "max_total_reward", "min_total_reward"),
)
declare_keys(NEMO_RL_BACKEND_ONLY, backend_only=True, note="NeMo-RL's own train keys")
#: The prefixes of NeMo-RL's step timers and throughput summary: every key of them reaches
#: the trackers only (its timers are not efficiency categories; ``efficiency/*`` are).
NEMO_RL_BACKEND_ONLY_PREFIXES = ("timing/train", "timing/validation", "performance")
declare_keys(
    [ANY], prefixes=NEMO_RL_BACKEND_ONLY_PREFIXES, backend_only=True, note="NeMo-RL's timers"
)

# -- reward components and per-dataset metrics -------------------------------------------------

REWARD_COMPONENT_GROUP = "rl.reward.components"
#: One gauge for every component; the attribute names the component. Not a metric under an
#: ``rl.reward.component`` namespace: OpenTelemetry names and attributes share one hierarchy,
#: and a name should not also be a namespace.
REWARD_COMPONENT = "rl.reward.component_mean"
COMPONENT_ATTR = "rl.reward.component"
DATASET_GROUP = "rl.validation"
DATASET_ATTR = "rl.dataset"
#: Distinct components (datasets) one telemetry session exports by name; later ones are
#: recorded as ``other``.
MAX_REWARD_COMPONENTS = 64
MAX_DATASETS = 64

_REWARD_PREFIX = "reward/"
# A dict logged under VALIDATION_PREFIX holds ``<dataset>/<metric>`` keys (NeMo-RL logs its
# validation dict so); under ``validation-<dataset>`` (DPO's per-dataset prefix), ``<metric>``
# keys; a train dict holds ``validation/<dataset>/<metric>``.
#: The ``rl.dataset`` of a validation dict that names no dataset (NeMo-RL's GRPO logs
#: ``{"accuracy", "avg_length"}`` under ``validation``, SFT ``{"val_loss"}``): its one set.
UNNAMED_DATASET = "default"
#: Keys of such a dict that name their metric with a ``val_`` of their own (SFT's).
_UNNAMED_ALIASES = {"val_loss": "loss"}
_VALIDATION_KEY_PREFIX = VALIDATION_PREFIX + "/"
_DATASET_PREFIX = VALIDATION_PREFIX + "-"
#: ``reward/<these>`` are statistics of the total reward (prime-rl logs ``reward/mean``), and
#: ``reward/<component>/<these but mean>`` other statistics of a component: neither is a
#: component's mean.
_REWARD_STATISTICS = frozenset({"mean", "std", "min", "max", "median", "sum", "count"})

# The reward keys a train dict may carry: components (``reward/<component>``,
# ``reward/<component>/mean``), and the statistics no series reads (prime-rl's ``reward/mean``
# of the total; a component's spread), which reach the trackers only on purpose.
declare_keys(["reward/*", "reward/*/mean"], note="reward components")
declare_keys(
    [f"reward/*/{s}" for s in sorted(_REWARD_STATISTICS - {"mean"})],
    backend_only=True,
    note="a reward component's statistics other than its mean",
)

declare(
    REWARD_COMPONENT_GROUP,
    [
        MetricSpec(
            REWARD_COMPONENT,
            Kind.GAUGE,
            description="Mean of one reward component (one reward function or verifier) over "
            "the step's samples, from reward/<component> keys; past the cap, components are "
            "recorded as other",
            attributes={COMPONENT_ATTR: OPEN},
            max_series=MAX_REWARD_COMPONENTS + 1,
            reduce=BY_SAMPLES,
        )
    ],
)


def tee_dataset_metric(
    metric_key: str,
    name: str,
    *,
    unit: str = "1",
    description: str = "",
    reduce: Reduction | str | None = MEAN,
) -> MetricSpec:
    """Declare that a validation metric logged per dataset (``validation/<dataset>/<metric_key>``
    in a train dict, ``<dataset>/<metric_key>`` under the ``validation`` prefix) is teed as
    gauge ``name`` with the dataset as ``rl.dataset``. Call it at import time of the module
    that logs the key, as :func:`tee_scalar`."""
    spec = MetricSpec(
        name,
        Kind.GAUGE,
        unit=unit,
        description=description,
        key=metric_key,
        attributes={DATASET_ATTR: OPEN},
        max_series=MAX_DATASETS + 1,
        reduce=reduce,
    )
    default_registry().declare(DATASET_GROUP, [spec], owner=_caller_module(1))
    # The keys it is read from, wherever the loop logs per-dataset metrics.
    declare_keys([f"{_VALIDATION_KEY_PREFIX}*/{metric_key}"])
    declare_keys([f"*/{metric_key}", metric_key], prefixes=[VALIDATION_PREFIX])
    declare_keys([metric_key], prefixes=[_DATASET_PREFIX + "*"])
    return spec


# NeMo-RL's validation dict (accuracy, avg_length; SFT's val_loss) and the DPO/RM loss.
tee_dataset_metric(
    "accuracy", "rl.validation.accuracy", description="Validation accuracy on one dataset"
)
tee_dataset_metric(
    "avg_length",
    "rl.validation.response.length.mean",
    unit="{token}",
    description="Mean generated tokens per validation sample on one dataset",
)
tee_dataset_metric("loss", "rl.validation.loss", description="Validation loss on one dataset")
declare_keys(list(_UNNAMED_ALIASES), prefixes=[VALIDATION_PREFIX])  # SFT's val_loss
tee_dataset_metric(
    "reward", "rl.validation.reward.mean", description="Mean validation reward on one dataset"
)


def reward_components(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``{component: value}`` from the ``reward/<component>`` (or ``reward/<component>/mean``)
    keys of a flat train dict; statistics of the total (``reward/mean``, ``reward/std``) and of
    a component other than its mean (``reward/<component>/std``) are not components."""
    return {
        component: metrics[key] for key in metrics if (component := _component(key)) is not None
    }


def _component(key: Any) -> str | None:
    if type(key) is not str or not key.startswith(_REWARD_PREFIX):
        return None
    parts = key[len(_REWARD_PREFIX) :].split("/")
    if not parts[0]:
        return None
    if len(parts) == 1:
        return None if parts[0] in _REWARD_STATISTICS else parts[0]
    return parts[0] if parts[1:] == ["mean"] else None


def dataset_metrics(metrics: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str, Any]]:
    """``(dataset, metric, value)`` for each per-dataset validation key of a flat dict logged
    under ``prefix``: ``validation/<dataset>/<metric>`` in a train dict, ``<dataset>/<metric>``
    under ``validation``, ``<metric>`` under ``validation-<dataset>``; a bare ``<metric>``
    under ``validation`` is of :data:`UNNAMED_DATASET`."""
    out: list[tuple[str, str, Any]] = []
    if prefix.startswith(_DATASET_PREFIX):
        dataset = prefix[len(_DATASET_PREFIX) :]
        if not dataset:
            return out
        return [(dataset, k, metrics[k]) for k in metrics if type(k) is str and k and "/" not in k]
    strip = "" if prefix == VALIDATION_PREFIX else _VALIDATION_KEY_PREFIX
    for key in metrics:
        if type(key) is not str or not key.startswith(strip):
            continue
        dataset, _, metric = key[len(strip) :].partition("/")
        if dataset and metric and "/" not in metric:
            out.append((dataset, metric, metrics[key]))
        elif strip == "" and dataset and not metric and "/" not in key:
            out.append((UNNAMED_DATASET, _UNNAMED_ALIASES.get(key, key), metrics[key]))
    return out


class _Labels:
    """One bounded attribute: the admitted names and each one's prepared attribute set."""

    def __init__(self, attribute: str, limit: int, what: str) -> None:
        self.attribute = attribute
        self.what = what
        self.bounded = BoundedValues(limit)
        self._sets: dict[str, AttributeSet] = {}

    def attributes(self, name: str) -> AttributeSet | None:
        """The attribute set ``name`` is recorded under (``other`` past the cap), or None
        for a name that is not a safe attribute value (reported once)."""
        prepared = self._sets.get(name)
        if prepared is not None:
            return prepared
        if key_attribute(name, self.what) is None:
            return None
        label = self.bounded(name)
        prepared = frozenset({(self.attribute, label)})
        if label == name:  # an overflowed name is not remembered: memory stays flat
            self._sets[name] = prepared
        return prepared

    def clear(self) -> None:
        self.bounded.clear()
        self._sets = {}


_components = _Labels(COMPONENT_ATTR, MAX_REWARD_COMPONENTS, "reward component")
_datasets = _Labels(DATASET_ATTR, MAX_DATASETS, "dataset")


def record_reward_components(components: Mapping[str, Any]) -> None:
    """Record ``{component: mean}`` as ``rl.reward.component_mean`` (what the train-dict tee
    does with ``reward/<component>`` keys; for adapters whose trainer names them otherwise,
    such as TRL's ``rewards/<function>/mean``). A no-op unless exporting; never raises."""
    if not is_exporting():
        return
    points = [
        (value, attributes)
        for name, value in components.items()
        if (attributes := _components.attributes(name)) is not None
    ]
    if points:
        record_points(REWARD_COMPONENT_GROUP, REWARD_COMPONENT, points)


def record_dataset_metrics(rows: list[tuple[str, str, Any]]) -> None:
    """Record ``(dataset, metric, value)`` rows against the per-dataset metrics declared with
    :func:`tee_dataset_metric`; a metric nobody declared reaches the backends only. A no-op
    unless exporting; never raises."""
    if not is_exporting():
        return
    declared = default_registry().keys(DATASET_GROUP)
    by_metric: dict[str, list[tuple[Any, AttributeSet]]] = {}
    for dataset, metric, value in rows:
        if metric in declared and (attributes := _datasets.attributes(dataset)) is not None:
            by_metric.setdefault(metric, []).append((value, attributes))
    for metric, points in by_metric.items():
        record_points(DATASET_GROUP, metric, points)


@hookimpl(tee=True, prefixes=[*TRAIN_PREFIXES, VALIDATION_PREFIX, _DATASET_PREFIX + "**"])
def log_metrics(metrics: Mapping[str, Any], prefix: str) -> None:
    if prefix in TRAIN_PREFIXES:
        record_declared(GROUP, metrics)
        keys = _labelled_keys(tuple(metrics))
        if keys:
            labelled = {k: metrics[k] for k in keys}
            record_reward_components(reward_components(labelled))
            record_dataset_metrics(dataset_metrics(labelled))
    elif prefix == VALIDATION_PREFIX or prefix.startswith(_DATASET_PREFIX):
        record_dataset_metrics(dataset_metrics(metrics, prefix))


@hookimpl
def telemetry_started() -> None:
    # Each session admits its own first components and datasets, as it does attribute sets.
    _components.clear()
    _datasets.clear()


def _find_labelled_keys(keys: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(
        k
        for k in keys
        if type(k) is str and (k.startswith(_REWARD_PREFIX) or k.startswith(_VALIDATION_KEY_PREFIX))
    )


#: Which keys of a train dict are components or per-dataset metrics, worked out once per key
#: sequence.
_labelled_keys = KeyPlans(_find_labelled_keys)
