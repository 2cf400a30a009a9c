"""What prompt, completion and tool text may leave the process: the text policy.

``off`` (the default): no text is read from a record, so none reaches a span, a row or a file.
``hash``: a digest stands for the text (``sha256:`` and 16 hex digits), so equal texts can be
matched without being shown. ``redacted``: your function turns the text into what may be shown
(``redact(text, field) -> str``; ``field`` is ``prompt``, ``completion``, ``tool_arguments`` or
``tool_result``). ``full``: the text itself. Whatever a policy keeps is cut to
``max_bytes`` of UTF-8 (the samples path's cell cap by default), so a 10 MB completion costs
32 KB at most.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import attrs

from .._warn import describe_value, warn_once
from ..samples import MAX_CELL_BYTES, cut_text

__all__ = ["TEXT_MODES", "Redactor", "TextPolicy", "as_text", "check_max_bytes"]

TEXT_MODES = ("off", "hash", "redacted", "full")

#: ``redact(text, field)``: the text as it may be shown.
Redactor = Callable[[str, str], str]


def as_text(value: Any) -> str | None:
    """What a framework holds of a prompt or completion as text the policy can keep: a str as
    it is, anything else (a conversation's messages, say) as JSON; None for None and for what
    JSON cannot write. Never raises."""
    if value is None or type(value) is str:
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        return None


def _mode(policy: TextPolicy, attribute: attrs.Attribute[Any], mode: Any) -> None:
    if mode not in TEXT_MODES:
        raise ValueError(f"trajectory text policy must be one of {list(TEXT_MODES)}, got {mode!r}")
    if mode == "redacted" and not callable(policy.redact):
        raise ValueError(
            "the 'redacted' text policy needs redact=: a function (text, field) -> str that "
            "returns what may be shown"
        )


def check_max_bytes(value: Any, name: str = "max_bytes") -> None:
    """Raise ``ValueError`` naming ``name`` (the argument as its caller spelt it) unless
    ``value`` is a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{name} must be a positive int (the UTF-8 bytes one kept text may hold), got {value!r}"
        )


def _positive(policy: TextPolicy, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_max_bytes(value)


@attrs.frozen(slots=True)
class TextPolicy:
    """Which text a trajectory keeps, and how (see the module's docstring)."""

    mode: str = attrs.field(default="off", validator=_mode)
    redact: Redactor | None = attrs.field(default=None, eq=False)
    max_bytes: int = attrs.field(default=MAX_CELL_BYTES, validator=_positive)

    @property
    def keeps(self) -> bool:
        """Whether any text is read at all."""
        return self.mode != "off"

    def keep(self, field: str, value: Any) -> str | None:
        """What of ``value`` (a record's ``field``) may be shown; None for no text. Never
        raises: a redactor that raises or returns no string costs that text only."""
        if value is None or self.mode == "off":
            return None
        if isinstance(value, (list, tuple, dict)):
            # A conversation's messages, a message, a tool's arguments: their JSON, as the
            # TRL and Gym integrations keep them (as_text).
            value = as_text(value) or value  # JSON cannot write it: said below
        elif isinstance(value, str):
            value = str.__str__(value)  # a str subclass (NumPy's str_) as the str it is
        if type(value) is not str:
            warn_once(
                f"trajectory:text:{field}",
                f"rlmetrics: trajectory text {field!r} must be a str, got "
                f"{describe_value(value)}; not kept",
            )
            return None
        if self.mode == "hash":
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
            return f"sha256:{digest[:16]}"
        if self.mode == "redacted":
            try:
                shown = self.redact(value, field)  # type: ignore[misc]
            except Exception:
                warn_once(
                    "trajectory:text:redact",
                    "rlmetrics: the trajectory text redactor raised; that text is not kept",
                )
                return None
            if type(shown) is not str:
                warn_once(
                    "trajectory:text:redact-type",
                    f"rlmetrics: the trajectory text redactor returned {describe_value(shown)}, "
                    "not a str; that text is not kept",
                )
                return None
            value = shown
        text, cut = cut_text(value, self.max_bytes)
        if cut:
            warn_once(
                "trajectory:text:cut",
                f"rlmetrics: a trajectory text held more than {self.max_bytes} bytes and was cut "
                "to it; later cuts at DEBUG",
            )
        return text
