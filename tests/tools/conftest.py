"""Fixtures of the command-line tests."""

from __future__ import annotations

from stack_support import receiver, stacks

__all__ = ["receiver", "stacks"]
