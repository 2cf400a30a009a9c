"""RunIdentity: one run id for every tracker, mapped the same way every time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.configuration import ConfigurationError
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


_LAUNCHER_VARIABLES = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "OTEL_RESOURCE_ATTRIBUTES")


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """``launched(variable=value, ...)``: only these launcher variables set, and a
    configuration file (``resume = true`` in both tables) that ``rlmetrics config`` reads."""
    path = tmp_path / "rlmetrics.toml"
    path.write_text("[telemetry]\nresume = true\n\n[logger]\nresume = true\n")
    monkeypatch.setenv("RLMETRICS_CONFIG", str(path))

    def set_only(**variables: str) -> None:
        for name in _LAUNCHER_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)

    return set_only


@pytest.mark.parametrize(
    ("variables", "resumed"),
    [
        ({"SLURM_JOB_ID": "4242"}, "4242"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team=rl,rlmetrics.run.id=r7"}, "r7"),
        # The SDK reads the variable's last item of a key (a runtime_env appending its own).
        ({"OTEL_RESOURCE_ATTRIBUTES": "rlmetrics.run.id=r1,rlmetrics.run.id=r2"}, "r2"),
        # Another attribute whose name ends so names no run.
        ({"OTEL_RESOURCE_ATTRIBUTES": "old.rlmetrics.run.id=r7"}, None),
        # A relaunched `torchrun --standalone` makes a new rendezvous id: no run to continue.
        ({"TORCHELASTIC_RUN_ID": "c0ffee"}, None),
        ({}, None),
    ],
    ids=["slurm", "resource", "resource-last", "other-attribute", "torchrun", "none"],
)
def test_start_logger_and_config_agree_on_which_run_a_resume_continues(
    launched: Any, capsys: Any, variables: dict[str, str], resumed: str | None
) -> None:
    """Before: three readings of "a run id comes from elsewhere". start(resume=True) took any
    text holding ``rlmetrics.run.id=`` (and so continued a generated id), the Logger only
    SLURM_JOB_ID (refusing a Ray worker's OTEL_RESOURCE_ATTRIBUTES id that start() took), and
    the config command took the variable's first item where the SDK takes its last."""
    from rlmetrics.cli import main

    launched(**variables)
    if resumed is None:
        with pytest.raises(ConfigurationError, match="pass run_id="):
            rlmetrics.start(resume=True)
        with pytest.raises(ValueError, match="pass run_id="):
            rlmetrics.Logger(backends={}, resume=True)
        assert main(["config"]) == 2
        said = capsys.readouterr().err
        # It names every place a run id would have come from (not only SLURM_JOB_ID).
        assert "SLURM_JOB_ID" in said and "OTEL_RESOURCE_ATTRIBUTES" in said, said
        return
    with rlmetrics.start(resume=True) as handle:
        assert (handle.run_id, handle.resume) == (resumed, True)
    logger = rlmetrics.Logger(backends={}, resume=True)
    logger.finish()
    assert logger.identity == RunIdentity(resumed, resume=True)
    assert main(["config"]) == 0
    assert f"telemetry.run_id = {resumed!r}" in capsys.readouterr().out


@pytest.mark.parametrize("attributes", ["rlmetrics.run.id=,team=rl", "rlmetrics.run.id=%20"])
def test_an_empty_run_id_in_the_resource_variable_is_refused_naming_it(
    launched: Any, capsys: Any, attributes: str
) -> None:
    """Before: ``OTEL_RESOURCE_ATTRIBUTES=rlmetrics.run.id=$RUN`` with RUN unset started
    telemetry under the run id '' (on every point), and the first Logger then refused it with
    'a run id is a non-empty string' naming no source; the config command said nothing. An
    empty id is refused as an empty ``run_id=`` is, naming the variable; an id given in code
    wins over it as over any."""
    from rlmetrics.cli import main

    launched(OTEL_RESOURCE_ATTRIBUTES=attributes)
    for make in (rlmetrics.start, lambda: rlmetrics.Logger(backends={})):
        with pytest.raises(ConfigurationError, match="OTEL_RESOURCE_ATTRIBUTES") as caught:
            make()
        assert "rlmetrics.run.id" in str(caught.value)
        assert rlmetrics.current() is None
    assert main(["config"]) == 2
    assert "OTEL_RESOURCE_ATTRIBUTES" in capsys.readouterr().err
    with rlmetrics.start(run_id="given") as handle:
        assert handle.run_id == "given"
    with pytest.raises(ConfigurationError, match=r"rlmetrics\.run\.id' is ' '"):
        rlmetrics.start(run_id=None, resource={"rlmetrics.run.id": " "})
