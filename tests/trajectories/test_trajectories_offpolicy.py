"""Off-policy signals: staleness is the weight-version lag between a rollout's policy and the
trained one (the record's trainer_weight_version, else the open step's weight_version), the
logprob mismatch is kept by that lag, the importance ratio as it is; read back from the SDK."""

from __future__ import annotations

import pytest

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, points, single

from ._records import rollout


def test_staleness_mismatch_and_ratio_are_recorded_by_lag() -> None:
    records = []
    for index, (version, mismatch, ratio) in enumerate(
        [(10, 0.01, 1.0), (9, 0.05, 1.1), (9, 0.07, 0.9), (3, 0.5, 2.0), ("v-x", 0.02, 1.0)]
    ):
        record = rollout(index)
        record.update(weight_version=version, logprob_mismatch=mismatch, importance_ratio=ratio)
        records.append(record)
    explicit = rollout(9)
    explicit.update(weight_version=4, trainer_weight_version=6)
    records.append(explicit)
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(10, logger=logger, weight_version=10, summary=False):
            logger.log_trajectories(records, step=10)
            with rlmetrics.trajectory("live", weight_version=8, logger=logger) as t:
                t.finish("success", importance_ratio=1.5, logprob_mismatch=0.03)
        found = points(reader)
    staleness = single(found, "rl.offpolicy.staleness")
    # Lags 0, 1, 1, 7 (a string version has none), 2 (explicit), 2 (live).
    assert staleness.count == 6 and staleness.sum == 0 + 1 + 1 + 7 + 2 + 2
    by_lag = {
        p.attributes.get("rl.offpolicy.lag"): p
        for p in found
        if p.name == "rl.offpolicy.logprob_mismatch"
    }
    assert by_lag["0"].count == 1 and by_lag["1"].count == 2 and by_lag["4+"].count == 1
    assert by_lag["2"].count == 1  # the live one
    assert by_lag[None].count == 1  # no lag known: no attribute
    ratio = single(found, "rl.offpolicy.importance_ratio")
    assert ratio.count == 6 and abs(ratio.sum - (1.0 + 1.1 + 0.9 + 2.0 + 1.0 + 1.5)) < 1e-9


def test_a_bad_off_policy_field_is_dropped_with_the_rest_kept() -> None:
    record = rollout(0)
    record.update(importance_ratio=-1.0, logprob_mismatch=float("nan"), trainer_weight_version=-3)
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_trajectories([record], step=1)
        found = points(reader)
    names = {p.name for p in found}
    assert "rl.trajectory.completed" in names
    assert not names & {"rl.offpolicy.importance_ratio", "rl.offpolicy.logprob_mismatch"}


def test_a_rollout_versioned_only_on_its_generations_has_its_staleness() -> None:
    """The live example of docs/trajectories.md gives the policy's version where the engine
    reports it, on each generation (``t.generation(..., weight_version=12)``), not on the
    trajectory. Before, such a rollout had no staleness at all, and an async run following
    the docs had an empty rl.offpolicy.staleness and a silent RLRolloutsStale. Now a rollout
    without a version of its own is as stale as its oldest generation (a partial rollout
    across a weight update: the policy that began it)."""
    record = rollout(0)
    record.pop("weight_version", None)
    record["turns"] = [
        {"generations": [{"model": "policy", "weight_version": 12}]},
        {"generations": [{"model": "policy", "weight_version": 13}]},
    ]
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(7, logger=logger, weight_version=14, summary=False):
            with rlmetrics.trajectory("p3-2", logger=logger) as t, t.turn():
                t.generation("policy", input_tokens=120, output_tokens=30, weight_version=12)
            logger.log_trajectories([record])
        found = points(reader)
    staleness = single(found, "rl.offpolicy.staleness")
    assert (staleness.count, staleness.sum) == (2, 2 + 2)


def test_a_step_whose_weight_version_is_a_numpy_int_measures_staleness() -> None:
    """Before: ``rlmetrics.step(n, weight_version=np.int64(10))`` tagged the step's span with
    10 but gave the trajectories no trainer version (only a Python int was read), so
    rl.offpolicy.staleness stayed empty and RLRolloutsStale silent. A NumPy or torch integer
    counts, as it does for the span and for the step."""
    np = pytest.importorskip("numpy")
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(10, logger=logger, weight_version=np.int64(10), summary=False):
            logger.log_trajectories([{"sample_id": "a", "weight_version": np.int64(7)}])
        found = points(reader)
    staleness = single(found, "rl.offpolicy.staleness")
    assert (staleness.count, staleness.sum) == (1, 3)
