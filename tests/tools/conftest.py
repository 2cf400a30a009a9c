"""Fixtures of the command-line tests."""

from __future__ import annotations

from stack_support import stacks

__all__ = ["stacks"]
