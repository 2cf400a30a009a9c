"""Configuration mistakes, found where the configuration is given.

A misspelled option or a plugin name that matches nothing is a mistake in what the user
wrote, so it fails at once, where it was written (``Logger(...)``, ``rlmetrics.start(...)``, a
configuration file or an environment variable), with the names that would be valid. A failure
of the world — no credentials, a store gone, a path that cannot be written — is no mistake and
keeps degrading with a warning, as it always did.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["check_options", "check_plugin_names", "option_names", "suggest"]


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'path'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def option_names(factory: Callable[..., Any], provided: Iterable[str] = ()) -> list[str] | None:
    """The keyword options ``factory`` takes, without those rlmetrics itself passes
    (``provided``); None when it takes any keyword (``**options``) or its signature cannot be
    read, so nothing can be checked."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    skip = set(provided)
    return [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in skip
        and not p.name.startswith("_")
    ]


def check_options(
    what: str,
    name: str,
    factory: Callable[..., Any],
    options: Any,
    provided: Iterable[str] = (),
) -> dict[str, Any]:
    """``options`` as a dict, after checking each is an option ``factory`` takes; raises
    ``TypeError`` naming the wrong one, the closest valid one and all of them.

    ``what`` and ``name`` say whose options they are (``backend``, ``'jsonl'``); ``provided``
    are the parameters rlmetrics passes itself (the run's identity, the export interval)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"{what} {name!r}: options are a mapping of option names to values, "
            f"got a {type(options).__name__}"
        )
    valid = option_names(factory, provided)
    if valid is not None:
        for option in options:
            if option not in valid:
                raise TypeError(
                    f"{what} {name!r} has no option {option!r}{suggest(str(option), valid)}; "
                    f"its options: {', '.join(valid) or 'none'}"
                )
    return dict(options)


def check_plugin_names(names: Iterable[str] | None, source: str, known: Mapping[str, str]) -> None:
    """Raise ``ValueError`` if any of ``names`` (an allow- or deny-list from ``source``) is no
    installed plugin: ``known`` maps each normalised entry-point and distribution name to how
    it is spelled."""
    if names is None:
        return
    from .plugins import normalize

    unknown = [name for name in names if name.strip() and normalize(name.strip()) not in known]
    if unknown:
        hints = "; ".join(
            f"{name.strip()!r}{suggest(normalize(name.strip()), known)}" for name in unknown
        )
        raise ValueError(
            f"{source} names no installed plugin: {hints}. Installed (entry-point or "
            f"distribution names): {', '.join(sorted(set(known.values())))}"
        )
