"""Rollout health: verdicts, flagged checks, check_execution_error, the ignore list shared by
the live counters and the post-run report, and checks offered through the entry-point hook of a
real installed distribution."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from gym_support_client import distribution_root, find, install_distribution
from rlmetrics_gym import health
from rlmetrics_gym.driver import write_output_row
from rlmetrics_gym.health import (
    CHECK_EXECUTION_ERROR,
    FLAGGED,
    VERDICT_TOTAL,
    HealthSuite,
    TrajectoryCheck,
    configure_health,
    configured_health,
    default_suite,
    health_report,
    health_report_from_jsonl,
    load_checks,
    normalize_ignored_checks,
    observe_rollout,
)

from rlmetrics.testing import isolated_state, points

__all__ = ["distribution_root"]  # the fixture, imported for pytest

VERDICT = "nemo.gym.health.verdict"
CHECK = "nemo.gym.health.check"
OUTCOME = "nemo.gym.rollout.outcome"
BUILTIN_IDS = ("response_output_empty", "response_not_completed", "response_zero_output_tokens")


def rollout(
    output: list[Any] | None = None, status: str | None = "completed", tokens: int | None = 12
) -> dict[str, Any]:
    """A Gym rollout record with a Responses-API final response."""
    response: dict[str, Any] = {"output": [] if output is None else output}
    if status is not None:
        response["status"] = status
    if tokens is not None:
        response["usage"] = {"output_tokens": tokens}
    return {"reward": 1.0, "response": response}


MESSAGE = {"type": "message", "content": [{"type": "output_text", "text": "42"}]}
HEALTHY = rollout([MESSAGE])
EMPTY_AND_ZERO = rollout([], tokens=0)  # flagged by two checks
NOT_COMPLETED = rollout([MESSAGE], status="incomplete")
NO_USAGE = rollout([MESSAGE], tokens=None)  # one check cannot run
NO_RESPONSE: dict[str, Any] = {"reward": 0.0}  # no check can run


@pytest.fixture
def suite() -> HealthSuite:
    return HealthSuite(load_checks())


def test_the_builtin_checks_load_through_the_entry_point(suite: HealthSuite) -> None:
    assert {check.id for check in suite.checks} >= set(BUILTIN_IDS)
    assert suite.ids[-1] == CHECK_EXECUTION_ERROR


@pytest.mark.parametrize(
    ("record", "verdict", "flagged", "unobserved"),
    [
        (HEALTHY, "healthy", (), ()),
        (EMPTY_AND_ZERO, "unhealthy", ("response_output_empty", "response_zero_output_tokens"), ()),
        (NOT_COMPLETED, "unhealthy", ("response_not_completed",), ()),
        (NO_USAGE, "unobserved", (), ("response_zero_output_tokens",)),
        (NO_RESPONSE, "unobserved", (), BUILTIN_IDS),
        # Python's json writes NaN; a NaN or negative count says nothing about the tokens.
        (rollout([MESSAGE], tokens=math.nan), "unobserved", (), ("response_zero_output_tokens",)),
        (rollout([MESSAGE], tokens=-1), "unobserved", (), ("response_zero_output_tokens",)),
    ],
)
def test_verdicts(
    suite: HealthSuite,
    record: Mapping[str, Any],
    verdict: str,
    flagged: tuple[str, ...],
    unobserved: tuple[str, ...],
) -> None:
    builtin = HealthSuite([c for c in suite.checks if c.id in BUILTIN_IDS])
    result = builtin.evaluate(record)
    assert (result.verdict, result.flagged, result.unobserved) == (verdict, flagged, unobserved)


def raises(rollout: Mapping[str, Any]) -> list[Any]:
    raise KeyError("the check has a bug")


def test_a_check_that_raises_is_a_check_execution_error_finding() -> None:
    suite = HealthSuite([TrajectoryCheck("buggy", raises), TrajectoryCheck("fine", lambda r: [])])
    result = suite.evaluate(HEALTHY)
    assert result.verdict == "unhealthy"
    assert result.flagged == (CHECK_EXECUTION_ERROR,)
    assert result.findings[CHECK_EXECUTION_ERROR] == (
        {"failed_check": "buggy", "error": "KeyError"},
    )
    assert result.unobserved == ("buggy",)
    # Ignoring check_execution_error leaves the check merely unobserved.
    quiet = suite.with_ignored([CHECK_EXECUTION_ERROR]).evaluate(HEALTHY)
    assert (quiet.verdict, quiet.flagged, quiet.unobserved) == ("unobserved", (), ("buggy",))

    # A generator that raises while its findings are read is the same failure.
    def lazy(rollout: Mapping[str, Any]) -> Any:
        yield {"found": 1}
        raise ValueError("late")

    assert HealthSuite([TrajectoryCheck("lazy", lazy)]).evaluate(HEALTHY).flagged == (
        CHECK_EXECUTION_ERROR,
    )


def test_the_ignore_list_is_normalized_and_unknown_ids_fail_loudly() -> None:
    known = ("a_check", "b_check", CHECK_EXECUTION_ERROR)
    assert normalize_ignored_checks(" b_check, a_check,,b_check ", known) == ("b_check", "a_check")
    assert normalize_ignored_checks(["a_check"], known) == ("a_check",)
    assert normalize_ignored_checks(None, known) == ()
    with pytest.raises(ValueError, match=r"unknown rollout health check.*nope.*known: a_check"):
        normalize_ignored_checks("a_check,nope", known)
    with pytest.raises(ValueError, match="strings"):
        normalize_ignored_checks([1], known)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="duplicate"):
        HealthSuite([TrajectoryCheck("a_check", raises), TrajectoryCheck("a_check", raises)])
    with pytest.raises(ValueError, match="reserved"):
        TrajectoryCheck(CHECK_EXECUTION_ERROR, raises)


def test_live_counters_count_verdicts_and_each_flagging_check_once(telemetry: Any) -> None:
    _, reader = telemetry
    suite = HealthSuite([c for c in load_checks() if c.id in BUILTIN_IDS])
    for record, outcome in [
        (HEALTHY, "scored"),
        (HEALTHY, "scored"),
        (EMPTY_AND_ZERO, "scored"),
        (NOT_COMPLETED, "failed"),
        (NO_USAGE, "scored"),
    ]:
        assert observe_rollout(record, outcome, suite) is not None
    assert observe_rollout(HEALTHY, "omitted", suite) is None  # omitted: not evaluated
    found = points(reader)
    verdicts = {
        (p.attributes[VERDICT], p.attributes[OUTCOME]): p.value for p in find(found, VERDICT_TOTAL)
    }
    assert verdicts == {
        ("healthy", "scored"): 2,
        ("unhealthy", "scored"): 1,
        ("unhealthy", "failed"): 1,
        ("unobserved", "scored"): 1,
    }
    flagged = {(p.attributes[CHECK], p.attributes[OUTCOME]): p.value for p in find(found, FLAGGED)}
    assert flagged == {
        ("response_output_empty", "scored"): 1,
        ("response_zero_output_tokens", "scored"): 1,
        ("response_not_completed", "failed"): 1,
    }
    assert {p.unit for p in find(found, VERDICT_TOTAL) + find(found, FLAGGED)} == {"{rollout}"}


def test_the_ignore_list_is_shared_by_the_counters_and_the_post_run_report(
    telemetry: Any, tmp_path: Path
) -> None:
    _, reader = telemetry
    records = [HEALTHY, EMPTY_AND_ZERO, EMPTY_AND_ZERO, NOT_COMPLETED, NO_USAGE, NO_RESPONSE]
    output = tmp_path / "rollouts.jsonl"
    output.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n{not json\n")
    previous = default_suite()
    try:
        configure_health(
            ignored_checks="response_zero_output_tokens",
            checks=[c for c in load_checks() if c.id in BUILTIN_IDS],
        )
        for record in records:  # the live path, as each scored rollout finishes
            observe_rollout(record, "scored")
        report = health_report_from_jsonl(output)  # the post-run path, same default suite
    finally:
        health._default = previous
    found = points(reader)
    live_verdicts = {p.attributes[VERDICT]: p.value for p in find(found, VERDICT_TOTAL)}
    live_flagged = {p.attributes[CHECK]: p.value for p in find(found, FLAGGED)}
    assert report.ignored == ("response_zero_output_tokens",)
    assert report.rollouts == len(records) and report.unreadable == 1
    assert {k: v for k, v in report.verdicts.items() if v} == live_verdicts
    assert (
        report.flagged == live_flagged == {"response_output_empty": 2, "response_not_completed": 1}
    )
    assert "response_zero_output_tokens" not in live_flagged  # ignored in both
    # NO_USAGE is healthy once the only check that could not run is ignored.
    assert live_verdicts == {"healthy": 2, "unhealthy": 3, "unobserved": 1}


def test_configure_health_refuses_an_unknown_id_and_keeps_the_old_suite() -> None:
    before = default_suite()
    with pytest.raises(ValueError, match="no_such_check"):
        configure_health(ignored_checks=["no_such_check"])
    assert default_suite() is before


def test_report_counts_findings_per_finding_and_rollouts_per_check() -> None:
    def twice(rollout: Mapping[str, Any]) -> list[str]:
        return ["first", "second"]

    report = health_report([HEALTHY, HEALTHY], HealthSuite([TrajectoryCheck("twice", twice)]))
    assert (report.flagged, report.findings) == ({"twice": 2}, {"twice": 4})
    assert report.verdicts == {"healthy": 0, "unhealthy": 2, "unobserved": 0}


THIRD_PARTY = """
from rlmetrics_gym.health import TrajectoryCheck, health_hookimpl

