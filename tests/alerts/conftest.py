"""Fixtures of the alert tests: ``promtool test rules`` on a rules file and its tests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def promtool_test_rules(
    promtool: str, tmp_path: Path
) -> Callable[[str, str], subprocess.CompletedProcess[str]]:
    """``promtool_test_rules(rules_yaml, tests_yaml)``: both written as ``rules.yml`` and
    ``tests.yml`` (which names ``rules.yml``) and run by ``promtool test rules``; skips
    without promtool (fails in CI)."""

    def run(rules: str, tests: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "rules.yml").write_text(rules)
        (tmp_path / "tests.yml").write_text(tests)
        return subprocess.run(
            [promtool, "test", "rules", "tests.yml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run
