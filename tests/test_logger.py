from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import Kind, MetricSpec
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.events import (
    CheckpointOutcome,
    CheckpointRestore,
    CheckpointSave,
    EfficiencySummary,
    SetupTimings,
    ThroughputSample,
)
from rlmetrics.logger import MAX_FLAT_KEYS, flatten
from rlmetrics.plugins import register as register_plugin
from rlmetrics.testing import captured_log, in_memory_telemetry, points, single


class Recorder:
    """An in-process plugin that remembers every hook call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.calls.append(("log_metrics", (dict(metrics), step, prefix)))

    @rlmetrics.hookimpl
    def on_setup_timing(self, timings: Any) -> None:
        self.calls.append(("on_setup_timing", timings))

    @rlmetrics.hookimpl
    def on_efficiency_summary(self, summary: Any, step: int) -> None:
        self.calls.append(("on_efficiency_summary", (summary, step)))

    @rlmetrics.hookimpl
    def on_rollout_checkpoint(self, event: Any) -> None:
        self.calls.append(("on_rollout_checkpoint", event))

    def hooks(self) -> list[str]:
        return [name for name, _ in self.calls]


class FailingBackend:
    def __init__(self, fail_on_start: bool = False) -> None:
        if fail_on_start:
            raise ConnectionError("tracker unreachable")

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        raise OSError("disk full")

    def finish(self) -> None:
        raise OSError("disk full")


class FailingBackendPlugin:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("failing", FailingBackend)


@pytest.fixture
def recorder() -> Recorder:
    recorder = Recorder()
    assert register_plugin(recorder, "recorder")
    return recorder


def test_flatten_nested_dicts() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3, 4: {"f": 5}}) == {
        "a/b": 1,
        "a/c/d": 2,
        "e": 3,
        "4/f": 5,
    }


def test_setup_prefix_routes_to_on_setup_timing(recorder: Recorder) -> None:
    logged = {"policy_init_time_s": 2.0, "parallel_init_enabled": 1.0}
    rlmetrics.Logger(backends={}).log_metrics(logged, step=0, prefix="timing/setup")
    assert recorder.calls == [
        (
            "on_setup_timing",
            SetupTimings(seconds={"policy_init": 2.0}, flags={"parallel_init_enabled": 1.0}),
        ),
        ("log_metrics", (logged, 0, "timing/setup")),
    ]


def test_log_setup_timing_is_the_typed_twin(recorder: Recorder) -> None:
    rlmetrics.Logger(backends={}).log_setup_timing({"total_setup_time_s": 9.0})
    assert recorder.calls[0] == ("on_setup_timing", SetupTimings(seconds={"total_setup": 9.0}))
    assert recorder.calls[1][1][1:] == (0, "timing/setup")


@pytest.mark.parametrize("prefix", ["train", ""])
def test_efficiency_keys_of_a_train_dict_route_to_on_efficiency_summary(
    recorder: Recorder, prefix: str
) -> None:
    rlmetrics.Logger(backends={}).log_metrics(
        {
            "efficiency/idle/refit_bubble_s": 1.5,
            "efficiency/total_waste_s": 9.0,
            "efficiency/efficiency_pct": 80.0,
            "efficiency/efficiency_pct_is_per_step": 1.0,
            "loss": 0.1,
        },
        step=4,
        prefix=prefix,
    )
    assert recorder.hooks() == ["on_efficiency_summary", "log_metrics"]
    summary, step = recorder.calls[0][1]
    assert summary == EfficiencySummary(
        seconds={"idle/refit_bubble": 1.5}, efficiency_pct=80.0, pct_per_step=True
    )
    assert step == 4


def test_efficiency_keys_under_another_prefix_are_not_routed(recorder: Recorder) -> None:
    rlmetrics.Logger(backends={}).log_metrics({"efficiency/idle/x_s": 1.0}, step=1, prefix="val")
    assert recorder.hooks() == ["log_metrics"]


def test_log_efficiency_summary_is_the_typed_twin(recorder: Recorder, tmp_path: Path) -> None:
    summary = EfficiencySummary(seconds={"idle/validation": 2.0}, step_wall_time_s=10.0)
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_efficiency_summary(summary, step=3)
    assert recorder.calls[0] == ("on_efficiency_summary", (summary, 3))
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["step"] == 3
    assert row["metrics"] == {
        "efficiency/idle/validation_s": 2.0,
        "efficiency/step_wall_time_s": 10.0,
    }


@pytest.mark.parametrize("step", ["x", -1, 2.5])
def test_an_efficiency_summary_whose_step_is_no_step_lands_at_the_last_step(
    recorder: Recorder, tmp_path: Path, step: Any
) -> None:
    """Before: the value went to every tracker and hook as the step (a JSONL row at step
    "x"), and with ranks it broke the merge for the rest of the run (the row's header
    carries the step as a float)."""
    summary = EfficiencySummary(seconds={"idle/validation": 2.0}, step_wall_time_s=10.0)
    with (
        captured_log() as log,
        rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger,
    ):
        logger.log_metrics({"loss": 1.0}, step=3, prefix="train")
        logger.log_efficiency_summary(summary, step=step)
    assert ("on_efficiency_summary", (summary, 3)) in recorder.calls
    assert [row["step"] for row in read_jsonl(tmp_path / "m.jsonl")] == [3, 3]
    (said,) = log.matching("log_efficiency_summary's step must be", logging.WARNING)
    assert "logged at the last step (3)" in said.getMessage()


@pytest.mark.parametrize(
    ("event", "prefix"),
    [
        (
            CheckpointSave({"total_save_seconds": 1.5}, wall_time_s=100.0),
            "timing/rollout_checkpoint",
        ),
        (
            CheckpointRestore({"total_load_seconds": 2.5}, wall_time_s=100.0),
            "timing/rollout_recovery",
        ),
        (
            CheckpointOutcome({}, wall_time_s=100.0, outcome="skipped", reason="busy"),
            "rollout/checkpoint_outcome",
        ),
        (
            ThroughputSample({"committed_groups_per_second": 3.0}, wall_time_s=100.0),
            "rollout/throughput",
        ),
    ],
)
def test_rollout_prefixes_route_to_on_rollout_checkpoint(
    recorder: Recorder, tmp_path: Path, event: Any, prefix: str
) -> None:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
    logger.log_rollout_checkpoint(event)
    logger.log_rollout_checkpoint(event)
    # The same dict through log_metrics reaches the hook as an equal typed event.
    logger.log_metrics(event.to_metrics(), step=7, prefix=prefix)
    logger.finish()
    routed = [payload for hook, payload in recorder.calls if hook == "on_rollout_checkpoint"]
    assert routed == [event, event, event]
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [(r["step"], r["prefix"]) for r in rows] == [(0, prefix), (1, prefix), (7, prefix)]
    assert all(r["metrics"]["telemetry/wall_time_seconds"] == 100.0 for r in rows)


def test_outcome_round_trip_through_a_dict() -> None:
    event = CheckpointOutcome(
        {"seconds_since_last_success": 30.0}, wall_time_s=5.0, outcome="failed", reason="tq_error"
    )
    flat = event.to_metrics()
    assert flat == {
        "completed": 0.0,
        "skipped": 0.0,
        "failed": 1.0,
        "reason_tq_error": 1.0,
        "seconds_since_last_success": 30.0,
        "telemetry/wall_time_seconds": 5.0,
    }
    assert CheckpointOutcome.from_metrics(flat) == event


def test_failing_backend_is_isolated(recorder: Recorder, tmp_path: Path, caplog: Any) -> None:
    assert register_plugin(FailingBackendPlugin(), "failing-plugin")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = rlmetrics.Logger(
            backends={
                "failing": {},
                "jsonl": {"path": tmp_path / "m.jsonl"},
            }
        )
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
        logger.finish()
    assert [r["metrics"]["loss"] for r in read_jsonl(tmp_path / "m.jsonl")] == [1.0, 0.5]
    assert recorder.hooks() == ["log_metrics", "log_metrics"]
    assert caplog.text.count("backend 'failing' failed to log") == 1
    assert "backend 'failing' failed to finish" in caplog.text


def test_backend_failing_to_start_is_skipped(tmp_path: Path, caplog: Any) -> None:
    register_plugin(FailingBackendPlugin(), "failing-plugin")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = rlmetrics.Logger(
            backends={"failing": {"fail_on_start": True}, "jsonl": {"path": tmp_path / "m.jsonl"}}
        )
    assert list(logger.backends) == ["jsonl"]
    assert "'failing' (from plugin 'failing-plugin') failed to start" in caplog.text


def test_unknown_backend_fails_early_with_the_choices() -> None:
    # Whether rlmetrics-wandb is installed beside the core decides only the suggestion.
    with pytest.raises(
        ValueError,
        match=r"unknown backend\(s\) \['wandbb'\]( \(did you mean 'wandb'\?\))?; "
        r"available: .*jsonl",
    ):
        rlmetrics.Logger(backends={"wandbb": {}})


def test_default_backend_is_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with rlmetrics.Logger() as logger:
        logger.log_metrics({"reward": 1.0}, step=1, prefix="train")
    [row] = read_jsonl(tmp_path / "rlmetrics.jsonl")
    assert row["metrics"] == {"reward": 1.0}


def test_logger_works_without_telemetry(tmp_path: Path) -> None:
    assert rlmetrics.current() is None
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_metrics({"loss": 2.0}, step=1, prefix="train")
    assert [r["metrics"] for r in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 2.0}]


def test_inline_backends_run_before_families(tmp_path: Path) -> None:
    """An inline backend has written the dict before any family sees it (a queued one has
    been handed it, and writes it on its own thread)."""
    order: list[str] = []

    class Family:
        @rlmetrics.hookimpl
        def log_metrics(self) -> None:
            order.append("family")

    class Backend:
        inline = True

        def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
            order.append("backend")

        def finish(self) -> None: ...

    class BackendPlugin:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("ordered", Backend)

    register_plugin(Family(), "family")
    register_plugin(BackendPlugin(), "backend-plugin")
    rlmetrics.Logger(backends={"ordered": {}}).log_metrics({"x": 1}, step=1)
    assert order == ["backend", "family"]


def test_finish_is_idempotent_and_later_logging_is_dropped(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
    logger.finish()
    logger.finish()
    logger.log_metrics({"loss": 1.0}, step=1)
    assert list(read_jsonl(tmp_path / "m.jsonl")) == []


# -- never raises -------------------------------------------------------------------------

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.just(object()),
    st.complex_numbers(),
)
_keys = st.one_of(st.text(max_size=8), st.integers(), st.none(), st.tuples(st.integers()))
_nested = st.recursive(
    st.dictionaries(_keys, _leaves, max_size=6),
    lambda children: st.dictionaries(_keys, st.one_of(_leaves, children), max_size=4),
    max_leaves=20,
)
_prefixes = st.sampled_from(
    ["train", "", "timing/setup", "rollout/throughput", "rollout/checkpoint_outcome", "validation"]
)


@settings(max_examples=150)
@given(metrics=_nested, step=st.one_of(st.integers(), st.none(), st.floats()), prefix=_prefixes)
def test_log_metrics_never_raises(metrics: dict[Any, Any], step: Any, prefix: str) -> None:
    logger = rlmetrics.Logger(backends={"console": {"stream": _Sink()}})
    logger.log_metrics(metrics, step=step, prefix=prefix)
    logger.finish()


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None: ...


def test_record_never_raises_and_valid_values_land() -> None:
    rlmetrics.declare(
        "h",
        [
            MetricSpec("h.gauge", Kind.GAUGE, key="g", attributes={"a": None}, max_series=5),
            MetricSpec("h.counter", Kind.COUNTER, key="c"),
        ],
    )
    with in_memory_telemetry() as (_handle, reader):

        @settings(max_examples=150)
        @given(values=_nested, attributes=st.one_of(st.none(), _nested))
        def check(values: dict[Any, Any], attributes: Any) -> None:
            rlmetrics.record("h", values, attributes)
            rlmetrics.record("h", {**values, "c": 1})

        check()
        counter = single(points(reader), "h.counter")
    assert counter.value >= 1 and math.isfinite(counter.value)


def test_a_rollout_dict_without_wall_time_is_stamped_for_backends_and_hook(
    recorder: Recorder, tmp_path: Path
) -> None:
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_metrics(
            {"committed_groups_per_second": 2.0}, step=3, prefix="rollout/throughput"
        )
    [row] = read_jsonl(tmp_path / "m.jsonl")
    stamped = row["metrics"]["telemetry/wall_time_seconds"]
    assert abs(stamped - row["time"]) < 60
    [event] = [payload for hook, payload in recorder.calls if hook == "on_rollout_checkpoint"]
    assert event.wall_time_s == stamped  # backends and the hook agree on the stream's time


# -- hardening: no input costs more than itself, nothing hangs ------------------------------


def _in_thread(action: Any, bound_s: float = 30.0) -> None:
    """Run ``action``; fail (rather than hang the suite) if it has not returned in ``bound_s``."""
    worker = threading.Thread(target=action, daemon=True)
    worker.start()
    worker.join(bound_s)
    assert not worker.is_alive(), f"did not return within {bound_s} s"


def test_a_self_referencing_dict_is_cut_and_the_rest_lands(tmp_path: Path) -> None:
    looped: dict[str, Any] = {"loss": 1.0}
    looped["a"] = looped
    looped["b"] = looped
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        _in_thread(lambda: logger.log_metrics(looped, step=1, prefix="train"))
        assert single(points(reader), "rl.policy.loss").value == 1.0
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"] == {"loss": 1.0}  # the cycle is cut, not expanded


def test_flatten_caps_the_keys_of_one_call_and_reports_once(caplog: Any) -> None:
    wide = {f"k{i}": {f"j{j}": float(j) for j in range(100)} for i in range(200)}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for _ in range(3):
            flat = flatten(wide)
    assert len(flat) == MAX_FLAT_KEYS
    assert flat["k0/j0"] == 0.0
    assert caplog.text.count("keys past the cap were dropped") == 1


def test_two_entries_flattening_to_one_key_are_said_once_naming_it(
    tmp_path: Path, caplog: Any
) -> None:
    # Two sources merged into one dict: a nested table and a flat key of the same path. One
    # key can hold one value; the later one is logged, and the other is not lost unsaid.
    jsonl = {"jsonl": {"path": tmp_path / "m.jsonl"}}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"), rlmetrics.Logger(jsonl) as logger:
        for step in (1, 2):
            metrics = {"timing": {"gen": 1.0 + step}, "timing/gen": 2.0 + step, "loss": 0.5}
            logger.log_metrics(metrics, step=step, prefix="train")
    rows = [r["metrics"] for r in read_jsonl(tmp_path / "m.jsonl")]
    assert rows == [{"timing/gen": 3.0, "loss": 0.5}, {"timing/gen": 4.0, "loss": 0.5}]
    said = [r.getMessage() for r in caplog.records if "'timing/gen'" in r.getMessage()]
    assert len(said) == 1 and "the later one is logged" in said[0], said


class _RaisesEverywhere:
    """A value whose every conversion raises, as a broken tensor wrapper might."""

    @property
    def item(self) -> Any:
        raise RuntimeError("item")

    def __float__(self) -> float:
        raise RuntimeError("float")

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")


@pytest.mark.parametrize(
    "bad",
    [Fraction(10**400), 10**400, 2**63, _RaisesEverywhere(), float("nan")],
    ids=["fraction-overflow", "int-10**400", "int-2**63", "raises-everywhere", "nan"],
)
def test_one_bad_value_costs_only_itself(bad: Any, tmp_path: Path) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"reward": bad, "loss": 0.5, "lr": 1e-4}, step=1, prefix="train")
        logger.log_metrics({"loss": 0.75, "efficiency/idle/validation_s": bad}, step=2)
        logger.log_metrics(
            {"total_save_seconds": 1.5, "snapshot_rows": bad},
            step=3,
            prefix="timing/rollout_checkpoint",
        )
        logger.log_metrics(
            {"snapshot_rows": 7, "telemetry/wall_time_seconds": bad},
            step=4,
            prefix="timing/rollout_checkpoint",
        )
        found = points(reader)
        logger.finish()
    names = {p.name: p for p in found}
    assert "rl.reward.mean" not in names
    assert names["rl.policy.loss"].value == 0.75
    assert names["rl.learning_rate"].value == 1e-4
    assert names["rl.rollout.checkpoint.snapshot.rows"].value == 7
    phase = {"rl.rollout.checkpoint.phase": "total_save"}
    duration = single(found, "rl.rollout.checkpoint.duration", **phase)
    assert duration.count == 1 and duration.sum == 1.5
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # every row written
    assert rows[0]["metrics"]["loss"] == 0.5 and rows[1]["metrics"]["loss"] == 0.75


class _MissingValue(Exception):
    pass


class _ConfigWithAMissingField(Mapping[str, Any]):
    """Shaped like an OmegaConf DictConfig holding a ``???`` field: reading it raises."""

    def __init__(self) -> None:
        self._data = {"lr": 3e-4, "missing": None, "loss": 0.25}

    def __getitem__(self, key: str) -> Any:
        if key == "missing":
            raise _MissingValue("Missing mandatory value: missing")
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def items(self) -> Any:  # DictConfig.items() reads every value, so it raises too
        return [(k, self[k]) for k in self._data]


class _RaisesOnIteration(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return 1


def test_a_mapping_that_raises_costs_only_what_raised(tmp_path: Path) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics(
            {"reward": 1.0, "config": _ConfigWithAMissingField(), "odd": _RaisesOnIteration()},
            step=1,
            prefix="train",
        )
        found = {p.name: p.value for p in points(reader)}
        logger.finish()
    assert found["rl.reward.mean"] == 1.0
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"]["reward"] == 1.0
    assert row["metrics"]["config/lr"] == 3e-4 and row["metrics"]["config/loss"] == 0.25
    assert "config/missing" not in row["metrics"]


# -- inline backends, each in its own guard ------------------------------------------------------


class _InlineBroken:
    """An inline backend whose disk is gone: every call raises."""

    inline = True

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        raise OSError("disk gone")

    def finish(self) -> None:
        raise OSError("disk gone")


class _InlineKept:
    """An inline backend that keeps what it is given."""

    inline = True

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.finished = False

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.steps.append(step)

    def finish(self) -> None:
        self.finished = True


class _InlineOffers:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("broken-inline", _InlineBroken)
        register("kept-inline", _InlineKept)


def test_a_failing_inline_backend_never_stops_the_inline_backends_after_it(
    tmp_path: Path, caplog: Any
) -> None:
    register_plugin(_InlineOffers(), "inline-offers")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        # Configuration order is call order: the broken one runs first, on every step.
        logger = rlmetrics.Logger(
            backends={
                "broken-inline": {},
                "jsonl": {"path": tmp_path / "m.jsonl"},
                "kept-inline": {},
            }
        )
        for step in (1, 2, 3):
            logger.log_metrics({"loss": 1.0 / step}, step=step, prefix="train")
        logger.finish()
    kept = logger.backends["kept-inline"]
    assert isinstance(kept, _InlineKept)
    assert [row["step"] for row in read_jsonl(tmp_path / "m.jsonl")] == [1, 2, 3]
    assert kept.steps == [1, 2, 3]
    assert kept.finished  # the broken one's finish() raised first
    assert "backend 'broken-inline' failed to log" in caplog.text


def _numpy() -> Any:
    return pytest.importorskip("numpy")


@pytest.mark.parametrize(
    "reason",
    [math.inf, 10**30, ["tq_error"], "np.uint64", b"bytes", object()],
    ids=["inf", "big-int", "list", "np.uint64", "bytes", "object"],
)
def test_a_bad_checkpoint_reason_drops_only_the_reason(
    tmp_path: Path, caplog: Any, reason: Any
) -> None:
    if reason == "np.uint64":
        reason = _numpy().uint64(3)
    with (
        in_memory_telemetry() as (_handle, reader),
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
    ):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        event = CheckpointOutcome(
            {"seconds_since_last_success": 30.0}, wall_time_s=5.0, outcome="failed", reason=reason
        )
        logger.log_rollout_checkpoint(event)
        logger.finish()
        found = points(reader)
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"] == {
        "completed": 0.0,
        "skipped": 0.0,
        "failed": 1.0,
        "seconds_since_last_success": 30.0,
        "telemetry/wall_time_seconds": 5.0,
    }
    attempts = single(
        found,
        "rl.rollout.checkpoint.attempts",
        **{"rl.rollout.checkpoint.outcome": "failed", "rl.rollout.checkpoint.reason": "none"},
    )
    assert attempts.value == 1
    assert single(found, "rl.rollout.checkpoint.since_last_success").value == 30.0
    assert "CheckpointOutcome.reason must be a string" in caplog.text


def test_an_array_pct_per_step_drops_only_that_field(tmp_path: Path, caplog: Any) -> None:
    np = _numpy()
    category = {"rl.efficiency.category": "idle/validation"}
    with (
        in_memory_telemetry() as (_handle, reader),
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
    ):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_efficiency_summary(
            EfficiencySummary({"idle/validation": 1.0}, step_wall_time_s=10.0), step=1
        )
        assert single(points(reader), "rl.efficiency.seconds", **category).value == 1.0
        summary = EfficiencySummary(
            {"idle/validation": 2.0},
            step_wall_time_s=10.0,
            efficiency_pct=np.float64(80.0),
            pct_per_step=np.arange(3),
        )
        logger.log_efficiency_summary(summary, step=2)
        logger.finish()
        found = points(reader)
    assert single(found, "rl.efficiency.seconds", **category).value == 2.0
    # The pct lands; without a usable window flag it is the run's.
    assert single(found, "rl.efficiency.pct", **{"rl.efficiency.window": "run"}).value == 80.0
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert rows[1]["step"] == 2
    assert rows[1]["metrics"]["efficiency/idle/validation_s"] == 2.0
    assert rows[1]["metrics"]["efficiency/efficiency_pct"] == 80.0
    assert "EfficiencySummary.pct_per_step must be a bool" in caplog.text


def test_a_cut_past_the_key_cap_keeps_teed_and_axis_keys_and_says_how_many_it_dropped(
    tmp_path: Path, caplog: Any
) -> None:
    filler = {f"filler/{i}": float(i) for i in range(MAX_FLAT_KEYS + 1)}
    metrics = {**filler, "loss": 0.25, "rlmetrics/step": 7, "unteed": 1.0}
    with (
        in_memory_telemetry() as (_handle, reader),
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
    ):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics(metrics, step=3, prefix="train")
        logger.finish()
        assert single(points(reader), "rl.policy.loss").value == 0.25
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"]["loss"] == 0.25
    assert row["metrics"]["rlmetrics/step"] == 7
    assert "unteed" not in row["metrics"]
    assert len(row["metrics"]) == MAX_FLAT_KEYS + 2
    # 10,004 keys: the first 10,000 kept, then loss and the step key; 2 dropped.
    assert f"flattens to {MAX_FLAT_KEYS + 4} keys" in caplog.text
    assert "2 keys past the cap were dropped" in caplog.text


def test_nesting_past_the_depth_cap_is_reported_once(caplog: Any) -> None:
    deep: dict[str, Any] = {"leaf": 1.0}
    for _ in range(40):
        deep = {"d": deep}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for _ in range(3):
            flat = flatten({"loss": 0.5, "deep": deep})
    assert flat["loss"] == 0.5
    [(key, value)] = [(k, v) for k, v in flat.items() if k != "loss"]
    assert key.count("/") == 32 and isinstance(value, dict)
    assert caplog.text.count("nested more than 32 levels deep") == 1


def test_a_cut_past_the_key_cap_keeps_the_keys_a_key_map_tees(tmp_path: Path) -> None:
    """TRL logs ``kl``, which only the ``trl`` key map ties to ``rl.kl.divergence``: it survives
    a cut as a declared key does."""
    filler = {f"filler/{i}": float(i) for i in range(MAX_FLAT_KEYS + 1)}
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, key_map="trl")
        logger.log_metrics({**filler, "kl": 0.125}, step=3, prefix="train")
        logger.finish()
        assert single(points(reader), "rl.kl.divergence").value == 0.125
    [row] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"]["kl"] == 0.125


# -- configuration mistakes fail at construction; the step and value rules (issue 25, 6-7) ------


def test_a_misspelled_backend_option_raises_naming_the_options(tmp_path: Path) -> None:
    # It used to warn with a TypeError traceback and build a Logger with no backend at all.
    with pytest.raises(
        TypeError, match=r"backend 'jsonl' has no option 'pth' \(did you mean 'path'\?\)"
    ):
        rlmetrics.Logger(backends={"jsonl": {"pth": tmp_path / "m.jsonl"}})
    with pytest.raises(TypeError, match=r"its options: path"):
        rlmetrics.Logger(backends={"jsonl": {"pth": tmp_path / "m.jsonl"}})
    with pytest.raises(TypeError, match=r"backend 'jsonl': options are a mapping"):
        rlmetrics.Logger(backends={"jsonl": "m.jsonl"})  # type: ignore[dict-item]


def test_a_backend_that_takes_any_option_is_not_second_guessed(tmp_path: Path) -> None:
    class AnyOptions:
        inline = True

        def __init__(self, **options: Any) -> None:
            self.options = options

        def log_metrics(self, metrics: Any, step: int, prefix: str) -> None: ...

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("any", AnyOptions)

    register_plugin(Offers(), "offers-any")
    logger = rlmetrics.Logger(backends={"any": {"whatever": 1}})
    assert logger.backends["any"].options == {"whatever": 1}  # type: ignore[attr-defined]
    logger.finish()


def test_a_world_failure_at_start_still_degrades_with_one_line(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "dir.jsonl"}})
    assert logger.backends == {}
    assert "Traceback" not in caplog.text and "failed to start and is skipped" in caplog.text


def test_each_run_names_the_tracker_it_starts_without(tmp_path: Path) -> None:
    """A second Logger in the process (a notebook's next cell, a sweep's next trial) whose
    tracker fails to start says so too: the warning was keyed by the backend's name alone, so
    the second run went on without the tracker, unsaid."""
    for run in ("trial-1", "trial-2"):
        folder = tmp_path / run / "m.jsonl"
        folder.mkdir(parents=True)  # a folder where the file should be: the start fails
        with captured_log() as log:
            logger = rlmetrics.Logger(backends={"jsonl": {"path": folder}}, run_id=run)
        logger.finish()
        assert logger.backends == {}
        (said,) = log.matching("failed to start and is skipped", logging.WARNING)
        assert str(folder) in said.getMessage()


@pytest.mark.parametrize("variable", ["RLMETRICS_DISABLE_PLUGINS", "RLMETRICS_PLUGINS"])
def test_an_unknown_plugin_name_in_the_environment_raises_with_the_names(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "jsonl, traning")
    with pytest.raises(
        ValueError, match=rf"{variable} names no installed plugin: 'traning'"
    ) as raised:
        rlmetrics.Logger(backends={"console": {"stream": _Sink()}})
    assert "did you mean 'training'" in str(raised.value)
    assert "rlmetrics-vllm" in str(raised.value) or "vllm" in str(raised.value)
    with pytest.raises(ValueError, match=variable):
        rlmetrics.start(exporters=["console"])
    assert rlmetrics.current() is None


def test_an_unknown_plugin_name_given_to_start_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"disable_plugins= names no installed plugin: 'nope'"):
        rlmetrics.start(disable_plugins=["nope"])
    assert rlmetrics.current() is None


def _steps(path: Path) -> list[tuple[Any, str]]:
    return [(row["step"], row["prefix"]) for row in read_jsonl(path)]


def test_log_metrics_without_a_step_continues_from_the_last(tmp_path: Path) -> None:
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_metrics({"loss": 1.0})  # the first: step 0, as wandb.log starts
        logger.log_metrics({"loss": 1.0})
        logger.log_metrics({"loss": 1.0}, step=10, prefix="train")
        logger.log_metrics({"accuracy": 1.0}, prefix="validation")
        logger.log_metrics({"loss": 1.0}, prefix="train")
    assert _steps(tmp_path / "m.jsonl") == [
        (0, ""),
        (1, ""),
        (10, "train"),
        (11, "validation"),
        (12, "train"),
    ]


def test_setup_timing_is_step_0_and_the_first_step_after_it_is_1(tmp_path: Path) -> None:
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_setup_timing({"policy_init_time_s": 1.0})
        logger.log_metrics({"loss": 1.0}, prefix="train")
    assert _steps(tmp_path / "m.jsonl") == [(0, "timing/setup"), (1, "train")]


@pytest.mark.parametrize(
    ("step", "written"),
    [(7, 7), (7.0, 1), (True, 1), ("two", 1), (2.5, 1), (-3, 1), (None, 1)],
)
def test_a_step_is_an_integer_else_the_next_one_with_a_warning(
    tmp_path: Path, caplog: Any, step: Any, written: int
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger,
    ):
        logger.log_metrics({"loss": 1.0}, step=0, prefix="train")
        logger.log_metrics({"loss": 2.0}, step=step, prefix="train")
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [r["step"] for r in rows] == [0, written]
    assert [type(r["step"]) for r in rows] == [int, int]
    assert rows[1]["metrics"] == {"loss": 2.0}  # the row itself is not lost
    bad = step is True or isinstance(step, (str, float)) or step == -3
    assert ("rlmetrics: log_metrics' step must be" in caplog.text) is bad
    if isinstance(step, str):
        assert "two" not in caplog.text  # a logged string is never quoted


def test_a_numpy_step_is_its_integer(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_metrics({"loss": 1.0}, step=np.int64(5), prefix="train")
        logger.log_metrics({"loss": 1.0}, prefix="train")
    assert _steps(tmp_path / "m.jsonl") == [(5, "train"), (6, "train")]


def test_none_follows_the_one_rule_for_values_that_are_not_numbers(
    telemetry: tuple[Any, Any], tmp_path: Path, caplog: Any
) -> None:
    """A value of a series' key that is not a finite number — None, NaN, a string — is not
    exported, and each is said once per key; the trackers get every value as logged."""
    _, reader = telemetry
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger,
    ):
        for step in (1, 2):
            logger.log_metrics(
                {"reward": None, "loss": math.nan, "kl_penalty": "high", "lr": 1e-6},
                step=step,
                prefix="train",
            )
        logger.log_metrics({"my_thing": None}, step=3, prefix="train")  # no series reads it
    [row, *_] = read_jsonl(tmp_path / "m.jsonl")
    assert row["metrics"] == {"reward": None, "loss": "nan", "kl_penalty": "high", "lr": 1e-6}
    names = {p.name for p in points(reader)}
    assert "rl.learning_rate" in names
    assert not names & {"rl.reward.mean", "rl.policy.loss", "rl.kl.divergence"}
    for key in ("reward", "loss", "kl_penalty"):
        assert caplog.text.count(f"(key {key!r}) dropped a value") == 1, caplog.text
    assert "None is not a finite number" in caplog.text
    assert "my_thing" not in caplog.text


def test_a_decimal_is_exported_as_the_number_it_is_and_its_nan_dropped_as_a_floats(
    telemetry: tuple[Any, Any], tmp_path: Path, caplog: Any
) -> None:
    """Before: a Decimal of a series' key was dropped ('a Decimal is not a finite number',
    said of Decimal('0.5')) while a Fraction was exported; a Decimal NaN is now dropped,
    said and counted as a float NaN is."""
    _, reader = telemetry
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger,
    ):
        logger.log_metrics(
            {"reward": Decimal("0.5"), "loss": Fraction(1, 4), "lr": Decimal("NaN")},
            step=1,
            prefix="train",
        )
        logger.log_metrics({"lr": math.nan}, step=2, prefix="train")
    found = points(reader)
    assert single(found, "rl.reward.mean").value == 0.5
    assert single(found, "rl.policy.loss").value == 0.25
    assert "rl.learning_rate" not in {p.name for p in found}
    assert caplog.text.count("(key 'lr') dropped a value") == 1, caplog.text
    assert "(key 'reward')" not in caplog.text
    dropped = single(found, "rlmetrics.values.dropped", **{"rlmetrics.series": "rl.learning_rate"})
    assert dropped.value == 2  # the Decimal NaN and the float one, under one cause
    assert dropped.attributes["rlmetrics.drop.reason"] == "nan"


class _Kept:
    """A queued backend (written on its own thread) that keeps what it is given."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.finished = False

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self.rows.append(dict(metrics))

    def finish(self) -> None:
        self.finished = True


