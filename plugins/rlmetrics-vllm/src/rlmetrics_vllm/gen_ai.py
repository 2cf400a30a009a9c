"""The ``gen_ai`` family: what the driver received from each vLLM ``generate()`` call.

:func:`record_generation` is called after each ``generate()`` with the per-request input and
output lengths it returned and the batch's wall clock. Token counts follow the OpenTelemetry
GenAI semantic conventions (``gen_ai.client.token.usage``, their attributes and buckets).

The GenAI conventions' newer shape (semantic-conventions-genai PR #374) replaces that histogram
with two families: counters ``gen_ai.client.inference.usage.input_tokens`` / ``...output_tokens``
split by ``gen_ai.token.modality`` (what the tokens add up to), and histograms
``gen_ai.client.inference.operation.input_tokens`` / ``...output_tokens`` without it (tokens per
request). A backend built on them gets both families with :func:`set_token_usage_names`
(``"inference_usage"``, or ``"both"`` while dashboards move) or ``RLMETRICS_GEN_AI_TOKEN_USAGE``.
The default stays ``gen_ai.client.token.usage``, never both shapes unless asked.

``gen_ai.server.request.duration`` is not recorded: it is defined per inference request, and
one ``generate()`` here is a whole batch spread over every data-parallel shard, so no
per-request latency exists on the driver. The batch's wall clock goes to
``rl.vllm.batch.duration`` instead.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from typing import Any

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, as_plain, is_exporting, record, warn_once
from rlmetrics.spec import SUM
from rlmetrics.variables import Variable

__all__ = [
    "BATCH_DURATION",
    "BATCH_DURATION_BUCKETS",
    "DEFAULT_OPERATION",
    "DEFAULT_PROVIDER",
    "GROUP",
    "MODALITY_TEXT",
    "OPERATION_INPUT_TOKENS",
    "OPERATION_NAME",
    "OPERATION_OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "REQUEST_MODEL",
    "SPECS",
    "TOKEN_MODALITY",
    "TOKEN_MODALITY_VALUES",
    "TOKEN_TYPE",
    "TOKEN_USAGE",
    "TOKEN_USAGE_BUCKETS",
    "TOKEN_USAGE_ENV",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "generation_attributes",
    "record_generation",
    "register_variables",
    "set_token_usage_names",
    "token_usage_names",
    "token_usage_problem",
]

GROUP = "gen_ai"

# Attribute keys from the GenAI semantic conventions.
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
TOKEN_TYPE = "gen_ai.token.type"
#: The newer shape's counters carry the tokens' modality instead of their type (PR #374).
TOKEN_MODALITY = "gen_ai.token.modality"
TOKEN_MODALITY_VALUES = frozenset({"text", "image", "audio"})
#: vLLM's generate() here takes and returns token ids of text.
MODALITY_TEXT = "text"

DEFAULT_PROVIDER = "vllm"
#: RL rollouts send token ids to ``LLM.generate()``: a completion, not a chat exchange.
DEFAULT_OPERATION = "text_completion"

#: The GenAI conventions' recommended boundaries for ``gen_ai.client.token.usage`` (powers of 4).
TOKEN_USAGE_BUCKETS: tuple[float, ...] = tuple(float(4**i) for i in range(14))

#: The GenAI duration boundaries (0.01 s doubling to 81.92 s), extended by doubling to
#: 2621.44 s: one RL generation batch routinely takes minutes, and the conventions' last
#: bucket would put every slow batch into overflow.
BATCH_DURATION_BUCKETS: tuple[float, ...] = tuple(round(0.01 * 2**i, 2) for i in range(19))

TOKEN_USAGE = MetricSpec(
    "gen_ai.client.token.usage",
    Kind.HISTOGRAM,
    unit="{token}",
    description="Tokens per request of a vLLM generate() batch, as the driver received them, "
    "split by gen_ai.token.type (input / output).",
    attributes={
        TOKEN_TYPE: {"input", "output"},
        PROVIDER_NAME: OPEN,
        OPERATION_NAME: OPEN,
        REQUEST_MODEL: OPEN,
    },
    buckets=TOKEN_USAGE_BUCKETS,
    reduce=SUM,
)

BATCH_DURATION = MetricSpec(
    "rl.vllm.batch.duration",
    Kind.HISTOGRAM,
    unit="s",
    description="Wall clock of one vLLM generate() batch across every data-parallel shard.",
    attributes={PROVIDER_NAME: OPEN, OPERATION_NAME: OPEN, REQUEST_MODEL: OPEN},
    buckets=BATCH_DURATION_BUCKETS,
    reduce=SUM,
)

_USAGE_ATTRIBUTES = {PROVIDER_NAME: OPEN, OPERATION_NAME: OPEN, REQUEST_MODEL: OPEN}
USAGE_INPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.usage.input_tokens",
    Kind.COUNTER,
    unit="{token}",
    description="Input tokens of vLLM generate() batches, added up by gen_ai.token.modality "
    "(the GenAI conventions' newer counter; recorded when token usage names are "
    "inference_usage or both).",
    attributes={**_USAGE_ATTRIBUTES, TOKEN_MODALITY: TOKEN_MODALITY_VALUES},
    reduce=SUM,
)
USAGE_OUTPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.usage.output_tokens",
    Kind.COUNTER,
    unit="{token}",
    description="Output tokens of vLLM generate() batches, added up by gen_ai.token.modality "
    "(the GenAI conventions' newer counter; recorded when token usage names are "
    "inference_usage or both).",
    attributes={**_USAGE_ATTRIBUTES, TOKEN_MODALITY: TOKEN_MODALITY_VALUES},
    reduce=SUM,
)
OPERATION_INPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.operation.input_tokens",
    Kind.HISTOGRAM,
    unit="{token}",
    description="Input tokens per request of a vLLM generate() batch (the GenAI conventions' "
    "newer per-operation histogram; recorded when token usage names are inference_usage "
    "or both).",
    attributes=_USAGE_ATTRIBUTES,
    buckets=TOKEN_USAGE_BUCKETS,
    reduce=SUM,
)
OPERATION_OUTPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.operation.output_tokens",
    Kind.HISTOGRAM,
    unit="{token}",
    description="Output tokens per request of a vLLM generate() batch (the GenAI conventions' "
    "newer per-operation histogram; recorded when token usage names are inference_usage "
    "or both).",
    attributes=_USAGE_ATTRIBUTES,
    buckets=TOKEN_USAGE_BUCKETS,
    reduce=SUM,
)

SPECS: tuple[MetricSpec, ...] = (
    TOKEN_USAGE,
    BATCH_DURATION,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    OPERATION_INPUT_TOKENS,
    OPERATION_OUTPUT_TOKENS,
)

#: ``spec`` (``gen_ai.client.token.usage``, the default), ``inference_usage`` or ``both``.
TOKEN_USAGE_ENV = "RLMETRICS_GEN_AI_TOKEN_USAGE"
_NAMES = ("spec", "inference_usage", "both")
_names: str | None = None


def set_token_usage_names(names: str | None) -> None:
    """Which token usage series :func:`record_generation` records: ``"spec"``
    (``gen_ai.client.token.usage`` by ``gen_ai.token.type``), ``"inference_usage"``
    (the ``gen_ai.client.inference.usage.*`` counters by ``gen_ai.token.modality`` and the
    ``gen_ai.client.inference.operation.*`` histograms) or ``"both"``; None goes back to
    ``RLMETRICS_GEN_AI_TOKEN_USAGE``, else ``spec``."""
    global _names
    if names is not None and names not in _NAMES:
        raise ValueError(f"token usage names must be one of {_NAMES}, got {names!r}")
    _names = names


def token_usage_problem(value: str) -> str | None:
    """What is wrong with ``value`` as :data:`TOKEN_USAGE_ENV`, or None."""
    if not value.strip() or value.strip() in _NAMES:
        return None
    return f"must be one of {', '.join(_NAMES)}"


@rlmetrics.hookimpl
def register_variables(register: Any) -> None:
    """:data:`TOKEN_USAGE_ENV`, for ``rlmetrics config``."""
    register(Variable(TOKEN_USAGE_ENV, token_usage_problem))


def token_usage_names() -> str:
    """The token usage names in force."""
    if _names is not None:
        return _names
    from_env = os.environ.get(TOKEN_USAGE_ENV, "").strip()
    wrong = token_usage_problem(from_env)
    if wrong:
        message = f"rlmetrics-vllm: {TOKEN_USAGE_ENV} {wrong}; using spec"
        warn_once("gen_ai:token-usage-env", message)
    return from_env if from_env in _NAMES else "spec"


rlmetrics.declare(GROUP, SPECS)


def generation_attributes(
    *,
    model: str | os.PathLike[str] | None = None,
    provider: str = DEFAULT_PROVIDER,
    operation: str = DEFAULT_OPERATION,
) -> dict[str, str]:
    """The attributes every point of one batch carries; ``gen_ai.request.model`` only when
    known (the conventions make it conditionally required). A model given as a path (the
    checkpoint directory, which vLLM serves as the model's name when given no other) is its
    path."""
    attributes = {PROVIDER_NAME: provider, OPERATION_NAME: operation}
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if model:
        attributes[REQUEST_MODEL] = model
    return attributes


def _lengths(values: Any) -> list[Any]:
    """The per-request lengths of a list, NumPy array or torch tensor, as a list (an array
    converts once, not one ``.item()`` per request)."""
    if values is None:
        return []
    plain = as_plain(values)
    if isinstance(plain, Iterable) and not isinstance(plain, (str, bytes)):
        return list(plain)
    return [plain]


def record_generation(
    input_lengths: Any = None,
    output_lengths: Any = None,
    duration_s: float | None = None,
    *,
    model: str | os.PathLike[str] | None = None,
    provider: str = DEFAULT_PROVIDER,
    operation: str = DEFAULT_OPERATION,
) -> None:
    """Record one ``generate()`` batch: a token-usage point per request and side, and the
    batch's wall clock. A cheap no-op unless telemetry is exporting; never raises.

    :param input_lengths / output_lengths: one length per request (list, array or tensor),
        as the call returned them; None skips that side.
    :param duration_s: the batch's wall clock in seconds; None skips it.
    """
    if not is_exporting():
        return
    base = generation_attributes(model=model, provider=provider, operation=operation)
    names = token_usage_names()
    # Each side in its own guard (converting lengths can raise), so bad lengths cost only
    # their side; record() itself never raises.
    for token_type, lengths in (("input", input_lengths), ("output", output_lengths)):
        try:
            attributes = {**base, TOKEN_TYPE: token_type}
            counter, per_request = (
                (USAGE_INPUT_TOKENS, OPERATION_INPUT_TOKENS)
                if token_type == "input"
                else (USAGE_OUTPUT_TOKENS, OPERATION_OUTPUT_TOKENS)
            )
            by_modality = {**base, TOKEN_MODALITY: MODALITY_TEXT}
            for length in _lengths(lengths):
                if isinstance(length, numbers.Real) and length < 0:
                    warn_once(
                        f"gen_ai:{token_type}:negative",
                        "rlmetrics-vllm: a negative "
                        f"{token_type} length ({length}) is not a token count; dropped",
                    )
                    continue
                if names != "inference_usage":
                    record(GROUP, {TOKEN_USAGE.key: length}, attributes)
                if names != "spec":
                    record(GROUP, {per_request.key: length}, base)
                    record(GROUP, {counter.key: length}, by_modality)
        except Exception:
            warn_once(
                f"gen_ai:{token_type}",
                f"rlmetrics-vllm: recording {token_type} token "
                "usage failed; that side of the batch is dropped",
            )
    if duration_s is not None:
        record(GROUP, {BATCH_DURATION.key: duration_s}, base)
