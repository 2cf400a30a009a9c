from __future__ import annotations

import logging
from typing import Any

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
    found = [p for p in points(reader) if p.name == "rl.setup.duration"]
    phases = [p for p in found if "rl.setup.phase" in p.attributes]
    # Past the cap, one overflow point (the last phase folded), as the OTel SDK records it.
    (overflow,) = [p for p in found if p.attributes == {"otel.metric.overflow": True}]
    assert (len(phases), len(found), overflow.value) == (64, 65, 79.0)


def test_a_phase_outside_the_safe_charset_is_dropped_without_printing_it(
    exporting: Any, caplog: Any
) -> None:
    logger, reader = exporting
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_setup_timing(
            {
                "token=hunter2 init_time_s": 1.0,
                ("x" * 100) + "_time_s": 2.0,
                "policy_init_time_s": 3.0,
            }
        )
    assert _phases(reader) == {"policy_init": 3.0}
    assert "hunter2" not in caplog.text and "x" * 100 not in caplog.text
    assert "a str of length 18" in caplog.text  # the phase: the key without "_time_s"


def test_a_duration_that_is_no_number_of_seconds_drops_only_itself_said_once(
    exporting: Any, caplog: Any
) -> None:
    logger, reader = exporting
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_setup_timing(
            {
                "policy_init_time_s": 3.0,
                "generation_init_time_s": float("nan"),
                "weight_sync_time_s": -2.0,
                "collective_init_time_s": "pending",
                "teacher_model_init_time_s": None,  # not measured: nothing to say
                "parallel_init_enabled": True,
            }
        )
    assert _phases(reader) == {"policy_init": 3.0}
    said = [r.getMessage() for r in caplog.records if "setup" in r.getMessage()]
    assert len(said) == 1, said
    assert "3 setup duration(s)" in said[0] and "'generation_init'" in said[0]