def no_reward(rollout):
    return None if "reward" not in rollout else ([] if rollout["reward"] is not None else [1])

@health_hookimpl
def gym_health_checks():
    return [
        TrajectoryCheck("reward_missing", no_reward),
        TrajectoryCheck("response_output_empty", no_reward),  # clashes with a built-in
        "not a check",
    ]
"""


def test_checks_from_a_real_installed_distribution(
    distribution_root: Path, telemetry: Any, caplog: Any
) -> None:
    _, reader = telemetry
    install_distribution(
        distribution_root,
        "gym-extra-checks",
        {
            "gym_support_client_extra_checks": THIRD_PARTY,
            "gym_support_client_broken_checks": "raise SystemExit('broken at import')",
        },
        {
            "zz_extra": "gym_support_client_extra_checks",
            "zz_broken": "gym_support_client_broken_checks",
        },
    )
    checks = load_checks()  # the telemetry fixture gave this test fresh warn-once keys
    ids = [check.id for check in checks]
    assert "reward_missing" in ids and ids.count("response_output_empty") == 1
    assert set(BUILTIN_IDS) <= set(ids)
    assert "zz_broken" in caplog.text and "offered a str" in caplog.text
    assert "offered by both" in caplog.text
    suite = HealthSuite(checks, ignored=["response_not_completed"])
    result = observe_rollout({"reward": None, "response": {"output": []}}, "scored", suite)
    assert result is not None
    assert result.flagged == ("response_output_empty", "reward_missing")
    (point,) = find(points(reader), FLAGGED, **{CHECK: "reward_missing"})
    assert point.value == 1


def test_nothing_is_evaluated_without_telemetry() -> None:
    calls: list[int] = []

    def counting(rollout: Mapping[str, Any]) -> list[Any]:
        calls.append(1)
        return []

    with isolated_state():
        assert (
            observe_rollout(HEALTHY, "scored", HealthSuite([TrajectoryCheck("c", counting)]))
            is None
        )
    assert calls == []


def test_configured_health_sets_the_default_suite_for_a_block_only() -> None:
    from rlmetrics_gym.health import configured_health

    before = default_suite()
    with configured_health(ignored_checks=["response_zero_output_tokens"]) as suite:
        assert default_suite() is suite and suite.ignored == ("response_zero_output_tokens",)
    assert default_suite() is before
    with pytest.raises(RuntimeError), configured_health(ignored_checks=[]):
        raise RuntimeError("the block failed")
    assert default_suite() is before
    with (
        pytest.raises(ValueError, match="no_such_check"),
        configured_health(ignored_checks=["no_such_check"]),
    ):
        pass
    assert default_suite() is before


def test_a_report_over_output_cut_mid_character_counts_the_cut_line_unreadable(
    tmp_path: Path,
) -> None:
    # The driver writes rows as UTF-8 (ensure_ascii=False); a run killed mid-write leaves a
    # last line cut inside a multi-byte character.
    line = json.dumps({**HEALTHY, "answer": "héllo"}, ensure_ascii=False) + "\n"
    cut = line.encode("utf-8")[: line.encode("utf-8").index("é".encode()) + 1]
    output = tmp_path / "rollouts.jsonl"
    output.write_bytes(line.encode("utf-8") * 2 + cut)

    report = health_report_from_jsonl(output)

    assert report.rollouts == 2 and report.unreadable == 1
    assert report.verdicts["healthy"] == 2


@pytest.mark.parametrize("junk", [None, [HEALTHY], "a row", 42])
def test_a_rollout_that_is_not_a_mapping_is_not_evaluated_live_or_in_the_report(
    telemetry: Any, junk: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, reader = telemetry
    with configured_health(checks=[c for c in load_checks() if c.id in BUILTIN_IDS]):
        assert observe_rollout(junk, "scored") is None
        observe_rollout(HEALTHY, "scored")
        report = health_report([junk, HEALTHY])
    found = points(reader)
    # The junk is neither a rollout the checks flagged nor one they broke on.
    assert {p.attributes[VERDICT]: p.value for p in find(found, VERDICT_TOTAL)} == {"healthy": 1}
    assert find(found, FLAGGED) == []
    assert report.rollouts == 1 and report.unreadable == 1 and report.flagged == {}
    assert "not a mapping" in caplog.text and "raised" not in caplog.text


@pytest.mark.parametrize("opener", [gzip.open, bz2.open, lzma.open])
def test_a_report_reads_the_compressed_output_write_output_row_wrote(
    telemetry: Any, tmp_path: Path, opener: Any
) -> None:
    """write_output_row writes to gzip, bz2 and lzma files; the report over that output read
    every line of it as unreadable: 0 rollouts."""
    output = tmp_path / "rollouts.jsonl.z"
    with opener(output, "wb") as handle:
        for record in (HEALTHY, NOT_COMPLETED):
            write_output_row(handle, record)

    report = health_report_from_jsonl(output)

    assert (report.rollouts, report.unreadable) == (2, 0)
    assert report.flagged.get("response_not_completed") == 1
    # A run killed mid-write leaves the stream cut: what came before it still counts.
    data = output.read_bytes()
    output.write_bytes(data[: len(data) - 8])
    cut = health_report_from_jsonl(output)
    assert (cut.rollouts, cut.unreadable) == (2, 1)
