"""YAML for the files rlmetrics writes for Prometheus (rules, tests, configuration), without a
YAML library: block mappings and lists, plain keys where they are identifiers, every string
double-quoted with JSON's escapes (which YAML reads the same way) plus ``\\uXXXX`` for the
characters YAML does not allow raw or reads as line breaks, numbers and booleans as JSON writes
them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["render_yaml"]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# JSON leaves these raw; YAML refuses them (DEL, C1 controls, surrogates, non-characters) or
# folds them as line breaks (NEL, LS, PS).
_NOT_YAML = re.compile("[\x7f-\x9f\ud800-\udfff\ufffe\uffff\u2028\u2029]")


def _quoted(text: str) -> str:
    return _NOT_YAML.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def render_yaml(value: Any, indent: int = 0) -> str:
    """``value`` (mappings, lists, strings, numbers, booleans) as block YAML; strings are
    double-quoted with JSON's escapes; an empty mapping or list is written inline."""
    pad = "  " * indent
    if isinstance(value, Mapping):
        if not value:
            return pad + "{}\n"
        lines = []
        for key, item in value.items():
            head = f"{pad}{_key(str(key))}:"
            if _is_block(item):
                lines.append(head + "\n" + render_yaml(item, indent + 1))
            else:
                lines.append(f"{head} {_scalar(item)}\n")
        return "".join(lines)
    if isinstance(value, (list, tuple)):
        if not value:
            return pad + "[]\n"
        lines = []
        for item in value:
            if _is_block(item):
                body = render_yaml(item, indent + 1)
                lines.append(f"{pad}- " + body[len(pad) + 2 :])
            else:
                lines.append(f"{pad}- {_scalar(item)}\n")
        return "".join(lines)
    return pad + _scalar(value) + "\n"


# Plain words a YAML 1.1 reader takes for booleans or null.
_RESERVED = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})


def _key(key: str) -> str:
    plain = _PLAIN_KEY.fullmatch(key) and key.lower() not in _RESERVED
    return key if plain else _quoted(key)


def _is_block(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple)) and bool(value)


def _scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # YAML 1.1 readers (PyYAML) take "1e-05" for a string: give the mantissa a point.
        mantissa, e, exponent = json.dumps(value).partition("e")
        if e and "." not in mantissa:
            mantissa += ".0"
        return mantissa + e + exponent
    return _quoted(str(value))
