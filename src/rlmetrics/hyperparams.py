"""A run's configuration as plain values: what ``Logger.log_hyperparams`` hands the backends.

Training scripts keep their configuration in a dict, a dataclass, an attrs class, an OmegaConf
``DictConfig`` (Hydra), a pydantic model, an ``argparse.Namespace`` or an object with
``to_dict()`` (transformers' ``TrainingArguments``), nested in any mix. :func:`to_hyperparams`
turns any of them into one nested dict of JSON values — str, int, float, bool, None, lists and
dicts — on the caller's thread, so a backend that writes later (on its own thread) gets the
configuration as it was at the call, and no backend has to know a config library.

A value under a key that names a secret (``hub_token``, ``wandb_api_key``, ``password``:
:mod:`rlmetrics.redaction`) is ``"<redacted>"``, its key kept. Text UTF-8 cannot hold and ints
too long to print are replaced (:mod:`rlmetrics.storable`), each costing only itself. A list
of plain values (an array) is one value, kept to its first :data:`MAX_HYPERPARAMS` elements.
A set is a list in one order (numbers by value), whatever order it was built in: one
configuration is one set of values however it was assembled.

Nothing here raises. A value that is not plain becomes its ``str()`` (a ``Path``, a class, a
function), said once; a cycle is cut; nesting stops at 32 levels; at most
:data:`MAX_HYPERPARAMS` values are kept, and what was dropped is said once.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from ._warn import describe_value, warn_once
from .flatten import flatten, key_text
from .redaction import DEFAULT_REDACTION, REDACTED, Redaction
from .storable import printable_int, utf8_text
from .values import as_plain, first_elements, readable_items

__all__ = ["MAX_HYPERPARAMS", "flat_hyperparams", "param_text", "to_hyperparams"]

#: Values (leaves) one configuration may have; the rest are dropped, said once.
MAX_HYPERPARAMS = 10_000
_MAX_DEPTH = 32
_PLAIN = (bool, int, float, str, type(None))


def _container(value: Any) -> Any:
    """``value`` as a mapping or sequence to walk, when it is a configuration object."""
    kind = type(value)
    if kind.__module__.split(".", 1)[0] == "omegaconf":
        omegaconf = sys.modules.get("omegaconf")
        if omegaconf is not None and kind.__name__ in ("DictConfig", "ListConfig"):
            try:
                return omegaconf.OmegaConf.to_container(value, resolve=True)
            except Exception:
                # An interpolation that does not resolve: the raw values, unresolved.
                warn_once(
                    "hyperparams:omegaconf",
                    "rlmetrics: an OmegaConf config did not resolve; its values are logged "
                    "unresolved",
                )
                return omegaconf.OmegaConf.to_container(value, resolve=False)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    if attrs.has(kind):
        return {a.name: getattr(value, a.name, None) for a in attrs.fields(kind)}
    for method in ("model_dump", "to_dict"):  # pydantic 2; transformers' TrainingArguments
        convert = getattr(value, method, None)
        if callable(convert):
            converted = convert()
            if isinstance(converted, Mapping):
                return converted
    if kind.__name__ in ("Namespace", "SimpleNamespace") and hasattr(value, "__dict__"):
        return vars(value)
    return None


def _head(value: Any) -> Any:
    """An array or tensor longer than a list is kept as its first elements, and one more (so
    the cut is seen and said): converting ten million values to keep ten thousand would cost
    seconds. Anything else (a list, a mapping, a config object) as it is."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return value
    if not callable(getattr(value, "tolist", None)):
        return value
    return first_elements(value, MAX_HYPERPARAMS + 1)


#: Returned by the walk once the cap is reached: the caller stops.
_FULL: Any = object()


