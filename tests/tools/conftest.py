"""Fixtures for the tools' tests: the installed ``rlmetrics`` console script, run as a user
runs it, and Debian's real Prometheus server on 127.0.0.1.

Test modules here are named ``test_tools_*`` so none collides with another folder's when CI
collects every test folder in one pytest run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from exporters._peers import REQUIRE_PROMETHEUS_ENV, PrometheusServer

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


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[[tuple[str, int]], PrometheusServer]]:
    """``prometheus_server((host, port))`` starts Debian's prometheus scraping that target
    every second. Skips without the binary unless ``RLMETRICS_REQUIRE_PROMETHEUS=1`` (CI)."""
    binary = shutil.which("prometheus")
    if binary is None:
        reason = (
            "the 'prometheus' server binary is not on PATH (Debian: apt-get install -y "
            "--no-install-recommends prometheus)"
        )
        if os.environ.get(REQUIRE_PROMETHEUS_ENV) == "1":
            pytest.fail(f"{REQUIRE_PROMETHEUS_ENV}=1 but {reason}")
        pytest.skip(reason)
    started: list[PrometheusServer] = []

    def start(target: tuple[str, int]) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = PrometheusServer(binary, workdir)
        started.append(server)
        return server.start(target)

    try:
        yield start
    finally:
        for server in started:
            server.stop()
