"""A run's configuration as plain values: what ``Logger.log_hyperparams`` hands the backends.

Training scripts keep their configuration in a dict, a dataclass, an attrs class, an OmegaConf
``DictConfig`` (Hydra), a pydantic model, an ``argparse.Namespace`` or an object with
``to_dict()`` (transformers' ``TrainingArguments``), nested in any mix. :func:`to_hyperparams`
turns any of them into one nested dict of JSON values — str, int, float, bool, None, lists and
dicts — on the caller's thread, so a backend that writes later (on its own thread) gets the
configuration as it was at the call, and no backend has to know a config library.

Nothing here raises. A value that is not plain becomes its ``str()`` (a ``Path``, a class, a
function), said once; a cycle is cut; nesting stops at 32 levels; at most
:data:`MAX_HYPERPARAMS` values are kept, and what was dropped is said once.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from ._warn import describe_value, warn_once
from .flatten import flatten, key_text
from .values import as_plain, readable_items

__all__ = ["MAX_HYPERPARAMS", "flat_hyperparams", "to_hyperparams"]

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


class _Walk:
    def __init__(self) -> None:
        self.leaves = 0
        self.full = False
        self.on_path: set[int] = set()

    def value(self, value: Any, key: str, depth: int) -> Any:
        if type(value) in _PLAIN:
            return value
        plain = as_plain(value)  # NumPy and torch scalars, arrays as lists
        if isinstance(plain, _PLAIN):
            return plain
        if isinstance(plain, enum.Enum):
            inner = as_plain(plain.value)
            return inner if isinstance(inner, _PLAIN) else plain.name
        try:
            container = _container(plain)
        except Exception:
            container = None
        if container is not None and depth < _MAX_DEPTH:
            if id(plain) in self.on_path:
                warn_once("hyperparams:cycle", "rlmetrics: a configuration contains itself; cut")
                return None
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
        return text

    def _count(self) -> bool:
        if self.leaves >= MAX_HYPERPARAMS:
            self.full = True
            return False
        self.leaves += 1
        return True

    def mapping(self, node: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for raw, value in readable_items(node):
            if self.full:
                break
            name = key_text(raw)
            full = f"{path}/{name}" if path else name
            if not _is_branch(value) and not self._count():
                break
            out[name] = self.value(value, full, depth)
        return out

    def sequence(self, items: Any, path: str, depth: int) -> list[Any]:
        out: list[Any] = []
        try:
            elements = list(items)
        except Exception:
            return out
        for index, value in enumerate(elements):
            if self.full or (not _is_branch(value) and not self._count()):
                break
            out.append(self.value(value, f"{path}/{index}", depth))
        return out


def _is_branch(value: Any) -> bool:
    return type(value) not in _PLAIN and isinstance(value, (Mapping, list, tuple))


def to_hyperparams(config: Any) -> dict[str, Any]:
    """``config`` as a nested dict of JSON values (see the module's docstring). A config that
    is not a mapping or a configuration object is reported and stands for ``{}``."""
    walk = _Walk()
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
