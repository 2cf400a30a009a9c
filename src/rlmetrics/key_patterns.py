"""The key patterns rlmetrics reads declarations in: a logged key (or a prefix) with ``*``
standing for one path segment (no ``/``) and ``**`` for any rest, ``/`` included
(``efficiency/**``; ``**`` alone is every key, and as a prefix every prefix, the empty one
included).

:func:`rlmetrics.declare_keys`, a route's ``reads`` (:mod:`rlmetrics.routing`) and
``@rlmetrics.hookimpl(prefixes=..., keys=...)`` all take them; :mod:`rlmetrics.known_keys`
decides with them which logged keys are known.
"""

from __future__ import annotations

import functools
import re

__all__ = ["ANY", "is_pattern", "pattern_regex"]

#: The pattern of every key (or, as a prefix, every prefix).
ANY = "**"


@functools.lru_cache(maxsize=1024)
def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression whose ``fullmatch`` is ``pattern``'s (compiled once each)."""
    if pattern == ANY:
        return re.compile(".*", re.DOTALL)
    out = []
    for part in re.split(r"(\*\*|\*)", pattern):
        if part == "**":
            out.append(".+")
        elif part == "*":
            out.append("[^/]+")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out), re.DOTALL)


def is_pattern(text: str) -> bool:
    """Whether ``text`` is a pattern rather than one key."""
    return "*" in text
