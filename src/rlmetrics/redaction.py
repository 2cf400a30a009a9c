"""Secrets a user logs, kept out of every tracker: the values under keys that name a secret.

A training configuration often carries a credential: ``hub_token`` in transformers'
``TrainingArguments`` (and every TRL config built on it), a ``wandb_api_key`` or a database
``password`` in a Hydra config. Logged as given, it would be written to every tracker, where
anyone who can read the run can read it. So hyperparameters, sample columns and span tags
under a key that names a secret are logged as :data:`REDACTED`, the key kept (a run's
configuration loses no key). The rule reads the key's last part (after the last ``/`` or
``.``), lowercased, with ``-`` and spaces read as ``_``. It names a secret when it:

* is ``token`` or ends in ``_token`` (``hub_token``, ``hf_token``, ``access_token``), as
  transformers' ``TrainingArguments.to_dict()`` masks them — except a tokenizer's special
  tokens (:data:`SPECIAL_TOKENS`: ``pad_token``, ``eos_token``...; TRL's ``SFTConfig`` has
  ``pad_token`` and ``eos_token``), which are text the model reads, not credentials;
* ends in ``api_key``, ``apikey``, ``secret_key``, ``access_key`` or ``private_key``;
* is or ends in ``password``, ``passwd``, ``passphrase``, ``secret`` or ``credentials``, or in
  the HTTP headers ``authorization`` and ``cookie``.

Counts and ids are not secrets: ``max_new_tokens``, ``pad_token_id``, ``num_key_value_heads``
and ``reward_key`` do not match. A value that is None stays None: nothing is hidden there.
``Logger(redact=[...])`` (or ``[logger] redact`` in the configuration file) adds names or
glob patterns (matched against the same last part, lowercased); ``redact=False`` turns the rule
off. Span tags follow the configuration's setting (they are not a Logger's).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable
from typing import Any

import attrs

from ._process_state import resets_process_state

__all__ = [
    "DEFAULT_REDACTION",
    "REDACTED",
    "SPECIAL_TOKENS",
    "Redaction",
    "configured_redaction",
    "names_a_secret",
    "redaction",
]

#: What a secret's value is logged as.
REDACTED = "<redacted>"
#: ``<name>_token`` keys that are a tokenizer's special tokens (text), never credentials.
SPECIAL_TOKENS = frozenset(
    {
        "pad",
        "eos",
        "bos",
        "unk",
        "sep",
        "cls",
        "mask",
        "image",
        "video",
        "audio",
        "boi",
        "eoi",
        "start",
        "end",
    }
)
_KEY_ENDINGS = ("api_key", "apikey", "secret_key", "access_key", "private_key")
#: ``authorization`` and ``cookie``: the HTTP headers that carry a bearer token or a session,
#: which an agent's request logged with its rollout brings along.
_WORD_ENDINGS = (
    *("password", "passwd", "passphrase", "secret", "credentials", "authorization", "cookie"),
)


def _last_part(key: str) -> str:
    last = key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    return last.lower().replace("-", "_").replace(" ", "_")


@functools.lru_cache(maxsize=4096)
def names_a_secret(key: str) -> bool:
    """Whether ``key`` names a secret under the default rule (see the module's docstring)."""
    last = _last_part(key)
    if last == "token":
        return True
    if last.endswith("_token"):
        return last[: -len("_token")] not in SPECIAL_TOKENS
    if last.endswith(_KEY_ENDINGS):
        return True
    return any(last == word or last.endswith(f"_{word}") for word in _WORD_ENDINGS)


@attrs.frozen
class Redaction:
    """Which keys name a secret: the default rule (unless ``enabled`` is False) and the
    ``extra`` names or glob patterns."""

    enabled: bool = True
    extra: tuple[str, ...] = ()

    def secret(self, key: str) -> bool:
        """Whether a value under ``key`` is logged as :data:`REDACTED`."""
        if not self.enabled:
            return False
        if names_a_secret(key):
            return True
        if self.extra:
            last = _last_part(key)
            return any(fnmatch.fnmatchcase(last, pattern) for pattern in self.extra)
        return False

    def value(self, key: str, value: Any) -> Any:
        """``value``, or :data:`REDACTED` when ``key`` names a secret and there is a value."""
        return REDACTED if value is not None and self.secret(key) else value


#: The default rule, on: what a Logger uses unless told otherwise.
DEFAULT_REDACTION = Redaction()
_OFF = Redaction(enabled=False)


def redaction(setting: bool | Iterable[str] | Redaction | None) -> Redaction:
    """The rule a ``redact`` setting asks for: True or None the default rule, False none, a
    list of names or glob patterns the default rule plus those. Anything else is a mistake,
    raised here with what to write instead."""
    if setting is None or setting is True:
        return DEFAULT_REDACTION
    if setting is False:
        return _OFF
    if isinstance(setting, Redaction):
        return setting
    if not isinstance(setting, (str, bytes)):
        try:
            extra = tuple(setting)
        except TypeError:
            extra = ()
        else:
            if extra and all(isinstance(p, str) and p for p in extra):
                return Redaction(extra=tuple(p.lower() for p in extra))
    raise ValueError(
        f"redact is True (the default rule), False (off) or a list of key names or glob "
        f"patterns to redact as well (['my_credential', '*_pat']), got {setting!r}"
    )


_configured: Redaction | None = None


def configured_redaction() -> Redaction:
    """The rule the configuration's ``[logger] redact`` asks for (default: the default rule),
    read once per process: what span tags follow."""
    global _configured
    if _configured is None:
        try:
            from .configuration import configured

            value, _ = configured().logger.get("redact", (None, ""))
            _configured = redaction(value)
        except Exception:
            _configured = DEFAULT_REDACTION  # a bad file is said when a Logger starts
    return _configured


@resets_process_state
def _forget_configured() -> None:
    global _configured
    _configured = None
