from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_test_dists import install

from rlmetrics.cli import main


def test_json_lists_the_builtins_as_entry_points(capsys: Any) -> None:
    assert main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["jsonl"]["distribution"] == "rlmetrics"
    assert listed["jsonl"]["hooks"] == ["register_backends"]
    assert listed["jsonl"]["builtin"] is True
    assert listed["efficiency"]["status"] == "loaded"
    assert listed["efficiency"]["hooks"] == ["on_efficiency_summary", "register_phases"]
    assert listed["efficiency"]["series"] == ["rl.efficiency.seconds", "rl.efficiency.pct"]
    for exporter in ("otlp", "prometheus", "console_exporter"):
        assert listed[exporter]["hooks"] == ["register_exporters"]


def test_text_has_a_header_row_and_says_what_a_plugin_offers(capsys: Any) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "DISTRIBUTION", "DETAIL"]
    setup = next(line for line in lines if line.startswith("setup "))
    assert "loaded" in setup and "hooks: on_setup_timing; declares 1 series" in setup


def test_a_plugin_that_only_declares_shows_its_series(
    capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        "declares-only",
        {
            "declares_only.py": """
                import rlmetrics

                rlmetrics.declare("decl", [rlmetrics.MetricSpec("decl.only", rlmetrics.Kind.GAUGE)])
            """
        },
        {"declares_only": "declares_only"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["plugins"]) == 0
    finally:
        sys.modules.pop("declares_only", None)
    row = next(line for line in capsys.readouterr().out.splitlines() if "declares_only" in line)
    assert "declares 1 series" in row and "hooks" not in row


def _cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``rlmetrics ARGS`` as a user runs it, with ``site``'s distributions installed: what
    reaches the terminal, the log lines included."""
    code = "import sys; from rlmetrics.cli import main; sys.exit(main(sys.argv[1:]))"
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A site with two broken plugins: one raising at import, one whose hook pluggy refuses
    (a reason of several lines)."""
    install(
        tmp_path,
        "broken-import",
        {"broken_import.py": "raise RuntimeError('no GPU driver')\n"},
        {"broken_import": "broken_import"},
    )
    install(
        tmp_path,
        "bad-hook",
        {
            "bad_hook.py": """
                import rlmetrics

                @rlmetrics.hookimpl
                def log_metrics(metrics, step, prefix, colour):
                    pass
            """
        },
        {"bad_hook": "bad_hook"},
    )
    return tmp_path


def test_a_failure_is_one_row_and_no_traceback(broken: Path) -> None:
    done = _cli(broken, "plugins")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    [hook_row] = [line for line in lines if line.startswith("bad_hook ")]
    assert "failed" in hook_row and "invalid hooks" in hook_row
    [import_row] = [line for line in lines if line.startswith("broken_import ")]
    assert "import failed: RuntimeError('no GPU driver')" in import_row
    # Every line of the table is a row: NAME STATUS ... (no continuation lines).
    statuses = {"loaded", "failed", "disabled", "shadowed"}
    rows = [line for line in lines[1:] if line.strip()]
    assert all(line.split()[1] in statuses for line in rows[:-1]), done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert "--verbose" in rows[-1]  # the last line says how to see more


def test_verbose_shows_each_traceback_once(broken: Path) -> None:
    done = _cli(broken, "plugins", "--verbose")
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).count("Traceback") == 1
    assert "RuntimeError: no GPU driver" in done.stdout + done.stderr
    assert "can not be found in the hookspec" in done.stdout + done.stderr  # the whole reason


def test_check_names_a_failed_plugin_in_one_line_without_its_traceback(broken: Path) -> None:
    done = _cli(broken, "check")
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert len([line for line in done.stdout.splitlines() if "broken_import" in line]) == 1
    verbose = _cli(broken, "check", "--verbose")
    assert verbose.returncode == 1
    assert (verbose.stdout + verbose.stderr).count("Traceback") == 1


def test_a_key_map_another_plugin_offers_under_the_same_name_is_listed_shadowed(
    tmp_path: Path,
) -> None:
    """A third party's key map named like a built-in one lost, as a backend does; the
    listing showed backends, exporters and demo parts that lost, never a key map."""
    install(
        tmp_path,
        "acme-maps",
        {
            "acme_maps.py": """
                import rlmetrics

                @rlmetrics.hookimpl
                def register_key_maps(register):
                    register(rlmetrics.KeyMap("trl", [rlmetrics.KeyRule("kl")]))
            """
        },
        {"acme_maps": "acme_maps"},
    )
    done = _cli(tmp_path, "plugins")
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if "shadowed" in line]
    assert row.split()[:3] == ["trl", "shadowed", "acme-maps"]
    assert "key map 'trl' of 'acme_maps'" in row


def test_a_plugin_that_only_declares_keys_shows_them(
    capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin whose whole effect is declaring logged keys known read "no hooks, no series",
    as if it did nothing."""
    install(
        tmp_path,
        "keys-only",
        {
            "keys_only.py": """
                import rlmetrics

                rlmetrics.declare_keys(["acme/**"], backend_only=True)
            """
        },
        {"keys_only": "keys_only"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["plugins"]) == 0
    finally:
        sys.modules.pop("keys_only", None)
    row = next(line for line in capsys.readouterr().out.splitlines() if "keys_only" in line)
    assert row.split(None, 4)[4] == "declares 1 known key pattern"
