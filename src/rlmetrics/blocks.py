"""A context manager that ``async with`` takes as it is: for blocks whose entering and leaving
never wait (timing a call, opening a trajectory), so one class serves ``with`` and
``async with`` and no event loop pays for a coroutine that awaits nothing."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

__all__ = ["Block"]

_Self = TypeVar("_Self", bound="Block")


class Block:
    """Subclass it and write ``__enter__`` and ``__exit__``; ``async with`` calls them."""

    __slots__ = ()

    def __enter__(self: _Self) -> _Self:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def __aenter__(self: _Self) -> _Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