class _Walk:
    def __init__(self, redact: Redaction) -> None:
        self.redact = redact
        self.leaves = 0
        self.full = False
        self.cut_list = 0
        self.replaced: list[str] = []
        self.on_path: set[int] = set()

    def value(self, value: Any, key: str, depth: int) -> Any:
        if type(value) in _PLAIN:
            return self.leaf(value, key)
        plain = as_plain(_head(value))  # NumPy and torch scalars, arrays as lists
        if isinstance(plain, _PLAIN):
            return self.leaf(plain, key)
        if isinstance(plain, enum.Enum):
            inner = as_plain(plain.value)
            return self.leaf(inner if isinstance(inner, _PLAIN) else plain.name, key)
        try:
            container = _container(plain)
        except Exception:
            container = None
        if container is not None and depth < _MAX_DEPTH:
            if id(plain) in self.on_path:
                warn_once("hyperparams:cycle", "rlmetrics: a configuration contains itself; cut")
                return self.leaf(None, key)
            self.on_path.add(id(plain))
            try:
                if isinstance(container, Mapping):
                    return self.mapping(container, key, depth + 1)
                return self.sequence(container, key, depth + 1)
            finally:
                self.on_path.discard(id(plain))
        try:
            text = str(plain)
        except Exception:
            text = f"<{type(plain).__name__}>"
        warn_once(
            "hyperparams:text",
            f"rlmetrics: hyperparameter {key!r} is {describe_value(plain)}, which trackers "
            "cannot store as it is; it is logged as its text (later ones at DEBUG)",
        )
        return self.leaf(text, key)

    def leaf(self, value: Any, key: str) -> Any:
        """One value of the configuration, counted against the cap."""
        if self.leaves >= MAX_HYPERPARAMS:
            self.full = True
            return _FULL
        self.leaves += 1
        return self.storable(value, key)

    def storable(self, value: Any, key: str) -> Any:
        """``value`` as every tracker can store it (:mod:`rlmetrics.storable`)."""
        if type(value) is str:
            text, replaced = utf8_text(value)
            if replaced:
                self.replaced.append(key)
            return text
        if type(value) is int:
            number = printable_int(value)
            if number is not value:
                self.replaced.append(key)
            return number
        return value

    def mapping(self, node: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for raw, value in readable_items(node):
            if self.full:
                break
            name, replaced = utf8_text(key_text(raw))
            full = f"{path}/{name}" if path else name
            if replaced:
                self.replaced.append(full)
            if value is not None and self.redact.secret(full):
                converted = self.leaf(REDACTED, full)  # never walked: a secret dict too
            else:
                converted = self.value(value, full, depth)
            if converted is _FULL:
                break
            out[name] = converted
        return out

    def sequence(self, items: Any, path: str, depth: int) -> Any:
        converted = self.elements(items, path, depth)
        if isinstance(items, (set, frozenset)) and type(converted) is list:
            # A set's iteration order is its insertion order's and the process's string
            # hashing's: one set would be two configurations (an adapter logging it again, a
            # resumed run's MLflow param "changed"). Its elements go in one order.
            converted.sort(key=_set_order)
        return converted

    def elements(self, items: Any, path: str, depth: int) -> Any:
        try:
            elements = list(items)
        except Exception:
            return self.leaf([], path)
        if len(elements) > MAX_HYPERPARAMS:  # kept to the cap's length, said
            self.cut_list += 1
            del elements[MAX_HYPERPARAMS:]
        plain = [e if type(e) in _PLAIN else as_plain(e) for e in elements]
        if all(isinstance(e, _PLAIN) for e in plain):
            # An array or a list of numbers or text is one value (a tracker shows it as one).
            if self.leaves >= MAX_HYPERPARAMS:
                self.full = True
                return _FULL
            self.leaves += 1
            return [self.storable(e, f"{path}/{i}") for i, e in enumerate(plain)]
        out: list[Any] = []
        for index, value in enumerate(elements):
            converted = self.value(value, f"{path}/{index}", depth)
            if converted is _FULL:
                break
            out.append(converted)
        return out


def _set_order(element: Any) -> tuple[int, float | int, str]:
    """Where a set's (converted) element goes: numbers by value, then everything else (None,
    bools, text, NaN, lists, dicts) by its type and JSON text, so any elements compare."""
    if type(element) in (int, float) and element == element:
        return (0, element, "")
    text = json.dumps(element, sort_keys=True, default=str)
    return (1, 0, f"{type(element).__name__}:{text}")


def to_hyperparams(config: Any, redact: Redaction = DEFAULT_REDACTION) -> dict[str, Any]:
    """``config`` as a nested dict of JSON values (see the module's docstring). A config that
    is not a mapping or a configuration object is reported and stands for ``{}``. A value
    under a key that names a secret (``redact``: :mod:`rlmetrics.redaction`) is
    ``"<redacted>"``."""
    walk = _Walk(redact)
    try:
        container = _container(config)
    except Exception:
        container = None
    if not isinstance(container, Mapping):
        warn_once(
            "hyperparams:not-a-config",
            f"rlmetrics: log_hyperparams takes a dict, dataclass, attrs class, OmegaConf "
            f"config, pydantic model or namespace, got {describe_value(config)}; nothing "
            "logged",
        )
        return {}
    walk.on_path.add(id(config))
    params = walk.mapping(container, "", 1)
    if walk.cut_list:
        warn_once(
            "hyperparams:long-list",
            f"rlmetrics: {walk.cut_list} hyperparameter list(s) or array(s) had more than "
            f"{MAX_HYPERPARAMS} elements; each is logged as its first {MAX_HYPERPARAMS}",
        )
    if walk.replaced:
        warn_once(
            "hyperparams:replaced",
            f"rlmetrics: {len(walk.replaced)} hyperparameter(s) or name(s), first "
            f"{walk.replaced[0]!r}, held text UTF-8 cannot hold (a lone surrogate, logged as "
            "its \\udXXX escape) or an int too long to print (logged as '<int of N "
            "digits>'); the rest of the configuration is logged as it is",
        )
    if walk.full:
        warn_once(
            "hyperparams:too-many",
            f"rlmetrics: a configuration has more than {MAX_HYPERPARAMS} values; the first "
            f"{MAX_HYPERPARAMS} are logged and the rest dropped",
        )
    return params


def flat_hyperparams(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"model": {"lr": 1e-6}}`` → ``{"model/lr": 1e-6}``, for trackers whose parameters are
    one level (MLflow, TensorBoard's hparams); lists stay values."""
    return flatten(params)


def param_text(value: Any) -> str:
    """A plain hyperparameter as the text a tracker whose params are text stores (MLflow's
    params, TensorBoard's HParams for a list or None): a str as it is, anything else its
    ``str()``, each dict inside a list with its keys sorted. A configuration built in another
    order (a restarted job's stage dicts) is then the same text: MLflow refuses a param's
    changed value, and the HParams table would show one configuration as two."""
    if isinstance(value, str):
        return value
    return str(_keys_sorted(value))


def _keys_sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value
