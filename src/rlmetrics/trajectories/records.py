"""The trajectory record: one rollout as plain, checked data (the after-the-fact form's
dicts parsed here, the live form builds the same objects), and the batch the
``on_trajectories`` hook gets.

A record is read field by field, each in its own guard: a field that is not what it should be
(a NaN reward, a tool name that is not a string, a token count that is not a number) is
dropped with one warning naming the field, and the rest of the record lands. Text (prompt,
completion, tool arguments and results) is read only when the text policy keeps it
(:mod:`rlmetrics.trajectories.text`): under ``off`` it never enters a record.

The record schema (every key optional unless said). A key of a record, turn, generation,
tool call or reward that is not below (a misspelling: ``tools`` for ``tool_calls``) is not
read: it is said once per kind of dict, with the keys that are, and the rest lands::

    {
      "sample_id": "p3-2",              # str or int: the rollout's id (warned when missing)
      "group_id": "p3",                 # str or int: its GRPO group (the prompt)
      "env": "math",                    # str: the environment or dataset
      "agent": "solver",                # str: the agent's name (gen_ai.agent.name)
      "outcome": "success",             # success | failure | error | truncated
      "finish_reason": "stop",          # str: why the trajectory ended
      "weight_version": 12,             # str or int: the policy that generated it
      "reward": 1.0,                    # float: the total reward (else the sum of "rewards")
      "latency_s": 3.2,                 # float: wall time of the rollout
      "end_time": 1767225600.0,         # float: Unix seconds it ended, time.time()'s
                                        #   (default: now; one before 2000 — a monotonic
                                        #   clock's — or past 2262 is said, and now)
      "error": "TimeoutError",          # str: the error class, for outcome "error"
      "trainer_weight_version": 14,     # int: the policy being trained (default: the open
                                        #   rlmetrics.step's weight_version, when an int)
      "logprob_mismatch": 0.02,         # float >= 0: the rollout engine's logprobs against
                                        #   the trainer's (mean absolute difference, or a KL)
      "importance_ratio": 1.03,         # float > 0: the trainer's probability over the
                                        #   engine's (the rollout's mean)
      "prompt": "...", "completion": "...",      # text, kept only under a text policy
      "rewards": [{"value": 1.0, "component": "correct", "latency_s": 0.1}],
      "turns": [
        {
          "latency_s": 1.1,             # else the sum of its calls'
          "generations": [{"model": "m", "input_tokens": 120, "output_tokens": 30,
                           "finish_reason": "tool_calls", "latency_s": 0.8,
                           "weight_version": 12, "prompt": "...", "completion": "..."}],
          "tool_calls": [{"name": "search", "outcome": "success", "latency_s": 0.3,
                          "error": "TimeoutError", "arguments": "...", "result": "..."}],
          "rewards": [{"value": 0.1, "component": "format"}]
        }
      ]
    }
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from .._warn import describe_key, describe_number, describe_value, warn_once
from ..values import INT64_MAX, INT64_MIN, as_number, as_step, finite_float
from .text import TextPolicy

__all__ = [
    "MAX_CALLS_PER_TURN",
    "MAX_TURNS",
    "OUTCOMES",
    "PAST_CAP",
    "TOOL_OUTCOMES",
    "UNIX_NS_LIMIT",
    "Generation",
    "Reward",
    "ToolCall",
    "Trajectory",
    "TrajectoryBatch",
    "Turn",
    "parse_trajectories",
    "parse_trajectory",
]

#: What became of a trajectory. Every one but ``success`` is kept by the span budget.
OUTCOMES = ("success", "failure", "error", "truncated")
#: What became of a tool call.
TOOL_OUTCOMES = ("success", "error", "timeout")
#: Turns one record keeps (its spans and row); the count of them all is still its turn count.
MAX_TURNS = 256
#: Generations, tool calls and rewards one turn (or the trajectory itself) keeps.
MAX_CALLS_PER_TURN = 64
#: What becomes of the entries of a turn past MAX_CALLS_PER_TURN, by kind (said with the cut).
PAST_CAP = {
    "generations": "the others are dropped (their tokens are not counted)",
    "tool_calls": "the others are counted, not kept",
    "rewards": "the others are dropped (nor in its total)",
}

_ID = (str, int)
_INF = math.inf

# The records are named tuples: as immutable as frozen attrs classes (every plugin's hook gets
# the same objects), and built in C. A batch the span budget drops is little more than its
# records' reading and building, and a frozen attrs class's generated __init__ (one
# object.__setattr__ per field) cost three times a named tuple's: about 9 µs of a 4-turn
# trajectory's ~30.
#
# The readers below build them with ``_new(Kind, (every field, in order))``: tuple.__new__
# itself, in C. A named tuple's own constructor is a Python function (its defaults, its
# keywords) that calls it: 480 ns for a Generation, 120 this way; 14 of them a 4-turn record.
_new = tuple.__new__


class Generation(NamedTuple):
    """One model call: its model, tokens, why it stopped, how long it took and the policy
    version that made it; ``start_ns``/``end_ns`` when the live form measured them."""

    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    weight_version: str | int | None = None
    prompt: str | None = None
    completion: str | None = None
    end_ns: int | None = None


class ToolCall(NamedTuple):
    """One tool call: its name, outcome, time and (when it failed) the error's class."""

    name: str
    outcome: str = "success"
    latency_s: float = 0.0
    error: str | None = None
    arguments: str | None = None
    result: str | None = None
    end_ns: int | None = None


