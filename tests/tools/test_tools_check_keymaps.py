"""``rlmetrics check`` lints the key maps an installed distribution offers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlmetrics_test_dists import install
from tools_support import run_cli

BAD_MAP = """
    import rlmetrics
    from rlmetrics import KeyMap, KeyRule

    @rlmetrics.hookimpl
    def register_key_maps(register):
        register(KeyMap("acme-trainer", [
            KeyRule("score", series="rl.reward.mean"),
            KeyRule("score_mean", series="rl.reward.mean"),
            KeyRule("judge", series="acme.judge.score"),
            KeyRule("wait", category="idle/coffee"),
            KeyRule("epoch"),
        ]))
"""


def test_a_bad_key_map_from_an_installed_plugin_is_flagged(tmp_path: Path) -> None:
    install(tmp_path, "acme-maps", {"acme_maps.py": BAD_MAP}, {"acme_maps": "acme_maps"})
    done = run_cli("check", "--plugin", "acme-maps", "--json", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["key_maps"] == ["acme-trainer"]
    found = {(f["rule"], f["plugin"], f["metric"], f["attribute"]) for f in result["findings"]}
    assert found == {
        ("key-map", "acme-maps:acme_maps", "keymap:acme-trainer", key)
        for key in ("score_mean", "judge", "wait")
    }


def test_the_shipped_maps_pass() -> None:
    done = run_cli("check")
    assert done.returncode == 0, done.stdout
    summary = re.search(r"; (\d+) key maps checked$", done.stdout.splitlines()[-1])
    assert summary is not None and int(summary.group(1)) >= 3
