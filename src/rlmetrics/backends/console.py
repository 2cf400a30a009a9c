"""The console backend: one readable line per logged dict, for a quick look; on request, the
same row as one JSON object, for an agent or a script reading the job's log."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO

from .. import hookimpl
from ..configuration import POSITIVE_INTEGER, Option, declare_options
from ..identity import RunIdentity, new_run_id
from ..values import as_real
from . import full_key
from .jsonl import metrics_line

__all__ = ["ConsoleBackend", "ConsoleFormat", "register_backends"]

#: ``text``: the human line; ``json``: the JSONL row instead; ``both``: the human line, then
#: the JSONL row.
ConsoleFormat = Literal["text", "json", "both"]
_FORMATS: tuple[ConsoleFormat, ...] = ("text", "json", "both")


def _format(value: Any) -> str:
    if type(value) is not bool and type(value) is not str:
        # A torch or NumPy scalar, a 0-d array, a Decimal: the number it stands for, as a
        # float prints, not its str() ("tensor(0.1235, device='cuda:0', grad_fn=...)").
        number = as_real(value)
        if number is not None:
            value = number
    if isinstance(value, float):
        return f"{value:.6g}"
    try:
        return _one_line(str(value))
    except Exception:  # a value whose str() raises costs only itself
        return f"<unprintable {type(value).__name__}>"


def _one_line(text: str) -> str:
    """``text`` with each character that is not printable (a line break, a terminal's escape
    sequence) as its escape, so a row stays one line and reaches the terminal as text."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _write(out: TextIO, text: str) -> None:
    """``text`` to ``out``; a character its encoding lacks (an ASCII or cp1252 console) as its
    escape, instead of the line lost to UnicodeEncodeError."""
    try:
        out.write(text)
    except UnicodeEncodeError:
        encoding = getattr(out, "encoding", None) or "ascii"
        out.write(text.encode(encoding, "backslashreplace").decode(encoding))


#: A text stream: an object with ``write`` (``sys.stderr``), given in code.
STREAM = Option(
    "a text stream (an object with write(), given in code)",
    lambda v: callable(getattr(v, "write", None)),
)


#: How each row is printed (:data:`ConsoleFormat`).
FORMAT = Option("one of 'text', 'json', 'both'", lambda v: v in _FORMATS)


@declare_options(stream=STREAM, max_keys=POSITIVE_INTEGER, format=FORMAT)
class ConsoleBackend:
    """Prints ``step N | prefix/key=value ...`` to ``stream`` (stdout by default).

    ``format="json"`` prints, instead, the row the JSONL backend writes
    (``{"time", "run_id", "step", "prefix", "metrics"}``, every key, on one line), so a job's
    log carries everything the tracker has, in a form an agent parses; ``format="both"``
    prints the human line and then that row.
    """

    #: A print: on the caller's thread, in order with the loop's own output.
    inline = True

    def __init__(
        self,
        stream: TextIO | None = None,
        max_keys: int = 50,
        format: ConsoleFormat = "text",
        identity: RunIdentity | None = None,
    ) -> None:
        if format not in _FORMATS:
            raise ValueError(
                f"console format must be one of {list(_FORMATS)}, got {format!r}: "
                "Logger(backends={'console': {'format': 'json'}})"
            )
        self.stream = stream
        self.max_keys = max_keys
        self.format = format
        self.run_id = (identity or RunIdentity(new_run_id())).run_id

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        out = self.stream or sys.stdout
        if self.format != "json":
            items = [
                f"{_one_line(full_key(prefix, str(k)))}={_format(v)}" for k, v in metrics.items()
            ]
            more = len(items) - self.max_keys
            shown = items[: self.max_keys] + ([f"... {more} more"] if more > 0 else [])
            _write(out, f"step {step} | " + " ".join(shown) + "\n")
        if self.format != "text":
            out.write(metrics_line(self.run_id, metrics, step, prefix))
        out.flush()

    def finish(self) -> None:
        (self.stream or sys.stdout).flush()


@hookimpl
def register_backends(register: Any) -> None:
    register("console", ConsoleBackend)
