"""The console backend: one readable line per logged dict, for a quick look."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from .. import hookimpl
from ..configuration import POSITIVE_INTEGER, Option, declare_options
from . import full_key

__all__ = ["ConsoleBackend", "register_backends"]


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


#: A text stream: an object with ``write`` (``sys.stderr``), given in code.
STREAM = Option(
    "a text stream (an object with write(), given in code)",
    lambda v: callable(getattr(v, "write", None)),
)


@declare_options(stream=STREAM, max_keys=POSITIVE_INTEGER)
class ConsoleBackend:
    """Prints ``step N | prefix/key=value ...`` to ``stream`` (stdout by default)."""

    #: A print: on the caller's thread, in order with the loop's own output.
    inline = True

    def __init__(self, stream: TextIO | None = None, max_keys: int = 50) -> None:
        self.stream = stream
        self.max_keys = max_keys

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        items = [f"{full_key(prefix, str(k))}={_format(v)}" for k, v in metrics.items()]
        more = len(items) - self.max_keys
        shown = items[: self.max_keys] + ([f"... {more} more"] if more > 0 else [])
        print(f"step {step} | " + " ".join(shown), file=self.stream or sys.stdout, flush=True)

    def finish(self) -> None:
        (self.stream or sys.stdout).flush()


@hookimpl
def register_backends(register: Any) -> None:
    register("console", ConsoleBackend)
