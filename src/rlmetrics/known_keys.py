"""Which logged keys rlmetrics knows: the one decision behind ``Logger(unknown_keys=...)`` and
``rlmetrics check --run`` (issue 32: an opt-in for typos).

A key logged under a prefix is *known* when

- a declared series reads it: a spec's key of its own (:func:`logger_key`), in a dict
  logged under the train prefixes (what :func:`~rlmetrics.families.training.tee_scalar` and
  ``record_declared`` read); a series whose key is its name is recorded through its family's
  API, and its key is no logged key;
- the Logger's key map lists it (:mod:`rlmetrics.keymaps`), backend-only rules included;
- a typed hook parses it (:data:`rlmetrics.routing.ROUTES`: every field of a setup-timing or
  rollout-checkpoint dict, the ``efficiency/*`` keys of a train dict);
- a declared key pattern matches it (:func:`declare_keys`): what a family reads in a way its
  series' keys do not say (``reward/<component>``, ``validation/<dataset>/<metric>``, a
  vLLM waiting reason, every field of a Gym rollout row), and the keys documented as reaching
  the backends only (:data:`BACKEND_ONLY`, and those a plugin or a loop declares so).

Anything else is *unknown*: a typo (``kl_penalti``), or a prefix no family reads (``trian``).
It still reaches every backend; the option only says so, with the nearest known key or prefix
("did you mean"). The decision is worked out once per key sequence (:mod:`rlmetrics.keyplans`)
and rebuilt only when the declarations change (they freeze at ``rlmetrics.start()``).

A third-party family that reads logged keys beyond its series' keys must declare them here,
or its keys are reported as unknown (docs/writing-a-plugin.md).

Patterns: a key (or a prefix) with ``*`` standing for one path segment (no ``/``), and
``**`` for any rest, ``/`` included (``efficiency/**``; ``**`` alone is every key, and as a
prefix every prefix, the empty one included).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import routing
from .events import EVALUATION_PREFIXES, STEP_KEY, TRAIN_PREFIXES, WALL_TIME_KEY
from .key_patterns import ANY, is_pattern, pattern_regex
from .keyplans import KeyPlans
from .registry import _caller_module, default_registry

if TYPE_CHECKING:
    from .keymaps import KeyMap
    from .spec import MetricSpec

__all__ = [
    "ANY",
    "BACKEND_ONLY",
    "EVALUATION_PREFIXES",
    "KeyPattern",
    "KeyChecker",
    "Unknown",
    "Vocabulary",
    "declare_keys",
    "logger_key",
    "unknown_in_rows",
]

#: How many close known keys a message offers.
_SUGGESTIONS = 3
_SIMILARITY = 0.7


def _text(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"KeyPattern.{attribute.name} must be a string, got {value!r}")


@attrs.frozen
class KeyPattern:
    """Keys matching ``key`` logged under a prefix matching ``prefix`` are known: read by a
    family, or (``backend_only``) documented as reaching the trackers only."""

    key: str = attrs.field(validator=_text)
    prefix: str = attrs.field(validator=_text)
    backend_only: bool = False
    note: str = attrs.field(default="", eq=False)
    owner: str = attrs.field(default="", eq=False)

    def __attrs_post_init__(self) -> None:
        if not self.key:
            raise ValueError("KeyPattern: key must be a non-empty string")


def declare_keys(
    keys: Iterable[str],
    *,
    prefixes: Iterable[str] = TRAIN_PREFIXES,
    backend_only: bool = False,
    note: str = "",
) -> list[KeyPattern]:
    """Declare logged ``keys`` (exact or patterns) under each of ``prefixes`` as known: keys a
    family reads that no series' key says (call it at import time, beside the reading code),
    or, with ``backend_only``, keys a loop or a plugin logs for the trackers only on purpose.
    ``Logger(unknown_keys=...)`` and ``rlmetrics check --run`` never report them. Declarations
    freeze with the series at ``rlmetrics.start()``::

        declare_keys(["rollout/*/latency_s"], backend_only=True, note="per-worker latency")
    """
    if isinstance(keys, str) or isinstance(prefixes, str):
        raise TypeError("declare_keys takes lists of keys and prefixes, not one string")
    keys, prefixes = list(keys), list(prefixes)
    owner = _caller_module(1)
    _refuse_every_train_key(keys, prefixes, owner)
    _refuse_a_carried_prefix(keys, prefixes, owner)
    patterns = [
        KeyPattern(key, prefix, backend_only, note, owner) for prefix in prefixes for key in keys
    ]
    default_registry().declare_key_patterns(patterns, owner)
    return patterns


def logger_key(spec: MetricSpec) -> str | None:
    """The key a Logger's dict carries for ``spec``: its registry key when it is a key of its
    own (``MetricSpec(key=...)``, as :func:`~rlmetrics.families.training.tee_scalar` gives:
    ``reward``, ``vllm/prompt_tokens``), which the family reads from logged dicts. None for a
    series whose key is its name: its family records it through its API (Gym's, gen_ai's,
    Ray's, the liveness gauges), and no logged dict feeds it, so logging that key by hand
    reaches the trackers only."""
    return spec.key if spec.key != spec.name else None


#: A key pattern of wildcards alone (``**``, ``*``, ``*/**``): every key, or every key of a
#: depth.
_WILDCARDS_ONLY = re.compile(r"[*/]+")


def _refuse_a_carried_prefix(keys: list[str], prefixes: list[str], owner: str) -> None:
    """A key declared for dicts logged without a prefix (``""``) but written with the train
    prefix such dicts' keys carry (``train/acme``) is never looked up: the Logger reads it as
    the rest under that prefix (``acme`` under ``train``). Raise naming the key to declare."""
    if "" not in prefixes:
        return
    for key in keys:
        for prefix in (p for p in TRAIN_PREFIXES if p):
            if isinstance(key, str) and key.startswith(f"{prefix}/") and key != f"{prefix}/":
                from .registry import DeclarationError

                rest = key[len(prefix) + 1 :]
                raise DeclarationError(
                    f"declare_keys([{key!r}]) from {owner}: a dict logged without a prefix "
                    f"has its '{prefix}/' keys read as logged under prefix {prefix!r}, so "
                    f"this key is never looked up; declare_keys([{rest!r}]) covers "
                    f"{{{key!r}: v}} logged so and {{{rest!r}: v}} logged with "
                    f"prefix={prefix!r}"
                )


def _refuse_every_train_key(keys: list[str], prefixes: list[str], owner: str) -> None:
    """Refuse a declaration that would make every key of a train dict known: one installed
    plugin would then hide every typo of every loop that uses it, unsaid."""
    train = [p for p in prefixes if isinstance(p, str) and _admits_a_train_prefix(p)]
    greedy = [k for k in keys if isinstance(k, str) and _WILDCARDS_ONLY.fullmatch(k)]
    if train and greedy:
        from .registry import DeclarationError

        raise DeclarationError(
            f"declare_keys({greedy!r}) from {owner} under prefix {train[0]!r} would make every "
            "key of a train dict known, so no loop with it installed would be told of a typo "
            "again: declare the keys your code reads (a pattern of your own, such as "
            "'acme/**'), or such keys under a prefix of your own (prefixes=['acme/event'])"
        )


def _admits_a_train_prefix(prefix: str) -> bool:
    regex = pattern_regex(prefix)
    return any(regex.fullmatch(train) for train in TRAIN_PREFIXES)


#: Keys every trainer logs for the trackers and no series reads, under any prefix: the epoch
#: and step counters and the axes the backends add (docs/concepts.md).
BACKEND_ONLY = ("epoch", "global_step", "step", WALL_TIME_KEY, STEP_KEY)
declare_keys(
    BACKEND_ONLY,
    prefixes=[ANY],
    backend_only=True,
    note="counters and axes every trainer logs for the trackers",
)
# Evaluation dicts (EVALUATION_PREFIXES, and a per-dataset one nested under them:
# ``eval/gsm8k``): no series reads them, every key of them reaches the trackers only.
# (Per-dataset validation metrics that are series go under ``validation``: docs/concepts.md.)
declare_keys(
    [ANY],
    prefixes=[*EVALUATION_PREFIXES, *(f"{p}/**" for p in EVALUATION_PREFIXES)],
    backend_only=True,
    note="evaluation dicts",
)


@attrs.frozen
class Unknown:
    """A logged key no declaration knows, with the nearest known keys or prefix."""

    prefix: str
    key: str
    #: Close known keys under the same prefix ("did you mean").
    close: tuple[str, ...] = ()
    #: The prefix no family reads (the whole dict is unknown), and close known prefixes.
    unread_prefix: bool = False
    close_prefixes: tuple[str, ...] = ()
    #: Offered key maps that list this key (the run may want one of them).
    key_maps: tuple[str, ...] = ()
    #: The (prefix, key) it is known as when its leading segments are the prefix: a W&B-style
    #: ``{"train/reward": r}`` logged without one is ``reward`` under ``train``.
    known_under: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        """The key as a report names it: itself in a train dict, else under its prefix."""
        return self.key if self.prefix in TRAIN_PREFIXES else f"{self.prefix}/{self.key}"

    def as_logged_without_prefix(self) -> Unknown:
        """This finding of a key decided under its prefix, as the key a dict logged without
        one carried it (``train/kl_penalti``, did you mean ``train/kl_penalty``)."""
        if not self.prefix:
            return self
        return attrs.evolve(
            self,
            prefix="",
            key=f"{self.prefix}/{self.key}",
            close=tuple(f"{self.prefix}/{c}" for c in self.close),
        )

    def hint(self) -> str:
        """What to check: the nearest known prefix or keys, the key maps that list it."""
        hints = []
        if self.known_under is not None:
            prefix, key = self.known_under
            hints.append(
                f"it is known as {key!r} under prefix {prefix!r}: "
                f"log_metrics({{{key!r}: ...}}, prefix={prefix!r})"
            )
        elif self.unread_prefix and self.close_prefixes:
            hints.append(f"did you mean prefix {_either(self.close_prefixes)}?")
        elif self.close:
            hints.append(f"did you mean {_either(self.close)}?")
        if self.key_maps:
            hints.append(
                "key map "
                + _either(self.key_maps)
                + f" lists it (Logger(key_map={self.key_maps[0]!r}))"
            )
        return " ".join(hints)

    def message(self) -> str:
        """The one line the Logger warns and ``check --run`` prints."""
        where = f"under prefix {self.prefix!r}" if self.prefix else "without a prefix"
        if self.unread_prefix:
            what = f"key {self.key!r} logged {where}, a prefix no family reads"
        else:
            what = (
                f"key {self.key!r} logged {where} is known to no declared series, key-map "
                "rule or documented list"
            )
        hint = self.hint()
        return f"{what}{f' ({hint})' if hint else ''}; it reaches the trackers only"

    def as_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "key": self.key,
            "unread_prefix": self.unread_prefix,
            "did_you_mean": list(self.close_prefixes if self.unread_prefix else self.close),
            "key_maps": list(self.key_maps),
            "message": self.message(),
        }


def _either(names: Iterable[str]) -> str:
    return " or ".join(repr(n) for n in names)


class Vocabulary:
    """Every known (prefix, key), from the declarations as they are now and ``key_map``."""

    def __init__(self, key_map: KeyMap | None = None) -> None:
        registry = default_registry()
        self.generation = registry.generation
        self._key_map = key_map
        self._offered: dict[str, KeyMap] | None = None
        #: Exact keys by exact prefix; patterns as (prefix regex, key regex).
        self._exact: dict[str, set[str]] = {}
        self._patterns: list[tuple[re.Pattern[str], re.Pattern[str]]] = []
        self._pattern_texts: list[tuple[re.Pattern[str], str]] = []
        #: Prefixes something reads (exact), and prefix patterns.
        self._prefixes: set[str] = set(TRAIN_PREFIXES)
        self._prefix_patterns: list[re.Pattern[str]] = []
        series_keys = {key for item in registry.declared() if (key := logger_key(item.spec))}
        for prefix in TRAIN_PREFIXES:
            self._exact.setdefault(prefix, set()).update(series_keys)
        for route in routing.ROUTES:
            for prefix in route.prefixes:
                self._add(prefix, route.reads)
        for pattern in registry.key_patterns():
            self._add(pattern.prefix, pattern.key)
        if key_map is not None:
            from .keymaps import PREFIXES

            for prefix in PREFIXES:
                for rule in key_map.rules:
                    self._add(prefix, rule.key)  # the same `*`

    def _add(self, prefix: str, key: str) -> None:
        if is_pattern(prefix) or is_pattern(key):
            prefix_regex = pattern_regex(prefix)
            self._patterns.append((prefix_regex, pattern_regex(key)))
            self._pattern_texts.append((prefix_regex, key))
            if prefix == ANY:
                pass  # keys every prefix may carry: no prefix is read for them
            elif is_pattern(prefix):
                self._prefix_patterns.append(prefix_regex)
            else:
                self._prefixes.add(prefix)
        else:
            self._exact.setdefault(prefix, set()).add(key)
            self._prefixes.add(prefix)

    def known(self, prefix: str, key: str) -> bool:
        """Whether ``key`` logged under ``prefix`` is known (the module's rule); without a
        prefix, a key that carries one (``train/reward``) is known as its rest under it."""
        if not prefix:
            prefix, key = routing.carried(key)
        if key in self._exact.get(prefix, ()):
            return True
        return any(p.fullmatch(prefix) and k.fullmatch(key) for p, k in self._patterns)

    def prefix_read(self, prefix: str) -> bool:
        """Whether anything reads (or documents) dicts logged under ``prefix`` beyond the
        keys every prefix may carry."""
        if prefix in self._prefixes:
            return True
        return any(p.fullmatch(prefix) for p in self._prefix_patterns)

    def unknown(self, prefix: str, keys: Iterable[Any]) -> tuple[Unknown, ...]:
        """The keys of a dict logged under ``prefix`` that are unknown, each with what is
        near it (a key that is not a string is none of them: flattening made it one). Without
        a prefix, the keys that carry one are decided under it, as the plugins read them
        (:func:`rlmetrics.routing.by_prefix`), and named as logged."""
        keys = tuple(keys)
        if prefix or (parts := routing.by_prefix(keys)) is None:
            return self._unknown(prefix, keys)
        found: list[Unknown] = []
        for carried, pairs in parts:
            for unknown in self._unknown(carried, [key for _logged, key in pairs]):
                found.append(unknown if not carried else unknown.as_logged_without_prefix())
        return tuple(found)

    def _unknown(self, prefix: str, keys: Iterable[Any]) -> tuple[Unknown, ...]:
        missing = [k for k in keys if type(k) is str and not self.known(prefix, k)]
        if not missing:
            return ()
        read = self.prefix_read(prefix)
        close_prefixes = () if read else self._close(prefix, self._exact_prefixes())
        candidates = self._candidates(prefix) if read else ([], [])
        return tuple(
            Unknown(
                prefix,
                key,
                close=self._close(key, _instances(key, candidates)),
                unread_prefix=not read,
                close_prefixes=close_prefixes,
                key_maps=self._maps_listing(key) if prefix in TRAIN_PREFIXES else (),
                known_under=self._known_under(prefix, key),
            )
            for key in missing
        )

    def _known_under(self, prefix: str, key: str) -> tuple[str, str] | None:
        """``key`` under ``prefix`` as the (prefix, key) it is known as when its leading
        segments continue the prefix (``setup/x_s`` under ``timing`` is ``x_s`` under
        ``timing/setup``), or an evaluation prefix its name begins with (``eval_reward`` or
        ``eval/reward`` in a train dict is ``reward`` under ``eval``); None when neither is
        known."""
        cut = key.find("/")
        while cut > 0:
            head, rest = key[:cut], key[cut + 1 :]
            longer = f"{prefix}/{head}" if prefix else head
            if rest and self.prefix_read(longer) and self.known(longer, rest):
                return longer, rest
            cut = key.find("/", cut + 1)
        if prefix in TRAIN_PREFIXES:
            # ``eval_reward`` or ``eval/reward`` in a train dict (Accelerate hands everything
            # under train; the transformers Trainer's own naming): an evaluation value, not a
            # misspelt training series ("did you mean 'reward'?" would make it the training
            # reward).
            for evaluation in EVALUATION_PREFIXES:
                for sep in ("_", "/"):
                    rest = key.removeprefix(evaluation + sep)
                    if rest and rest != key and self.known(evaluation, rest):
                        return evaluation, rest
        return None

    def _candidates(self, prefix: str) -> tuple[list[str], list[str]]:
        """The exact known keys under ``prefix``, and the key patterns that apply to it."""
        patterns = {t for r, t in self._pattern_texts if t != ANY and r.fullmatch(prefix)}
        return sorted(self._exact.get(prefix, ())), sorted(patterns)

    def _maps_listing(self, key: str) -> tuple[str, ...]:
        """The offered key maps with a rule for ``key`` (read once, for an unknown key)."""
        if self._offered is None:
            from .keymaps import available_key_maps

            try:
                self._offered = {n: m for n, (_p, m) in available_key_maps().items()}
            except Exception:  # a broken plugin's offer: no hint, the finding stands
                self._offered = {}
        return tuple(sorted(n for n, m in self._offered.items() if m.rule_for(key)))

    def _exact_prefixes(self) -> list[str]:
        return sorted(p for p in self._prefixes if p)

    @staticmethod
    def _close(word: str, candidates: list[str]) -> tuple[str, ...]:
        return tuple(difflib.get_close_matches(word, candidates, _SUGGESTIONS, _SIMILARITY))


def _instances(key: str, candidates: tuple[list[str], list[str]]) -> list[str]:
    """The keys to offer for ``key``: the exact ones, and each pattern with its ``*`` segments
    filled from ``key``'s (``validation/*/accuracy`` offers ``validation/gsm8k/accuracy`` for
    ``validation/gsm8k/acuracy``), or as written when the segments do not line up."""
    exact, patterns = candidates
    segments = key.split("/")
    out = list(exact)
    for pattern in patterns:
        parts = pattern.split("/")
        if "**" in pattern or len(parts) != len(segments):
            out.append(pattern)
            continue
        # Only where the written parts are close: ``extra/metric_0`` is no ``reward/*``.
        written = "/".join(p for p in parts if p != "*")
        logged = "/".join(s for p, s in zip(parts, segments, strict=True) if p != "*")
        filled = "/".join(s if p == "*" else p for p, s in zip(parts, segments, strict=True))
        # A filled pattern that is the key itself (an empty segment: ``reward/``) is no fix.
        if filled != key and difflib.SequenceMatcher(None, written, logged).ratio() >= _SIMILARITY:
            out.append(filled)
    return out


def unknown_in_rows(
    rows: Iterable[Mapping[str, Any]], key_map: KeyMap | None = None
) -> list[Unknown]:
    """The unknown keys of a run's rows (a JSONL file's: each a logged dict with its prefix),
    each once in the order first logged: what ``Logger(unknown_keys="warn")`` with
    ``key_map`` said while the run logged them (``rlmetrics check --run``)."""
    vocabulary = Vocabulary(key_map)
    found: dict[tuple[str, str], Unknown] = {}
    # Each (prefix, key) is decided once: its suggestions compare it with every known key,
    # which for every row of a long run (10^4 steps) took minutes.
    seen: set[tuple[str, Any]] = set()
    for row in rows:
        metrics, prefix = row.get("metrics"), row.get("prefix", "")
        if not isinstance(metrics, Mapping) or type(prefix) is not str:
            continue
        fresh = [key for key in metrics if (prefix, key) not in seen]
        seen.update((prefix, key) for key in fresh)
        for unknown in vocabulary.unknown(prefix, fresh):
            found.setdefault((prefix, unknown.key), unknown)
    return list(found.values())


@attrs.define
class _Findings:
    """A key sequence's unknown keys, and whether they were handed out yet."""

    unknown: tuple[Unknown, ...]
    said: bool = False


