"""The demo's progress: a tqdm bar on a terminal, one plain line per step otherwise (a CI log
or a pipe gets readable lines, not carriage returns)."""

from __future__ import annotations

from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """``update(step, **fields)`` once per step; ``close()`` at the end."""

    def __init__(self, total: int, stream: TextIO, *, bar: bool | None = None) -> None:
        self.total = total
        self.stream = stream
        use_bar = stream.isatty() if bar is None else bar
        self._bar: Any = None
        if use_bar:
            try:
                from tqdm import tqdm
            except ImportError:  # the demo extra brings it; plain lines without it
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, file=stream, unit="step", dynamic_ncols=True)

    def update(self, step: int, **fields: float) -> None:
        text = " ".join(f"{key}={value:.3g}" for key, value in fields.items())
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)
        else:
            self.stream.write(f"step {step}/{self.total} {text}\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