@pytest.mark.parametrize("timeout_s", ["soon", -1, math.nan])
def test_a_finish_bound_that_is_no_bound_is_said_and_every_row_is_written(
    timeout_s: Any,
) -> None:
    """``finish(timeout_s="soon")`` raised a TypeError after marking the Logger finished: its
    queued trackers were never finished, and no exit hook finished them either (their rows
    were lost, unsaid); NaN raised a ValueError from the wait, and -1 waited for nothing. A
    bound that is no number of 0 or more is said once, and the Logger's own bound is used
    (``math.inf`` is one: wait until every row is written)."""
    kept = _Kept()

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("kept", lambda: kept)

    register_plugin(Offers(), "offers-kept")
    logger = rlmetrics.Logger(backends=["kept"])
    for step in range(3):
        logger.log_metrics({"loss": float(step)}, step=step)
    with captured_log() as log:
        logger.finish(timeout_s=timeout_s)
    assert kept.finished and kept.rows == [{"loss": 0.0}, {"loss": 1.0}, {"loss": 2.0}]
    (said,) = log.matching("Logger.finish()'s timeout_s must be a number of 0 or more")
    assert f"the Logger's own bound ({logger.finish_timeout_s:g} s) is used" in said.getMessage()


class _Outcome(_Kept):
    """A queued backend with a notion of a failed run, as W&B, MLflow and SwanLab have."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: bool | None = None

    def finish(self, failed: bool = False) -> None:  # type: ignore[override]
        self.finished, self.failed = True, failed


@pytest.mark.parametrize(
    ("given", "failed", "said"),
    [(None, False, False), (False, False, False), (True, True, False), ("no", True, True)],
)
def test_finish_failed_tells_the_trackers_the_run_failed(
    given: Any, failed: bool, said: bool
) -> None:
    """``finish(failed=True)`` (a SIGTERM handler's, before ``sys.exit(143)``) finishes the run
    as failed; there was no way to say so, and a preempted run was finished as successful.
    A value that is no bool is said once and taken as a failure (an exception, a status)."""
    outcome = _Outcome()

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("outcome", lambda: outcome)

    register_plugin(Offers(), "offers-outcome")
    logger = rlmetrics.Logger(backends=["outcome"])
    logger.log_metrics({"loss": 1.0}, step=0)
    with captured_log() as log:
        logger.finish() if given is None else logger.finish(failed=given)
    assert outcome.rows == [{"loss": 1.0}] and outcome.failed is failed
    assert bool(log.matching("Logger.finish()'s failed must be True or False, got")) is said


class _Caused(_Kept):
    """A backend whose finish takes the ``cause`` too (SwanLab's error text)."""

    def __init__(self) -> None:
        super().__init__()
        self.finished_with: tuple[bool, BaseException | None] | None = None

    def finish(self, failed: bool = False, cause: BaseException | None = None) -> None:  # type: ignore[override]
        self.finished, self.finished_with = True, (failed, cause)


@pytest.mark.parametrize("inline", [False, True], ids=["queued", "inline"])
def test_an_exception_leaving_the_logger_block_is_the_cause_told_to_a_backend_that_takes_it(
    inline: bool,
) -> None:
    # The backends were told only failed=True: SwanLab's crashed state could not say which
    # exception (nor a Ctrl-C's "aborted"). A backend whose finish takes only failed is
    # finished as before; an explicit finish(failed=True) has no cause.
    caused, outcome = _Caused(), _Outcome()
    caused.inline = inline  # type: ignore[attr-defined]

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("caused", lambda: caused)
            register("outcome", lambda: outcome)

    register_plugin(Offers(), "offers-caused")
    error = RuntimeError("the loop died")
    with pytest.raises(RuntimeError), rlmetrics.Logger(backends=["caused", "outcome"]):
        raise error
    assert caused.finished_with == (True, error)
    assert outcome.failed is True
    logger = rlmetrics.Logger(backends=["caused"])
    logger.finish(failed=True)
    assert caused.finished_with == (True, None)


def test_a_backend_failing_to_start_with_an_unprintable_error_is_skipped_and_named(
    tmp_path: Path,
) -> None:
    class Unprintable(RuntimeError):
        def __str__(self) -> str:
            raise ValueError("no text")

    def broken() -> Any:
        raise Unprintable

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("broken", broken)

    register_plugin(Offers(), "offers-broken")
    with captured_log() as log:
        logger = rlmetrics.Logger(backends={"broken": {}, "jsonl": {"path": tmp_path / "m.jsonl"}})
    logger.finish()
    assert list(logger.backends) == ["jsonl"]
    assert log.matching("backend 'broken' (from plugin 'offers-broken') failed to start")


def test_what_is_logged_after_finish_is_said_once_per_call_kind(tmp_path: Path) -> None:
    """Before: a row logged after ``finish()`` (a final evaluation, a callback that runs after
    the trainer's end) reached no tracker, and nothing said so; telemetry still got it."""
    path = tmp_path / "run.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}})
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")
    logger.finish()
    record = {"sample_id": "s0", "outcome": "success", "turns": [], "rewards": []}
    with captured_log() as log:
        for step in (2, 3):
            logger.log_metrics({"reward": 2.0}, step=step, prefix="eval")
            logger.log_trajectories([record], step=step)  # its rows are a samples table
            logger.log_samples([{"prompt": "p", "completion": "c"}], step=step)
        logger.log_hyperparams({"lr": 1e-3})
        logger.finish()  # finishing again says nothing
    said = [r.getMessage() for r in log.records if r.levelno >= logging.WARNING]
    assert said == [
        f"rlmetrics: Logger.{call} after Logger.finish(): its trackers are closed, so what it "
        "logs reaches none of them (telemetry still gets metrics); finish the Logger after its "
        "last call. Said once"
        for call in ("log_metrics", "log_trajectories", "log_samples", "log_hyperparams")
    ]
    assert [row["step"] for row in read_jsonl(path)] == [1]