class KeyChecker:
    """The unknown keys of each logged dict, worked out once per (prefix, key sequence) and
    again only when the declarations change; what a Logger asks on every step. A sequence's
    findings are handed out the first time it arrives (to be said), never again: a step
    after that costs a tuple of its keys and a dict lookup."""

    def __init__(self, key_map: KeyMap | None = None) -> None:
        self._key_map = key_map
        self._registry = default_registry()  # never replaced (isolated_state swaps its content)
        self._vocabulary = Vocabulary(key_map)
        self._plans = KeyPlans(self._plan)

    def _plan(self, prefix_and_keys: tuple[Any, ...]) -> _Findings:
        return _Findings(self._vocabulary.unknown(prefix_and_keys[0], prefix_and_keys[1:]))

    def __call__(self, prefix: str, flat: Mapping[str, Any]) -> tuple[Unknown, ...]:
        """The unknown keys of ``flat`` logged under ``prefix`` if its key sequence is new
        (or the declarations changed since it was seen), else ``()``."""
        if self._registry.generation != self._vocabulary.generation:
            self._vocabulary = Vocabulary(self._key_map)
            self._plans = KeyPlans(self._plan)
        found = self._plans((prefix, *flat))
        if found.said or not found.unknown:
            return ()
        found.said = True  # two threads may both say it: warn_once keeps it to one line
        return found.unknown
