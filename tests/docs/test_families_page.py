"""docs/families.md's table of the training scalars (the keys a loop logs and the series each
becomes) lists every scalar the training family declares, with its unit: the table is written
by hand and left out `num_samples` (`rl.train.samples`, the weight of the ranks' means)."""

from __future__ import annotations

import re
from pathlib import Path

import rlmetrics.families.training as training
from rlmetrics.registry import default_registry

PAGE = Path(__file__).resolve().parents[2] / "docs" / "families.md"


def test_the_training_scalars_table_lists_every_declared_scalar() -> None:
    section = PAGE.read_text().split("## Training scalars", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)`[^|]*\| `([^`]+)` \|$", section, re.M)
    declared = {
        (d.spec.key, d.spec.name, d.spec.unit)
        for d in default_registry().declared()
        if d.group == training.GROUP
    }
    assert declared and set(rows) == declared, sorted(declared ^ set(rows))
