"""A tensor-like value for the tests of what converts only what it keeps (``log_samples``'
cells, ``log_hyperparams``' values): it notes how many elements each conversion took."""

from __future__ import annotations

__all__ = ["Tensor"]


class Tensor:
    """Has a length, slices and ``tolist``; ``converted`` gets the element count of each
    conversion to Python values."""

    def __init__(self, n: int, converted: list[int]) -> None:
        self.n, self.converted = n, converted

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: slice) -> Tensor:
        return Tensor(len(range(self.n)[index]), self.converted)

    def item(self) -> float:
        raise ValueError("only one element tensors can be converted to Python scalars")

    def tolist(self) -> list[float]:
        self.converted.append(self.n)
        return [0.5] * self.n
