"""Leaving a block that set a context variable, from whichever context it is left in."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar, Token
from typing import TypeVar

__all__ = ["reset_context_var"]

_T = TypeVar("_T")


def reset_context_var(var: ContextVar[_T], token: Token[_T]) -> None:
    """``var.reset(token)``, except when the block is left in another context than the one it
    was entered in (an async generator closed by another task, as asyncio's finalizer of an
    abandoned streaming response does): there the value was never set, so there is nothing to
    undo, where ``reset`` would raise ``ValueError`` into the caller."""
    with contextlib.suppress(ValueError):
        var.reset(token)
