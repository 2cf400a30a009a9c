"""RunIdentity: one run id for every tracker, mapped the same way every time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.identity import RunIdentity, new_run_id, with_tracker_setting

REFUSED = "/\\#?%:"


def test_a_fine_id_is_kept_and_a_refused_one_mapped_with_a_hash() -> None:
    assert RunIdentity("grpo-7b_3").tracker_id(REFUSED) == "grpo-7b_3"
    mapped = RunIdentity("exp:3/seed1").tracker_id(REFUSED)
    assert mapped.startswith("exp-3-seed1-") and len(mapped) == len("exp-3-seed1-") + 8


def test_new_ids_come_from_slurm_then_torchrun_else_are_random(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "rdzv-7")
    assert new_run_id() == "4242"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert new_run_id() == "rdzv-7"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's word for no id
    assert new_run_id() != new_run_id()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert new_run_id() != new_run_id()


@pytest.mark.parametrize("bad", ["", "  ", None, 3])
def test_a_run_id_is_a_non_empty_string(bad: object) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        RunIdentity(bad)  # type: ignore[arg-type]


@given(st.text(min_size=1), st.text(min_size=1), st.integers(min_value=16, max_value=128))
def test_tracker_ids_are_valid_stable_and_never_shared(a: str, b: str, length: int) -> None:
    if not a.strip() or not b.strip():
        return
    mapped = RunIdentity(a).tracker_id(REFUSED, length)
    assert len(mapped) <= length
    assert not any(ch in REFUSED or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in mapped)
    assert mapped == RunIdentity(a).tracker_id(REFUSED, length)
    if a != b:
        assert mapped != RunIdentity(b).tracker_id(REFUSED, length)


def test_a_tracker_setting_is_added_unless_the_users_settings_hold_it() -> None:
    # (A tracker's own pydantic settings: the W&B and SwanLab plugins' tests.)
    assert with_tracker_setting(None, "init_timeout", 3.0) == {"init_timeout": 3.0}
    theirs = {"console": "off"}
    assert with_tracker_setting(theirs, "init_timeout", 3.0) == {
        "console": "off",
        "init_timeout": 3.0,
    }
    assert theirs == {"console": "off"}  # the user's dict is left as it was
    assert with_tracker_setting({"init_timeout": 9}, "init_timeout", 3.0) == {"init_timeout": 9}


def test_whether_an_id_was_given_is_no_part_of_the_identity() -> None:
    """``given`` (chosen by someone, not generated here) decides whether a rank takes rank
    0's id (docs/ranks.md); two identities of one id are one identity either way."""
    assert RunIdentity("r").given and not RunIdentity("r", given=False).given
    assert RunIdentity("r", given=False) == RunIdentity("r")
    assert hash(RunIdentity("r", given=False)) == hash(RunIdentity("r"))
