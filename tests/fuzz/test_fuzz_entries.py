"""Every public entry under hostile input: no exception reaches the caller, each call
returns within a bound, and every good value of the same call lands — read back from the
in-memory reader and from the JSONL file.

The default run uses the ``suite`` hypothesis profile (100 examples a property); the
``fuzz`` tox env runs the ``fuzz`` profile (10**5 examples each). See docs/testing.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from fuzz_hostile import hostile_dicts, hostile_keys, hostile_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlmetrics
import rlmetrics.flatten
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.events import (
    CheckpointOutcome,
    CheckpointRestore,
    CheckpointSave,
    EfficiencySummary,
    RolloutEvent,
    SetupTimings,
    ThroughputSample,
)
from rlmetrics.plugins import register
from rlmetrics.testing import in_memory_telemetry, points
from rlmetrics.values import as_number

#: A liveness bound, not a performance figure: a call that takes longer is stuck.
CALL_BOUND_S = 5.0

_good = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
_steps = st.one_of(st.integers(), hostile_values)
# Health checks: the strategies are deliberately large and slow to draw.
_fuzz = settings(suppress_health_check=list(HealthCheck))


def _timed(call: Callable[[], Any]) -> None:
    started = time.monotonic()
    call()  # an exception here fails the property: nothing may reach the caller
    took = time.monotonic() - started
    assert took < CALL_BOUND_S, f"a call took {took:.1f} s"


def _without(metrics: dict[Any, Any], reserved: Callable[[str], bool]) -> dict[Any, Any]:
    """The hostile dict minus top-level keys that would land on a good value's series."""
    return {k: v for k, v in metrics.items() if not (isinstance(k, str) and reserved(k))}


def _value(reader: Any, name: str, **attributes: Any) -> Any:
    found = [
        p
        for p in points(reader)
        if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, found)
    point = found[0]
    return point.value if point.kind != "histogram" else (point.count, point.sum)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[rlmetrics.Logger, Any, Path]]:
    path = tmp_path / "fuzz.jsonl"
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        yield logger, reader, path
        logger.finish()


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _last_row(path: Path, offset: int) -> dict[str, Any]:
    """The last row written since ``offset`` (the file grows by rows every example: reading
    it whole each time would make the run quadratic)."""
    with path.open("rb") as handle:
        handle.seek(offset)
        rows = handle.read().decode("utf-8", errors="replace").splitlines()
    return dict(json.loads(rows[-1]))


