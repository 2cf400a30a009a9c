"""rlmetrics.blocks.Block: ``async with`` calls the block's own ``__enter__`` and ``__exit__``,
the exception leaving the block included."""

from __future__ import annotations

import asyncio
from types import TracebackType

import pytest

from rlmetrics.blocks import Block


class Seen(Block):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[object] = []

    def __enter__(self) -> Seen:
        self.calls.append("enter")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.calls.append(exc_type)


def test_async_with_calls_enter_and_exit_with_the_exception() -> None:
    async def main() -> tuple[Seen, Seen]:
        quiet, failing = Seen(), Seen()
        async with quiet as entered:
            assert entered is quiet
        with pytest.raises(KeyError):
            async with failing:
                raise KeyError("x")
        return quiet, failing

    quiet, failing = asyncio.run(main())
    assert quiet.calls == ["enter", None]
    assert failing.calls == ["enter", KeyError]