class Reward(NamedTuple):
    """One reward check: its value and the component it scores. Without one it is
    ``total``: a part of the trajectory's total (its own span, no point of its own)."""

    value: float
    component: str = "total"
    latency_s: float = 0.0
    end_ns: int | None = None


class Turn(NamedTuple):
    """One turn: its generations, tool calls and rewards, in that order."""

    generations: tuple[Generation, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    rewards: tuple[Reward, ...] = ()
    latency_s: float | None = None
    start_ns: int | None = None
    end_ns: int | None = None


class Trajectory(NamedTuple):
    """One rollout (see the module's docstring for the schema it is read from).

    ``turn_count`` and ``tool_call_count`` count every turn and tool call the rollout had,
    also those past :data:`MAX_TURNS` turns or :data:`MAX_CALLS_PER_TURN` calls a turn that
    it no longer holds; ``tool_calls_past_caps`` holds those calls as ``(name, outcome,
    count)``, so the metrics count them by tool too."""

    sample_id: str | int | None = None
    group_id: str | int | None = None
    env: str | None = None
    agent: str | None = None
    outcome: str = "success"
    finish_reason: str | None = None
    weight_version: str | int | None = None
    reward: float | None = None
    latency_s: float | None = None
    end_time_s: float | None = None
    error: str | None = None
    prompt: str | None = None
    completion: str | None = None
    turns: tuple[Turn, ...] = ()
    rewards: tuple[Reward, ...] = ()
    turn_count: int = 0
    tool_call_count: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    trainer_weight_version: int | None = None
    logprob_mismatch: float | None = None
    importance_ratio: float | None = None
    tool_calls_past_caps: tuple[tuple[str, str, int], ...] = ()

    def staleness(self, trained: int | None = None) -> int | None:
        """How many weight versions the policy that generated it is behind the one being
        trained (its ``trainer_weight_version``, else ``trained``): both ints and the lag at
        least 0, else None. Without a version of its own, the policy that generated it is
        its generations' oldest int version (the engine reports one per generation; a
        partial rollout across a weight update was begun by the oldest)."""
        generated = self.weight_version
        if generated is None:
            generated = self._oldest_generation_version()
        if self.trainer_weight_version is not None:
            trained = self.trainer_weight_version
        if trained is None or type(generated) is not int or trained < generated:
            return None
        return trained - generated

    def _oldest_generation_version(self) -> int | None:
        oldest: int | None = None
        for turn in self.turns:
            for g in turn.generations:
                version = g.weight_version
                if type(version) is int and (oldest is None or version < oldest):
                    oldest = version
        return oldest

    @property
    def failed(self) -> bool:
        """Whether it did not succeed (the span budget keeps every such one)."""
        return self.outcome != "success"

    def all_rewards(self) -> list[Reward]:
        """Its rewards and its turns' rewards."""
        out = list(self.rewards)
        for turn in self.turns:
            out.extend(turn.rewards)
        return out

    def total_reward(self, rewards: list[Reward] | None = None) -> float | None:
        """``reward`` if given, else the sum of every reward it holds (``rewards``: its
        :meth:`all_rewards`, when the caller has them), else None. The one total its span
        (``rl.reward``), its row (``reward``) and ``rl.trajectory.reward.summed{total}`` add."""
        if self.reward is not None:
            return self.reward
        if rewards is None:
            rewards = self.all_rewards()
        return math.fsum([r.value for r in rewards]) if rewards else None

    def tokens(self) -> tuple[int | None, int | None]:
        """Input and output tokens over its generations; a side none of its generations
        counts is None (unknown: TRL's records hold no counts), 0 when it has none."""
        given: int | None = None
        taken: int | None = None
        generated = False
        for turn in self.turns:
            for generation in turn.generations:
                generated = True
                if generation.input_tokens is not None:
                    given = (given or 0) + generation.input_tokens
                if generation.output_tokens is not None:
                    taken = (taken or 0) + generation.output_tokens
        if not generated:
            return 0, 0
        return given, taken


@attrs.frozen(slots=True)
class TrajectoryBatch:
    """What the ``on_trajectories`` hook gets: the trajectories of one call at ``step``.

    ``contexts[i]`` is the OpenTelemetry context holding trajectory ``i``'s span (None when
    not tracing or when the span budget dropped it): record inside it
    (:func:`rlmetrics.trajectories.inside`) for an exemplar that points at the span.
    ``dropped`` is how many of them the span budget left without spans;
    ``trainer_weight_version`` the open ``rlmetrics.step``'s weight version (when an int), the
    default a trajectory's staleness is counted against."""

    step: int | None
    trajectories: tuple[Trajectory, ...]
    contexts: tuple[Any, ...] = ()
    dropped: int = 0
    trainer_weight_version: int | None = None

    def context(self, index: int) -> Any:
        contexts = self.contexts
        return contexts[index] if index < len(contexts) else None


# -- reading fields -------------------------------------------------------------------------

# The keys each kind of dict is read for (the module's docstring). A dict's keys are checked
# against them in C before anything else (``known.issuperset(fields)``: about 75 ns for a
# generation's, ``fields.keys() <= known`` 125, which builds a view first); only a dict that
# holds other keys pays for finding and naming them.
_RECORD_KEYS = frozenset(
    (
        "sample_id", "group_id", "env", "agent", "outcome", "finish_reason", "weight_version",
        "reward", "latency_s", "end_time", "error", "trainer_weight_version",
        "logprob_mismatch", "importance_ratio", "prompt", "completion", "rewards", "turns",
    )
)  # fmt: skip
_TURN_KEYS = frozenset(("generations", "tool_calls", "rewards", "latency_s"))
_GENERATION_KEYS = frozenset(
    (
        "model", "input_tokens", "output_tokens", "finish_reason", "latency_s",
        "weight_version", "prompt", "completion",
    )
)  # fmt: skip
_TOOL_CALL_KEYS = frozenset(("name", "outcome", "latency_s", "error", "arguments", "result"))
_REWARD_KEYS = frozenset(("value", "component", "latency_s"))
_SHOWN_KEYS = 8


def _unread(kind: str, fields: Mapping[Any, Any], known: frozenset[str]) -> None:
    """Say (once per ``kind`` of dict) which keys of ``fields`` are not read, and which are:
    a misspelt key would otherwise drop its value without a word."""
    unread = [key for key in fields if key not in known]
    shown = [describe_key(key)[:64] for key in unread[:_SHOWN_KEYS]]
    if len(unread) > _SHOWN_KEYS:
        shown.append(f"and {len(unread) - _SHOWN_KEYS} more")
    warn_once(
        f"trajectory:unread-keys:{kind}",
        f"rlmetrics: a trajectory {kind} holds keys that are not read: {', '.join(shown)} "
        f"(a {kind}'s keys: {', '.join(sorted(known))}); they are ignored and the rest of the "
        "trajectory is logged",
    )


def _bad(field: str, expected: str, value: Any) -> None:
    warn_once(
        f"trajectory:field:{field}",
        f"rlmetrics: trajectory field {field!r} must be {expected}, got {describe_number(value)}; "
        "the field is dropped and the rest of the trajectory is logged",
    )


def _identifier(field: str, value: Any) -> str | int | None:
    if value is None:
        return None
    if isinstance(value, str):  # a str subclass too: NumPy's str_ (a verl batch's uid)
        text: str = str.__str__(value)
        if 0 < len(text) <= 256:
            return text
    elif isinstance(value, int) and not isinstance(value, bool):
        if INT64_MIN <= value <= INT64_MAX:  # what a span attribute can carry
            return int(value)
    else:
        number = as_step(value)  # a NumPy or torch integer
        if number is not None and number <= INT64_MAX:
            return number
    _bad(field, "a str (at most 256 characters) or an int within int64", value)
    return None


def _name(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and 0 < len(value) <= 128:
        return str.__str__(value)  # a str subclass (NumPy's str_) as the str it is
    _bad(field, "a str of at most 128 characters", value)
    return None


def _seconds(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if type(value) is float and 0.0 <= value < math.inf:  # the common case, first
        return value
    number = finite_float(value)
    if number is None or number < 0 or type(value) is bool:
        _bad(field, "a finite number of seconds from 0", value)
        return None
    return number


def _seconds_like(field: str, value: Any) -> float | None:
    """A finite number from 0 (not seconds: the message says so)."""
    if value is None:
        return None
    number = finite_float(value)
    if number is None or number < 0 or type(value) is bool:
        _bad(field, "a finite number from 0", value)
        return None
    return number


#: Past this, Unix nanoseconds no longer fit the int64 a span's time is (in 2262).
UNIX_NS_LIMIT = 2.0**63
#: 2000-01-01: no rollout ended before it, and a smaller number is most likely a monotonic
#: clock's reading (time.monotonic(), seconds since boot), which would date it in 1970.
EARLIEST_UNIX_S = 946_684_800.0


def _unix_time(field: str, value: Any) -> float | None:
    """Unix seconds a span can end at: from 2000 and within int64 nanoseconds."""
    if value is None:
        return None
    number = finite_float(value)
    if (
        number is None
        or type(value) is bool
        or not number >= EARLIEST_UNIX_S
        or not number * 1e9 < UNIX_NS_LIMIT
    ):
        _bad(
            field,
            "Unix seconds (time.time(), not a monotonic clock) from 2000 and before 2262",
            value,
        )
        return None
    return number


def _positive(field: str, value: Any) -> float | None:
    if value is None:
        return None
    number = finite_float(value)
    if number is None or number <= 0 or type(value) is bool:
        _bad(field, "a finite number above 0", value)
        return None
    return number


def _count(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is int and 0 <= value <= 2**63 - 1:
        return value
    number = as_number(value)
    if (
        number is None
        or type(value) is bool
        or not 0 <= number <= INT64_MAX
        or number != int(number)
    ):
        _bad(field, "an int from 0", value)
        return None
    return int(number)


def _real(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if type(value) is float and -math.inf < value < math.inf:
        return value
    number = finite_float(value)
    if number is None or type(value) is bool:
        _bad(field, "a finite number", value)
        return None
    return number


def _choice(field: str, value: Any, allowed: tuple[str, ...], default: str) -> str:
    """``value`` if one of ``allowed``, else ``default``: what a missing one is taken as (an
    outcome's depends on whether an error is given), said."""
    if value is None:
        return default
    if isinstance(value, str) and value in allowed:
        return str.__str__(value)  # a str subclass (NumPy's str_) as the str it is
    warn_once(
        f"trajectory:field:{field}",
        f"rlmetrics: trajectory field {field!r} must be one of {list(allowed)}, got "
        f"{describe_number(value)}; it is taken as {default!r} (as without one: 'error' when "
        "an error is given, else 'success') and the rest of the trajectory is logged",
    )
    return default


def _list(field: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if type(value) is list or isinstance(value, (list, tuple)):
        if len(value) > MAX_CALLS_PER_TURN:
            warn_once(
                f"trajectory:many:{field}",
                f"rlmetrics: a trajectory's {field!r} holds {len(value)} entries; the first "
                f"{MAX_CALLS_PER_TURN} are kept in its spans and row, "
                f"{PAST_CAP.get(field, 'the others are dropped')}",
            )
            return list(value[:MAX_CALLS_PER_TURN])
        return list(value)
    _bad(field, "a list", value)
    return []


def _mapping(field: str, value: Any) -> Mapping[str, Any] | None:
    if type(value) is dict or isinstance(value, Mapping):
        return value
    _bad(field, "a dict", value)
    return None


# The readers below check the common case inline (a str name, an int count, a float of
# seconds: what a trainer's records hold) and call the field's reader only for the rest,
# which warns exactly as before. A batch of a step's rollouts is read field by field, and a
# call per field was most of the cost of a trajectory the span budget drops.


def _generation(item: Any, text: TextPolicy, end_ns: int | None = None) -> Generation | None:
    fields = item if type(item) is dict else _mapping("generations[]", item)
    if fields is None:
        return None
    if not _GENERATION_KEYS.issuperset(fields):
        _unread("generation", fields, _GENERATION_KEYS)
    get = fields.get
    model = get("model")
    if model is not None and not (type(model) is str and 0 < len(model) <= 128):
        model = _name("generation.model", model)
    given = get("input_tokens")
    if given is not None and not (type(given) is int and 0 <= given <= INT64_MAX):
        given = _count("generation.input_tokens", given)
    taken = get("output_tokens")
    if taken is not None and not (type(taken) is int and 0 <= taken <= INT64_MAX):
        taken = _count("generation.output_tokens", taken)
    reason = get("finish_reason")
    if reason is not None and not (type(reason) is str and 0 < len(reason) <= 128):
        reason = _name("generation.finish_reason", reason)
    latency = get("latency_s")
    if not (type(latency) is float and 0.0 <= latency < _INF):
        latency = _seconds("generation.latency_s", latency) or 0.0
    version = get("weight_version")
    if version is not None and not (
        (type(version) is int and INT64_MIN <= version <= INT64_MAX)
        or (type(version) is str and 0 < len(version) <= 256)
    ):
        version = _identifier("generation.weight_version", version)
    if text.keeps:
        prompt = text.keep("prompt", get("prompt"))
        completion = text.keep("completion", get("completion"))
    else:
        prompt = completion = None
    return _new(  # type: ignore[no-any-return]
        Generation, (model, given, taken, reason, latency, version, prompt, completion, end_ns)
    )


def _tool_call(item: Any, text: TextPolicy, end_ns: int | None = None) -> ToolCall | None:
    fields = item if type(item) is dict else _mapping("tool_calls[]", item)
    if fields is None:
        return None
    if not _TOOL_CALL_KEYS.issuperset(fields):
        _unread("tool call", fields, _TOOL_CALL_KEYS)
    get = fields.get
    name = get("name")
    if not (type(name) is str and 0 < len(name) <= 128):
        if name is None:  # the metrics and the span need one: "other", as a bad one is
            warn_once(
                "trajectory:field:tool_call.name:missing",
                "rlmetrics: trajectory field 'tool_call.name' is missing; the call is counted "
                "as the tool 'other' and the rest of the trajectory is logged",
            )
        name = _name("tool_call.name", name)
    outcome = get("outcome")
    if outcome is None:  # an error given says the call failed
        outcome = "success" if get("error") is None else "error"
    elif not (type(outcome) is str and outcome in TOOL_OUTCOMES):
        outcome = _choice(
            "tool_call.outcome",
            outcome,
            TOOL_OUTCOMES,
            "success" if get("error") is None else "error",
        )
    latency = get("latency_s")
    if not (type(latency) is float and 0.0 <= latency < _INF):
        latency = _seconds("tool_call.latency_s", latency) or 0.0
    error = get("error")
    if error is not None:
        error = _name("tool_call.error", error)
    if text.keeps:
        arguments = text.keep("tool_arguments", get("arguments"))
        result = text.keep("tool_result", get("result"))
    else:
        arguments = result = None
    return _new(  # type: ignore[no-any-return]
        ToolCall,
        ("other" if name is None else name, outcome, latency, error, arguments, result, end_ns),
    )


def _reward(item: Any, end_ns: int | None = None) -> Reward | None:
    fields = item if type(item) is dict else _mapping("rewards[]", item)
    if fields is None:
        return None
    if not _REWARD_KEYS.issuperset(fields):
        _unread("reward", fields, _REWARD_KEYS)
    get = fields.get
    value = get("value")
    if not (type(value) is float and -_INF < value < _INF):
        if value is None:
            warn_once(
                "trajectory:reward:no-value",
                "rlmetrics: a trajectory reward has no value (a reward without 'value', or "
                "t.reward(None): a reward function that returned None?); that reward is "
                "dropped and the rest of the trajectory is logged",
            )
            return None
        value = _real("reward.value", value)
        if value is None:
            return None  # a reward without a value is no reward
    component = get("component")
    if component is None:
        component = "total"
    elif not (type(component) is str and 0 < len(component) <= 128):
        component = _name("reward.component", component)
        if component is None:
            component = "total"
    latency = get("latency_s")
    if not (type(latency) is float and 0.0 <= latency < _INF):
        latency = _seconds("reward.latency_s", latency) or 0.0
    return _new(Reward, (value, component, latency, end_ns))  # type: ignore[no-any-return]


_NO_TEXT = TextPolicy()


def _count_calls(items: Any, past: dict[tuple[str, str], int]) -> None:
    """Add the tool calls of ``items`` (what a record holds past its caps: not kept, still
    counted) to ``past`` by name and outcome, read as any call is."""
    for item in items:
        call = _tool_call(item, _NO_TEXT)
        if call is not None:
            key = (call.name, call.outcome)
            past[key] = past.get(key, 0) + 1


def _items(field: str, value: Any) -> Any:
    """``_list`` without its copy for a list within the bound (the common case)."""
    if type(value) is list and len(value) <= MAX_CALLS_PER_TURN:
        return value
    return _list(field, value)


def _built(parts: list[Any]) -> tuple[Any, ...]:
    """``parts`` without the entries that could not be read (None)."""
    if None in parts:
        return tuple([part for part in parts if part is not None])
    return tuple(parts)


def _turn(item: Any, text: TextPolicy, past: dict[tuple[str, str], int]) -> Turn | None:
    fields = item if type(item) is dict else _mapping("turns[]", item)
    if fields is None:
        return None
    if not _TURN_KEYS.issuperset(fields):
        _unread("turn", fields, _TURN_KEYS)
    get = fields.get
    generations = calls = rewards = ()
    raw = get("generations")
    if raw is not None:
        generations = _built([_generation(g, text) for g in _items("generations", raw)])
    raw = get("tool_calls")
    if raw is not None:
        kept = _items("tool_calls", raw)
        calls = _built([_tool_call(c, text) for c in kept])
        if kept is not raw and isinstance(raw, (list, tuple)):  # cut at MAX_CALLS_PER_TURN
            _count_calls(raw[MAX_CALLS_PER_TURN:], past)
    raw = get("rewards")
    if raw is not None:
        rewards = _built([_reward(r) for r in _items("rewards", raw)])
    latency = get("latency_s")
    if latency is not None and not (type(latency) is float and 0.0 <= latency < _INF):
        latency = _seconds("turn.latency_s", latency)
    return _new(Turn, (generations, calls, rewards, latency, None, None))  # type: ignore[no-any-return]


def parse_trajectory(record: Any, text: TextPolicy) -> Trajectory | None:
    """One record (a mapping, see the module's docstring) as a :class:`Trajectory`; None for
    what is not a mapping (said: the record is dropped). Never raises."""
    if type(record) is not dict and not isinstance(record, Mapping):
        # Not a field of a record but the record itself: dropped whole.
        warn_once(
            "trajectory:not-a-dict",
            "rlmetrics: log_trajectories takes one dict per rollout; a 'trajectory' must be a "
            f"dict, got {describe_value(record)}; that record is dropped and the rest of the "
            "batch is logged",
        )
        return None
    fields: Mapping[str, Any] = record
    if not _RECORD_KEYS.issuperset(fields):
        _unread("record", fields, _RECORD_KEYS)
    get = fields.get
    sample_id = get("sample_id")
    if not (type(sample_id) is str and 0 < len(sample_id) <= 256):
        sample_id = _identifier("sample_id", sample_id)
    if sample_id is None:
        warn_once(
            "trajectory:no-sample-id",
            "rlmetrics: a trajectory has no sample_id; it is logged without one (give each "
            "rollout an id to find it in the trace and the table)",
        )
    raw_turns = get("turns")
    turns: list[Turn] = []
    turn_count = 0
    past: dict[tuple[str, str], int] = {}  # tool calls past the caps, counted
    if raw_turns is not None:
        if isinstance(raw_turns, (list, tuple)):
            turn_count = len(raw_turns)
            if turn_count > MAX_TURNS:
                warn_once(
                    "trajectory:many-turns",
                    f"rlmetrics: a trajectory has {turn_count} turns; the first {MAX_TURNS} are "
                    "kept in its spans and row, all of them are counted",
                )
            for item in raw_turns[:MAX_TURNS]:
                turn = _turn(item, text, past)
                if turn is not None:
                    turns.append(turn)
            for item in raw_turns[MAX_TURNS:]:
                calls = item.get("tool_calls") if isinstance(item, Mapping) else None
                if isinstance(calls, (list, tuple)):
                    _count_calls(calls, past)
        else:
            _bad("turns", "a list", raw_turns)
    raw_rewards = get("rewards")
    rewards = (
        () if raw_rewards is None else _built([_reward(r) for r in _items("rewards", raw_rewards)])
    )
    tool_call_count = 0
    for turn in turns:
        tool_call_count += len(turn.tool_calls)
    past_caps: tuple[tuple[str, str, int], ...] = ()
    if past:
        past_caps = tuple([(name, outcome, n) for (name, outcome), n in past.items()])
        tool_call_count += sum(past.values())
    # The optional fields: read only when given (most records leave most of them out).
    group_id = get("group_id")
    if group_id is not None and not (type(group_id) is str and 0 < len(group_id) <= 256):
        group_id = _identifier("group_id", group_id)
    env = get("env")
    if env is not None and not (type(env) is str and 0 < len(env) <= 128):
        env = _name("env", env)
    agent = get("agent")
    if agent is not None and not (type(agent) is str and 0 < len(agent) <= 128):
        agent = _name("agent", agent)
    outcome = get("outcome")
    if outcome is None:  # an error given says the rollout failed
        outcome = "success" if get("error") is None else "error"
    elif not (type(outcome) is str and outcome in OUTCOMES):
        outcome = _choice(
            "outcome", outcome, OUTCOMES, "success" if get("error") is None else "error"
        )
    reason = get("finish_reason")
    if reason is not None and not (type(reason) is str and 0 < len(reason) <= 128):
        reason = _name("finish_reason", reason)
    version = get("weight_version")
    if version is not None and not (
        (type(version) is int and INT64_MIN <= version <= INT64_MAX)
        or (type(version) is str and 0 < len(version) <= 256)
    ):
        version = _identifier("weight_version", version)
    reward_total = get("reward")
    if reward_total is not None:
        reward_total = _real("reward", reward_total)
    latency = get("latency_s")
    if latency is not None:
        latency = _seconds("latency_s", latency)
    end_time = get("end_time")
    if end_time is not None:
        end_time = _unix_time("end_time", end_time)
    error = get("error")
    if error is not None:
        error = _name("error", error)
    if text.keeps:
        prompt = text.keep("prompt", get("prompt"))
        completion = text.keep("completion", get("completion"))
    else:
        prompt = completion = None
    trained = get("trainer_weight_version")
    if trained is not None:
        trained = _count("trainer_weight_version", trained)
    mismatch = get("logprob_mismatch")
    if mismatch is not None:
        mismatch = _seconds_like("logprob_mismatch", mismatch)
    ratio = get("importance_ratio")
    if ratio is not None:
        ratio = _positive("importance_ratio", ratio)
    return _new(  # type: ignore[no-any-return]
        Trajectory,
        (
            sample_id,
            group_id,
            env,
            agent,
            outcome,
            reason,  # finish_reason
            version,  # weight_version
            reward_total,  # reward
            latency,  # latency_s
            end_time,  # end_time_s
            error,
            prompt,
            completion,
            tuple(turns),
            rewards,
            max(turn_count, len(turns)),  # turn_count
            tool_call_count,
            None,  # start_ns
            None,  # end_ns
            trained,  # trainer_weight_version
            mismatch,  # logprob_mismatch
            ratio,  # importance_ratio
            past_caps,  # tool_calls_past_caps
        ),
    )


def parse_trajectories(records: Any, text: TextPolicy) -> list[Trajectory]:
    """``records`` (a list or tuple of mappings) as trajectories; what is not a mapping is
    skipped, said once. Never raises."""
    if not isinstance(records, (list, tuple)):
        # Said once per kind: a generator said first must not leave a lone dict unsaid.
        if isinstance(records, Mapping):
            given = "one trajectory's dict, not a list of them (write [record])"
        else:
            given = describe_value(records)
        warn_once(
            f"trajectory:not-a-list:{type(records).__qualname__}",
            f"rlmetrics: log_trajectories takes a list of dicts (one per trajectory), got "
            f"{given}; nothing logged",
        )
        return []
    out = []
    for record in records:
        try:
            trajectory = parse_trajectory(record, text)
        except Exception:
            warn_once("trajectory:parse", "rlmetrics: a trajectory could not be read; skipped")
            continue
        if trajectory is not None:
            out.append(trajectory)
    return out