def test_fuzz_log_metrics(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, path = session

    @_fuzz
    @given(hostile=hostile_dicts, reward=_good, loss=_good, step=_steps, prefix=hostile_keys)
    def check(hostile: dict[Any, Any], reward: float, loss: float, step: Any, prefix: Any) -> None:
        metrics = {**_without(hostile, {"reward", "loss"}.__contains__), "reward": reward}
        metrics["loss"] = loss
        _timed(lambda: logger.log_metrics(hostile, step=step, prefix=prefix))
        offset = _size(path)
        _timed(lambda: logger.log_metrics(metrics, step=step, prefix="train"))
        assert _value(reader, "rl.reward.mean") == reward
        assert _value(reader, "rl.policy.loss") == loss
        row = _last_row(path, offset)
        assert (row["metrics"]["reward"], row["metrics"]["loss"]) == (reward, loss)

    check()


def test_fuzz_log_setup_timing(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, path = session

    def reserved(key: str) -> bool:
        return key in ("policy_init_time_s", "policy_init_s")

    @_fuzz
    @given(hostile=hostile_dicts, seconds=_good.map(abs))
    def check(hostile: dict[Any, Any], seconds: float) -> None:
        timings = {**_without(hostile, reserved), "policy_init_time_s": seconds}
        offset = _size(path)
        _timed(lambda: logger.log_setup_timing(timings))
        assert _value(reader, "rl.setup.duration", **{"rl.setup.phase": "policy_init"}) == seconds
        assert _last_row(path, offset)["metrics"]["policy_init_time_s"] == seconds

    check()


def test_fuzz_log_efficiency_summary(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, path = session

    @_fuzz
    @given(hostile=hostile_dicts, seconds=_good.map(abs), step=_steps)
    def check(hostile: dict[Any, Any], seconds: float, step: Any) -> None:
        # The typed payload's parser meets the hostile dict; the summary logged is good.
        _timed(lambda: EfficiencySummary.from_metrics(hostile))
        _timed(lambda: SetupTimings.from_metrics(hostile))
        summary = EfficiencySummary(seconds={"idle/validation": seconds}, step_wall_time_s=1e7)
        offset = _size(path)
        _timed(lambda: logger.log_efficiency_summary(summary, step=step))
        category = {"rl.efficiency.category": "idle/validation"}
        assert _value(reader, "rl.efficiency.seconds", **category) == seconds
        assert _last_row(path, offset)["metrics"]["efficiency/idle/validation_s"] == seconds

    check()


def _saves(reader: Any) -> tuple[int, float]:
    """(count, sum) of the total_save phase so far (0, 0.0 before the first)."""
    found = [
        p
        for p in points(reader)
        if p.name == "rl.rollout.checkpoint.duration"
        and p.attributes.get("rl.rollout.checkpoint.phase") == "total_save"
    ]
    return (found[0].count or 0, found[0].sum or 0.0) if found else (0, 0.0)


def test_fuzz_log_rollout_checkpoint(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, _path = session

    def reserved(key: str) -> bool:
        return key in ("total_save_seconds", "snapshot_rows")

    @_fuzz
    @given(
        hostile=hostile_dicts,
        seconds=_good.map(abs),
        rows=st.integers(0, 10**9),
        wall=hostile_values,
        reason=st.one_of(st.none(), st.text(max_size=30)),
    )
    def check(hostile: dict[Any, Any], seconds: float, rows: int, wall: Any, reason: Any) -> None:
        values = {**_without(hostile, reserved), "total_save_seconds": seconds}
        values["snapshot_rows"] = rows
        count, total = _saves(reader)
        _timed(lambda: logger.log_rollout_checkpoint(CheckpointSave(values, wall_time_s=wall)))
        assert _saves(reader) == (count + 1, total + seconds)
        _timed(lambda: logger.log_rollout_checkpoint(ThroughputSample(hostile)))
        outcome = CheckpointOutcome(outcome="failed", reason=reason)
        _timed(lambda: logger.log_rollout_checkpoint(outcome))
        _timed(lambda: logger.log_metrics(hostile, step=0, prefix="rollout/checkpoint_outcome"))
        assert _value(reader, "rl.rollout.checkpoint.snapshot.rows") == rows

    check()


def test_fuzz_record(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    _logger, reader, _path = session

    @_fuzz
    @given(
        hostile=hostile_dicts,
        attributes=st.one_of(
            st.none(), hostile_dicts, st.dictionaries(hostile_keys, hostile_values)
        ),
        reward=_good,
    )
    def check(hostile: dict[Any, Any], attributes: Any, reward: float) -> None:
        _timed(lambda: rlmetrics.record("rl.train", hostile, attributes))
        for group in ("no.such.group", *hostile):  # hostile group names too
            _timed(lambda group=group: rlmetrics.record(group, hostile))
        _timed(lambda: rlmetrics.retract("rl.train", "reward", attributes))
        _timed(lambda: rlmetrics.record("rl.train", {**hostile, "reward": reward}))
        assert _value(reader, "rl.reward.mean") == reward

    check()


_json_rows = st.fixed_dictionaries(
    {"step": st.integers(-(2**63), 2**63 - 1), "prefix": st.text(max_size=10)},
    optional={"metrics": st.dictionaries(st.text(max_size=10), _good, max_size=4)},
)
_garbage = st.one_of(
    st.text(max_size=200).map(lambda s: s.replace("\n", " ")),
    st.integers(1, 200_000).map(lambda n: "[" * n),
    st.integers(4301, 6000).map(lambda n: '{"step": ' + "9" * n + "}"),
    st.just('{"time": 1.0, "step": 2, "pre'),
    st.just("[1, 2, 3]"),
)


def test_fuzz_read_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "read.jsonl"

    @_fuzz
    @given(lines=st.lists(st.one_of(_json_rows, _garbage), max_size=8))
    def check(lines: list[Any]) -> None:
        good = [line for line in lines if isinstance(line, dict)]
        text = (json.dumps(line) if isinstance(line, dict) else line for line in lines)
        path.write_text("".join(line + "\n" for line in text))
        read: list[dict[str, Any]] = []
        _timed(lambda: read.extend(read_jsonl(path)))
        # Every good row, in order; a garbage line that happens to be a JSON object is a row too.
        assert [r for r in read if r in good] == good

    check()


# -- typed payloads: a hostile field drops only itself ------------------------------------------

_fields = st.one_of(_good, hostile_values)


def _number(value: Any) -> float | None:
    """What a payload's optional number field keeps of ``value``: a finite number within a
    float's range, else None."""
    number = as_number(value)
    try:
        float(number or 0)
    except OverflowError:
        return None
    return number


def test_fuzz_efficiency_summary_fields(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, path = session

    @_fuzz
    @given(
        seconds=_good.map(abs),
        hostile=hostile_dicts,
        wall=_fields,
        elapsed=_fields,
        pct=_fields,
        per_step=st.one_of(st.booleans(), hostile_values),
        step=st.integers(0, 10**6),
    )
    def check(
        seconds: float, hostile: Any, wall: Any, elapsed: Any, pct: Any, per_step: Any, step: int
    ) -> None:
        categories = {**_without(hostile, "idle/validation".__eq__), "idle/validation": seconds}
        summary: list[EfficiencySummary] = []
        _timed(
            lambda: summary.append(
                EfficiencySummary(
                    categories,
                    step_wall_time_s=wall,
                    run_elapsed_s=elapsed,
                    efficiency_pct=pct,
                    pct_per_step=per_step,
                )
            )
        )
        offset = _size(path)
        _timed(lambda: logger.log_efficiency_summary(summary[0], step=step))
        category = {"rl.efficiency.category": "idle/validation"}
        assert _value(reader, "rl.efficiency.seconds", **category) == seconds
        row = _last_row(path, offset)
        assert row["step"] == step
        metrics = row["metrics"]
        assert metrics["efficiency/idle/validation_s"] == seconds
        for key, given_value, duration in (
            ("efficiency/step_wall_time_s", wall, True),
            ("efficiency/total_wall_time_s", elapsed, True),
            ("efficiency/efficiency_pct", pct, False),
        ):
            kept = _number(given_value)
            if duration and kept is not None and kept < 0:  # a clock read the wrong way
                kept = None
            assert metrics.get(key) == kept, key

    check()


_GOOD_GAUGE = {
    CheckpointSave: ("snapshot_rows", "rl.rollout.checkpoint.snapshot.rows"),
    CheckpointRestore: ("siblings_reused", "rl.rollout.recovery.siblings.reused"),
    ThroughputSample: ("committed_groups_per_second", "rl.rollout.throughput.committed_groups"),
    CheckpointOutcome: (
        "seconds_since_last_success",
        "rl.rollout.checkpoint.since_last_success",
    ),
}


def _attempts(reader: Any, outcome: str) -> float:
    return sum(
        p.value or 0
        for p in points(reader)
        if p.name == "rl.rollout.checkpoint.attempts"
        and p.attributes.get("rl.rollout.checkpoint.outcome") == outcome
    )


def test_fuzz_rollout_event_fields(session: tuple[rlmetrics.Logger, Any, Path]) -> None:
    logger, reader, path = session

    @_fuzz
    @given(
        kind=st.sampled_from(sorted(_GOOD_GAUGE, key=lambda t: t.__name__)),
        good=st.integers(0, 10**9),
        hostile=hostile_dicts,
        values=st.one_of(st.none(), hostile_values),
        wall=_fields,
        outcome=st.one_of(st.sampled_from(["completed", "skipped", "failed"]), hostile_values),
        reason=st.one_of(st.none(), st.text(max_size=20), hostile_values),
    )
    def check(
        kind: type[RolloutEvent],
        good: int,
        hostile: Any,
        values: Any,
        wall: Any,
        outcome: Any,
        reason: Any,
    ) -> None:
        field, series = _GOOD_GAUGE[kind]
        # Every field hostile but one good value: the hostile ``values`` alone, then the dict.
        _timed(lambda: kind(values, wall_time_s=wall))
        fields = {**_without(hostile, field.__eq__), field: good}
        extra = {"outcome": outcome, "reason": reason} if kind is CheckpointOutcome else {}
        event: list[RolloutEvent] = []
        _timed(lambda: event.append(kind(fields, wall_time_s=wall, **extra)))
        counted = {o: _attempts(reader, o) for o in ("completed", "skipped", "failed")}
        offset = _size(path)
        _timed(lambda: logger.log_rollout_checkpoint(event[0]))
        assert _value(reader, series) == good
        row = _last_row(path, offset)
        assert row["prefix"] == kind.PREFIX
        assert row["metrics"][field] == good
        assert isinstance(row["metrics"]["telemetry/wall_time_seconds"], float)
        if kind is CheckpointOutcome:
            valid = outcome if isinstance(outcome, str) else None
            for name, before in counted.items():
                assert row["metrics"][name] == float(name == valid)
                assert _attempts(reader, name) == before + (name == valid)

    check()


# -- dicts past every cap ---------------------------------------------------------------------


def test_fuzz_dicts_past_every_cap(
    session: tuple[rlmetrics.Logger, Any, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past the key cap the teed key (``loss``) and the step's own key survive wherever they
    come in the dict, the cut counts what it dropped, and nesting past the depth cap is
    reported. The key cap is lowered to 40 so an example costs a dict of ~100 keys, not of
    10,000: the same code runs, at any cap."""
    logger, reader, path = session
    cap = 40
    monkeypatch.setattr(rlmetrics.flatten, "MAX_FLAT_KEYS", cap)

    @_fuzz
    @given(
        filler=st.integers(0, 3 * cap),
        loss_at=st.integers(0, 3 * cap),
        step_at=st.integers(0, 3 * cap),
        depth=st.integers(0, 2 * rlmetrics.flatten.MAX_DEPTH),
        loss=_good,
    )
    def check(filler: int, loss_at: int, step_at: int, depth: int, loss: float) -> None:
        deep: dict[str, Any] = {"leaf": 1.0}
        for _ in range(depth):
            deep = {"d": deep}
        items: list[tuple[str, Any]] = [(f"filler/{i}", float(i)) for i in range(filler)]
        items.insert(min(loss_at, len(items)), ("loss", loss))
        items.insert(min(step_at, len(items)), ("rlmetrics/step", 9))
        items.append(("deep", deep))
        metrics = dict(items)
        caplog.clear()
        offset = _size(path)
        with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
            _timed(lambda: logger.log_metrics(metrics, step=1, prefix="train"))
        assert _value(reader, "rl.policy.loss") == loss
        row = _last_row(path, offset)["metrics"]
        assert (row["loss"], row["rlmetrics/step"]) == (loss, 9)
        # Every leaf is one key (the deep one too); past the cap, loss and the step survive.
        keys = len(items)
        dropped = max(0, keys - cap) - sum(1 for key, _ in items[cap:] if key in row)
        assert len(row) == keys - dropped
        cut = f"{keys} keys, more than {cap}; {dropped} keys past the cap were dropped"
        assert (cut in caplog.text) == (dropped > 0)
        too_deep = depth + 1 > rlmetrics.flatten.MAX_DEPTH
        assert ("nested more than" in caplog.text) == too_deep

    check()


# -- what a queued backend writes is what was logged at the call -----------------------------


class _Gated:
    """A queued backend that writes each row only once the loop has logged and mutated the
    example's rows (as a lagging tracker thread would), and announces each row it wrote."""

    gate: ClassVar[threading.Event] = threading.Event()
    wrote: ClassVar[threading.Condition] = threading.Condition()
    rows: ClassVar[list[tuple[Any, Any]]] = []

    def log_metrics(self, metrics: Any, step: Any, prefix: str) -> None:
        self.gate.wait(60)
        row = (repr(dict(metrics)), repr(step))  # serialised now, on the backend's thread
        with self.wrote:
            self.rows.append(row)
            self.wrote.notify_all()

    def finish(self) -> None: ...


class _OffersGated:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("gated", _Gated)


def _plain(value: Any) -> Any:
    """The oracle: ``value`` as it was at the call, written out for the types drawn below (a
    longer array as a copy of itself)."""
    if isinstance(value, np.ndarray):
        return value.item() if value.size == 1 else value.copy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


_finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
_mutable = st.one_of(
    st.lists(_finite_floats, min_size=1, max_size=6).map(np.array),
    st.lists(st.integers(-(2**31), 2**31), max_size=6),
    st.lists(st.lists(_finite_floats, max_size=3), max_size=3),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(np.float32),
    st.integers(-(2**31), 2**31).map(lambda n: np.array([n])),
)
_rows = st.lists(
    st.dictionaries(
        st.text(alphabet="abcxyz", min_size=1, max_size=4),
        st.one_of(_mutable, st.dictionaries(st.sampled_from("pq"), _mutable, max_size=2)),
        min_size=1,
        max_size=5,
    ),
    min_size=1,
    max_size=4,
)


def _mutate(value: Any) -> None:
    """Refill a buffer in place, as a loop does right after logging it."""
    if isinstance(value, np.ndarray):
        value[...] = -1
    elif isinstance(value, list):
        value.append(-1)
        for item in value:
            _mutate(item)
    elif isinstance(value, dict):
        for item in value.values():
            _mutate(item)
        value["mutated"] = -1


def test_fuzz_a_queued_backend_writes_what_was_logged_at_the_call(tmp_path: Path) -> None:
    assert register(_OffersGated(), "offers-gated")
    logger = rlmetrics.Logger(
        backends={"gated": {}, "jsonl": {"path": tmp_path / "q.jsonl"}}, queue_size=100
    )
    step = np.array(0)

    @_fuzz
    @given(rows=_rows)
    def check(rows: list[dict[str, Any]]) -> None:
        _Gated.gate.clear()
        _Gated.rows.clear()
        expected = []
        for index, row in enumerate(rows):
            flat = {
                f"{key}/{inner}" if isinstance(value, dict) else key: _plain(v)
                for key, value in row.items()
                for inner, v in (value.items() if isinstance(value, dict) else [(None, value)])
            }
            step[...] = index
            expected.append((repr(flat), repr(index)))
            _timed(lambda row=row: logger.log_metrics(row, step=step, prefix="train"))
            _mutate(row)
            step[...] = -1
        _Gated.gate.set()
        with _Gated.wrote:
            assert _Gated.wrote.wait_for(lambda: len(_Gated.rows) >= len(rows), timeout=60)
        assert _Gated.rows == expected

    try:
        check()
    finally:
        _Gated.gate.set()
        logger.finish(timeout_s=30)
