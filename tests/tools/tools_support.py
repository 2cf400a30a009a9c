"""Running the installed ``rlmetrics`` console script as a user runs it (a module with a name
no other test folder uses, so it imports the same whichever folders pytest collects)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["RLMETRICS", "run_cli"]

#: The console script the installed distribution put beside this interpreter.
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))


def run_cli(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``rlmetrics ARGS`` in a subprocess; stdout and stderr captured as text."""
    return subprocess.run(
        [RLMETRICS, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
