"""Metric, param and tag names MLflow accepts, without two keys landing on one name.

MLflow refuses a name unless it matches ``^[/\\w.\\- :]*$`` (no ``:`` on Windows), is at most
250 characters, and is a normalised relative path (no empty, ``.`` or ``..`` segments, no
leading or trailing ``/``, not starting with ``..``), because some stores use the name as a
file path. A refused name fails the whole ``log_batch`` call, so every key is mapped first.

The mapping is a pure function, so the same key gets the same MLflow name in every run and
runs stay comparable:

* a name MLflow already accepts is kept exactly as it is (``train/loss`` stays ``train/loss``);
* any other name is made valid readably (a refused character becomes ``_``, a bad path
  segment becomes ``_``) and gets ``-`` plus 8 hex digits of a hash of the *original* key,
  so ``acc@1`` and ``acc#1`` (both ``acc_1`` when cleaned) stay two series, and neither takes
  the name of a real ``acc_1`` key.

A kept name can only collide with a hashed one if a key literally spells out another key's
cleaned form plus its hash; :class:`KeyMap` catches even that within a run.
"""

from __future__ import annotations

import hashlib
import itertools
import posixpath
import re
import sys

from rlmetrics import warn_once

__all__ = ["MAX_KEY_LENGTH", "KeyMap", "is_valid_key", "mlflow_key"]

#: ``mlflow.utils.validation.MAX_ENTITY_KEY_LENGTH`` in mlflow 3.x.
MAX_KEY_LENGTH = 250
_DIGEST_CHARS = 8
# mlflow.utils.validation.validate_param_and_metric_name; Windows stores also refuse ":".
# Checked per character: MLflow's own "^...$" pattern lets a trailing newline through.
# Each KeyMap's number: a run's first rename is said once per run (a KeyMap is a run's).
_maps = itertools.count()
_ALLOWED = re.compile(r"[/\w.\- ]" if sys.platform == "win32" else r"[/\w.\- :]")


def _path_ok(name: str) -> bool:
    """mlflow's ``path_not_unique`` check, inverted."""
    norm = posixpath.normpath(name)
    return not (norm != name or norm == "." or norm.startswith("..") or norm.startswith("/"))


def is_valid_key(name: str) -> bool:
    """Whether MLflow accepts ``name`` as a metric, param or tag key as it is."""
    return (
        0 < len(name) <= MAX_KEY_LENGTH
        and all(_ALLOWED.fullmatch(ch) for ch in name)
        and _path_ok(name)
    )


def _clean_segment(segment: str) -> str:
    cleaned = "".join(ch if _ALLOWED.fullmatch(ch) else "_" for ch in segment)
    # Empty, "." and ".." segments would make the name a non-normal path.
    return "_" if cleaned in ("", ".", "..") else cleaned


def mlflow_key(key: str, digest_chars: int = _DIGEST_CHARS) -> str:
    """The MLflow name for ``key``: ``key`` itself when valid, else a cleaned, hashed form."""
    if is_valid_key(key):
        return key
    base = "/".join(_clean_segment(part) for part in key.split("/"))
    if base.startswith(".."):
        base = "_" + base
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    suffix = "-" + digest[:digest_chars]
    # Truncating keeps the (readable) start; the suffix keeps truncated keys apart. The
    # suffix is never a path segment of its own that could be "." or "..".
    base = base[: MAX_KEY_LENGTH - len(suffix)]
    return base + suffix


class KeyMap:
    """Per-run memo of ``key → MLflow name`` that refuses to put two keys on one name.

    A clash (only possible for a key crafted to look like another's hashed name) gets a longer
    hash; if even that is taken, the later key is dropped with a warning rather than mixed
    into the other key's series.
    """

    def __init__(self) -> None:
        self._names: dict[str, str | None] = {}
        self._owners: dict[str, str] = {}
        self._number = next(_maps)

    def __call__(self, key: str) -> str | None:
        name = self._names.get(key, "")
        if name != "":
            return name
        resolved: str | None = None
        for candidate in (mlflow_key(key), mlflow_key("\0" + key, digest_chars=32)):
            owner = self._owners.setdefault(candidate, key)
            if owner == key:
                resolved = candidate
                break
        if resolved is None:
            warn_once(
                f"mlflow:key-clash:{key}",
                f"rlmetrics-mlflow: key {key!r} maps to a name another key already uses; "
                "it is not logged to MLflow (the JSONL backend still has it)",
            )
        elif resolved != key:
            # One warning per run explains the rule; every later rename is at DEBUG.
            warn_once(
                f"mlflow:key-renamed:{self._number}",
                f"rlmetrics-mlflow: key {key!r} is logged to MLflow as {resolved!r} "
                "(MLflow allows only letters, digits, '_', '-', '.', ' ', ':' and '/' in a "
                "normalised relative path of at most 250 characters); further renames are "
                "logged at DEBUG",
            )
        self._names[key] = resolved
        return resolved
