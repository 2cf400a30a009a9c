from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.families.setup import map_setup_seconds, setup_phase
from rlmetrics.testing import points

TIMINGS = {
    "generation_init_time_s": 30.0,
    "generation_init_reserve_time_s": 10.0,
    "generation_init_load_time_s": 20.0,
    "policy_init_time_s": 25.0,
    "vllm_nccl_sparse_init_time_s": 1.5,
    "total_setup_time_s": 61.0,
    "parallel_wall_s": 31.0,
    "parallel_init_enabled": 1.0,
    "teacher_model_init_time_s": None,
    "collective_init_time_s": "pending",
    "weight_sync_time_s": 0.0,
}
EXPECTED = {
    "generation_init": 30.0,
    "generation_init_reserve": 10.0,
    "generation_init_load": 20.0,
    "policy_init": 25.0,
    "vllm_nccl_sparse_init": 1.5,
    "total_setup": 61.0,
    "parallel_wall": 31.0,
    "weight_sync": 0.0,
}


def _phases(reader: Any) -> dict[str, float]:
    found = [p for p in points(reader) if p.name == "rl.setup.duration"]
    assert all(p.kind == "gauge" and p.unit == "s" for p in found)
    assert all(set(p.attributes) == {"rl.setup.phase"} for p in found)  # no rl.bucket
    return {p.attributes["rl.setup.phase"]: p.value for p in found}


def test_setup_dict_through_log_metrics(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(TIMINGS, step=0, prefix="timing/setup")
    assert _phases(reader) == EXPECTED


def test_typed_setup_timing(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_setup_timing({"total_setup_time_s": 5.0, "parallel_init_enabled": 0.0})
    assert _phases(reader) == {"total_setup": 5.0}


def test_setup_keys_under_other_prefixes_are_not_phases(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"policy_init_time_s": 3.0}, step=1, prefix="train")
    assert _phases(reader) == {}


def test_phase_set_is_capped(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_setup_timing({f"phase{i}_time_s": float(i) for i in range(80)})
    assert len(_phases(reader)) == 64


def test_setup_phase_examples() -> None:
    assert setup_phase("generation_init_time_s") == "generation_init"
    assert setup_phase("parallel_wall_s") == "parallel_wall"
    assert setup_phase("parallel_init_enabled") is None
    assert setup_phase("_s") is None
    assert map_setup_seconds(TIMINGS) == {**EXPECTED, "collective_init": "pending"}


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=20)


@given(phase=_names.filter(lambda p: not p.endswith("_time")))
def test_setup_phase_strips_exactly_one_suffix(phase: str) -> None:
    assert setup_phase(phase + "_time_s") == phase
    assert setup_phase(phase + "_s") == phase


@given(key=st.text(max_size=30))
def test_setup_phase_is_none_exactly_for_non_durations(key: str) -> None:
    phase = setup_phase(key)
    if phase is None:
        assert not key.endswith("_s") or key == "_s"
    else:
        assert phase and key in (phase + "_s", phase + "_time_s")
        if key.endswith("_time_s") and len(key) > len("_time_s"):
            assert key == phase + "_time_s"
