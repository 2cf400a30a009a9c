from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rlmetrics_test_dists import install

from rlmetrics.cli import main
from rlmetrics.cli.metrics import metrics_markdown
from rlmetrics.registry import default_registry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_json_lists_every_declared_series(capsys: Any) -> None:
    assert main(["metrics", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["rl.setup.duration"]["attributes"] == {"rl.setup.phase": None}
    assert listed["rl.efficiency.pct"]["unit"] == "%"
    assert listed["rl.reward.mean"]["key"] == "reward"


def test_text_has_a_header_row(capsys: Any) -> None:
    assert main(["metrics"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "UNIT", "ACROSS", "RANKS", "DECLARED", "BY"]
    assert any(line.startswith("rl.reward.mean ") for line in lines)


def test_docs_catalogue_is_current() -> None:
    """docs/metrics.md is exactly what the installed plugins declare: regenerate it with
    `rlmetrics metrics --markdown > docs/metrics.md` in an environment with every
    distribution of this repository installed (any tox SDK env)."""
    generated = metrics_markdown(default_registry().declared())
    assert DOCS.read_text() == generated, (
        "docs/metrics.md is stale: regenerate it with "
        "`rlmetrics metrics --markdown > docs/metrics.md`"
    )


def _broken_site(tmp_path: Path, monkeypatch: Any) -> None:
    """A distribution whose spec is wrong: its plugin fails at import, its series unlisted."""
    install(
        tmp_path,
        "acme-badunit",
        {
            "acme_badunit.py": """
                import rlmetrics

                rlmetrics.declare("acme.bad", [
                    rlmetrics.MetricSpec("acme.latency", rlmetrics.Kind.GAUGE, unit="per batch")
                ])
            """
        },
        {"acme_badunit": "acme_badunit"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RLMETRICS_PLUGINS", raising=False)


def test_a_plugin_that_failed_is_said_once_under_the_list_without_a_traceback(
    tmp_path: Path, monkeypatch: Any, capsys: Any, caplog: Any
) -> None:
    _broken_site(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert main(["metrics"]) == 0
    assert caplog.records == []  # no warning with its traceback: the line below says it
    out, err = capsys.readouterr()
    assert "acme.latency" not in out
    assert out.splitlines()[-1] == (
        "1 plugin(s) failed to load, so their series are not listed (acme_badunit); "
        "`rlmetrics plugins --verbose` says why"
    )
    assert "Traceback" not in out + err


def test_json_and_markdown_say_a_failed_plugin_on_stderr(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    _broken_site(tmp_path, monkeypatch)
    assert main(["metrics", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout stays the document
    assert "failed to load, so their series are not listed (acme_badunit)" in err
    assert main(["metrics", "--markdown"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Metric catalogue") and "(acme_badunit)" in err


def test_a_description_with_a_pipe_or_a_line_break_keeps_its_row_in_the_catalogue() -> None:
    """The family pages' tables escaped a ``|`` in a description; the catalogue
    (``rlmetrics metrics --markdown``) did not, so a plugin's description such as
    "input|output tokens" split its row into extra columns (and a line break ended it)."""
    from rlmetrics.registry import Declared
    from rlmetrics.spec import Kind, MetricSpec

    spec = MetricSpec(
        "acme.tokens", Kind.COUNTER, unit="{token}", description="input|output tokens,\nper batch"
    )
    text = metrics_markdown([Declared("acme", spec, "acme.family")])
    (row,) = [line for line in text.splitlines() if line.startswith("| `acme.tokens`")]
    cells = row.replace("\\|", "").split("|")
    assert len(cells) == 9, row  # seven columns between the outer pipes
    assert "input\\|output tokens, per batch" in row
