"""The Ray reducer's merge of one gathered step, as plain Python (the cluster tests run it
through Ray): columns are by rank number, so a missing rank leaves a gap rather than shifting
the others, and a key one rank lacks merges over the ranks that sent it."""

from __future__ import annotations

from rlmetrics_ray.ranks import merge_step
from rlmetrics_ray.step_buffer import Gathered

from rlmetrics.ranks import Reductions
from rlmetrics.spec import STRAGGLER, SUM


def test_a_missing_rank_is_a_gap_and_the_slowest_rank_is_its_own_number() -> None:
    rows = {
        0: {"tokens": 1.0, "phase": 0.5},
        2: {"tokens": 3.0, "phase": 2.0, "only2": 7.0},
    }
    reductions = Reductions({"tokens": SUM, "phase": STRAGGLER})
    columns: dict[tuple[str, tuple[str, ...]], object] = {}
    out = merge_step(Gathered("train", 4, "train", rows, (1,)), reductions, columns)  # type: ignore[arg-type]
    assert out["tokens"] == 4.0
    assert out["only2"] == 7.0  # undeclared: a mean over the one rank that sent it
    assert (out["phase"], out["phase/slowest_rank"], out["phase/rank_mean"]) == (2.0, 2.0, 1.25)
    # read once per key set of a prefix
    assert list(columns) == [("train", ("only2", "phase", "tokens"))]


def test_no_rows_merge_to_an_empty_row() -> None:
    assert merge_step(Gathered("train", 0, "train", {}, ()), Reductions()) == {}


def test_a_key_merges_as_the_series_that_reads_it_under_the_step_s_prefix() -> None:
    """As on torch.distributed: a reward component weighs by the samples, ``reward`` under
    ``validation-<dataset>`` is the validation series' plain mean, whatever merged first."""
    rows = {
        0: {"reward": 1.0, "num_samples": 10.0, "reward/math": 1.0},
        1: {"reward": 0.0, "num_samples": 30.0, "reward/math": 0.0},
    }
    reductions = Reductions()
    columns: dict[tuple[str, tuple[str, ...]], object] = {}
    train = merge_step(Gathered("train", 0, "train", rows, ()), reductions, columns)  # type: ignore[arg-type]
    assert (train["reward"], train["reward/math"]) == (0.25, 0.25)
    validation = {rank: {"reward": row["reward"]} for rank, row in rows.items()}
    dataset = Gathered("validation-math", 0, "validation-math", validation, ())
    assert merge_step(dataset, reductions, columns) == {"reward": 0.5}  # type: ignore[arg-type]
