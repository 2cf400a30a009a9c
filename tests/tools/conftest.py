"""Fixtures for the tools' tests: Debian's real Prometheus server on 127.0.0.1 (the installed
``rlmetrics`` console script is run through ``tools_support.run_cli``).

Test modules here are named ``test_tools_*`` so none collides with another folder's when CI
collects every test folder in one pytest run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from exporters._peers import REQUIRE_PROMETHEUS_ENV, PrometheusServer


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
