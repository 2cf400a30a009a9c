"""Four gloo ranks on 127.0.0.1 train a tiny DDP model and log through one Logger each: every
declared reduction gives, on rank 0, the value computed by hand from the four ranks' raw
JSONL; the trackers get one row per step; a slow rank is named by the straggler series; a
NaN, a key set one rank lacks, a late rank and a rank that dies mid-run are handled."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import wait_until

WORLD = 4
WORKER = Path(__file__).with_name("rank_worker.py")
sys.path.insert(0, str(WORKER.parent))
import rank_worker  # noqa: E402  (the worker's own numbers, recomputed here)

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
from stack_support import Stack  # noqa: E402  (rlmetrics stack and its Prometheus' API)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_ranks(
    scenario: str, folder: Path, pg_timeout_s: float = 120.0
) -> list[subprocess.Popen[str]]:
    """The four ranks as subprocesses, started."""
    port = _free_port()
    procs = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "GLOO_SOCKET_IFNAME": "lo",
            "RLMETRICS_TEST_PG_TIMEOUT": str(pg_timeout_s),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), scenario, str(folder)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def wait_ranks(
    procs: list[subprocess.Popen[str]], folder: Path, timeout_s: float = 600.0
) -> list[int]:
    """The ranks' exit codes, their output kept in the folder. Bounded by ``timeout_s`` in
    all: importing torch alone takes a minute per process on a busy two-core host."""
    deadline = time.monotonic() + timeout_s
    codes = []
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        (folder / f"out{rank}.txt").write_text(out)
        codes.append(proc.returncode)
    return codes


def run_ranks(
    scenario: str, folder: Path, timeout_s: float = 600.0, pg_timeout_s: float = 120.0
) -> list[int]:
    """The four ranks run to their end; their exit codes."""
    return wait_ranks(start_ranks(scenario, folder, pg_timeout_s), folder, timeout_s)


def raw_rows(folder: Path) -> dict[int, dict[int, dict[str, Any]]]:
    """``{rank: {step: metrics}}`` from each rank's raw file."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for rank in range(WORLD):
        for row in read_jsonl(folder / f"rank{rank}.jsonl"):
            assert row["rank"] == rank
            assert row["host"] == socket.gethostname()
            out.setdefault(rank, {})[row["step"]] = row["metrics"]
    return out


def tracker_rows(folder: Path, rank: int) -> list[dict[str, Any]]:
    path = folder / f"tracker{rank}.jsonl"
    if not path.exists():
        return []
    return [row for row in read_jsonl(path) if "metrics" in row]


def _finite(values: list[Any]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kinds")
    codes = run_ranks("kinds", folder)
    assert codes == [0] * WORLD, [(folder / f"out{r}.txt").read_text() for r in range(WORLD)]
    return folder


def test_each_declared_kind_is_the_hand_computed_value_of_the_raw_rows(kinds: Path) -> None:
    raw = raw_rows(kinds)
    rows = tracker_rows(kinds, 0)
    assert [row["step"] for row in rows] == list(range(rank_worker.STEPS))
    for row in rows:
        step, merged = row["step"], row["metrics"]
        column = {k: [raw[r][step].get(k) for r in range(WORLD)] for k in raw[0][step]}
        column["only/rank3"] = [raw[r][step].get("only/rank3") for r in range(WORLD)]
        assert merged["num_samples"] == math.fsum(column["num_samples"])  # sum
        weights = column["num_samples"]
        assert merged["reward"] == math.fsum(
            v * w for v, w in zip(column["reward"], weights, strict=True)
        ) / math.fsum(weights)  # weighted mean
        losses = _finite(column["loss"])
        assert merged["loss"] == math.fsum(losses) / len(losses)  # mean, NaN left out
        assert merged["lr"] == column["lr"][-1]  # last: the highest rank's
        grad = [v for v in column["grad_norm"] if v is not None]
        assert merged["grad_norm"] == max(grad)  # max over the ranks that logged it
        assert merged["valid_tokens_per_second"] == math.fsum(column["valid_tokens_per_second"])
        assert merged["custom/queue_min"] == min(column["custom/queue_min"])  # given: min
        undeclared = column["custom/undeclared"]
        assert merged["custom/undeclared"] == math.fsum(undeclared) / WORLD  # default: mean
        assert merged["only/rank3"] == column["only/rank3"][3]  # one rank's key: its value
        seconds = column["policy_time"]
        assert merged["policy_time"] == max(seconds)  # straggler: the slowest rank's
        assert merged["policy_time/rank_min"] == min(seconds)
        assert merged["policy_time/rank_mean"] == math.fsum(seconds) / WORLD
        assert merged["policy_time/slowest_rank"] == seconds.index(max(seconds))
    assert math.isnan(float(raw[2][1]["loss"])) or raw[2][1]["loss"] == "nan"


def test_trackers_get_one_row_per_step_not_one_per_rank(kinds: Path) -> None:
    assert len(tracker_rows(kinds, 0)) == rank_worker.STEPS
    for rank in range(1, WORLD):
        assert tracker_rows(kinds, rank) == []


def test_the_steady_state_is_one_packed_collective_per_step(kinds: Path) -> None:
    result = json.loads((kinds / "result0.json").read_text())
    # Step 0 agrees on the keys (object exchange); step 1 adds none; step 2 is a packed step
    # with one key absent on one rank: no new exchange.
    assert result["exchanges"] == {"packed": rank_worker.STEPS, "objects": 1}
    assert result["broken"] is None


def test_the_slow_rank_is_named_by_the_straggler_series(kinds: Path) -> None:
    result = json.loads((kinds / "result0.json").read_text())
    by_name = {
        p["name"]: p["value"]
        for p in result["points"]
        if p["attributes"].get("rl.ranks.phase") == "policy_time"
    }
    assert by_name["rl.ranks.slowest"] == rank_worker.SLOW_RANK
    assert by_name["rl.ranks.duration.max"] >= rank_worker.SLOW_S
    assert by_name["rl.ranks.duration.min"] < rank_worker.SLOW_S
    assert (
        by_name["rl.ranks.skew"]
        == by_name["rl.ranks.duration.max"] / (by_name["rl.ranks.duration.mean"])
    )
    rows = tracker_rows(kinds, 0)
    assert rows[rank_worker.SLOW_STEP]["metrics"]["policy_time/slowest_rank"] == 2
    # Rank 0's tee exported the run's value; the other ranks exported nothing of their own.
    reward = [p for p in result["points"] if p["name"] == "rl.reward.mean"]
    assert reward and reward[0]["value"] == rows[-1]["metrics"]["reward"]
    for rank in range(1, WORLD):
        other = json.loads((kinds / f"result{rank}.json").read_text())
        assert other["points"] == []


def test_finish_destroys_the_group_the_merger_opened_and_leaves_the_given_one(
    kinds: Path,
) -> None:
    # A gloo group left to the interpreter's exit can abort the process ("terminate called
    # without an active exception"): its worker threads are torn down after Python is.
    for rank in range(WORLD):
        result = json.loads((kinds / f"result{rank}.json").read_text())
        assert result["own_group_left"] is False, rank
        assert result["given_group_left"] is True, rank


def test_the_nan_on_one_rank_is_said_once(kinds: Path) -> None:
    out = (kinds / "out0.txt").read_text()
    assert out.count("rank 2 logged 'loss' as a value that is not finite") == 1


def test_a_nan_on_every_rank_is_nan_in_the_run_s_row_said_once(kinds: Path) -> None:
    """Before: a key every rank logged as NaN vanished from the run's row (a divergence
    hidden), said as if one rank's value had been left out."""
    rows = tracker_rows(kinds, 0)
    assert [row["metrics"]["diverged"] for row in rows] == [1.0, 1.0, "nan"]
    out = (kinds / "out0.txt").read_text()
    assert out.count("'diverged' is not finite on every rank") == 1, out


def test_merges_off_the_loop_s_thread_leave_its_own_collectives_alone_and_arrive_in_order(
    tmp_path: Path,
) -> None:
    """The loop all_reduces on the group it gave the merger at every step while the merges
    run on the merger's own group and thread: its sums are right, rank 0's rows arrive one per
    step in step order, each the sum of the four ranks' values as they were logged (the loop
    overwrote its dict right after each call)."""
    assert run_ranks("busy", tmp_path) == [0] * WORLD
    steps = rank_worker.BUSY_STEPS
    for rank in range(WORLD):
        result = json.loads((tmp_path / f"result{rank}.json").read_text())
        assert result["background"] and result["unmerged"] == 0 and result["broken"] is None
        assert result["sums"] == [float(sum(range(WORLD)) + WORLD * s) for s in range(steps)]
    rows = tracker_rows(tmp_path, 0)
    assert [row["step"] for row in rows] == list(range(steps))
    # No rank was given a run id: every rank's raw rows carry rank 0's, the tracker's.
    # (Before: each rank generated its own.)
    run_ids = {
        row["run_id"] for r in range(WORLD) for row in read_jsonl(tmp_path / f"rank{r}.jsonl")
    }
    assert run_ids == {rows[0]["run_id"]}
    raw = raw_rows(tmp_path)
    for row in rows:
        step = row["step"]
        assert row["metrics"]["num_samples"] == math.fsum(
            raw[r][step]["num_samples"] for r in range(WORLD)
        )
        assert [raw[r][step]["num_samples"] for r in range(WORLD)] == [
            float(r + step) for r in range(WORLD)
        ]
        assert row["metrics"]["loss"] == math.fsum(float(r * step) for r in range(WORLD)) / WORLD


def test_the_span_budget_keeps_each_rank_s_own_failures_and_extremes(tmp_path: Path) -> None:
    """The span budget is each process's, applied to the batch it logs (docs/ranks.md): a
    rank's spans are its own failures, top_k and bottom_k by reward and sample of the rest,
    so a run of four ranks keeps four times one batch's budget (each rank's best among them,
    not only the run's best eight)."""
    from rlmetrics.trajectories import SpanBudget, Trajectory

    assert run_ranks("budget", tmp_path) == [0] * WORLD
    run_traced = 0
    for rank in range(WORLD):
        found = json.loads((tmp_path / f"result{rank}.json").read_text())
        batch = [Trajectory(**row) for row in rank_worker.budget_batch(rank)]  # type: ignore[arg-type]
        keep = SpanBudget().select(batch)
        assert keep is not None
        expected = sorted(t.sample_id for t, kept in zip(batch, keep, strict=True) if kept)
        assert found["traced"] == expected
        assert found["dropped"] == rank_worker.BUDGET_BATCH - len(expected)
        # every failure, and this rank's own best and worst eight
        assert {f"r{rank}-{i}" for i in range(rank_worker.BUDGET_FAILED)} <= set(expected)
        assert f"r{rank}-{rank_worker.BUDGET_BATCH - 1}" in expected
        run_traced += len(expected)
    assert run_traced >= WORLD * (rank_worker.BUDGET_FAILED + 16)


def test_a_rank_that_joins_late_is_waited_for(tmp_path: Path) -> None:
    assert run_ranks("late", tmp_path) == [0] * WORLD
    rows = tracker_rows(tmp_path, 0)
    assert [row["step"] for row in rows] == list(range(rank_worker.STEPS))
    assert rows[0]["metrics"]["num_samples"] == math.fsum(
        rank_worker.values(r, 0)["num_samples"] for r in range(WORLD)
    )


def test_a_rank_that_dies_mid_run_costs_the_others_one_timeout_then_they_go_on(
    tmp_path: Path,
) -> None:
    codes = run_ranks("dies", tmp_path, pg_timeout_s=5.0)
    assert codes[3] == 3
    assert codes[:3] == [0, 0, 0], [(tmp_path / f"out{r}.txt").read_text() for r in range(3)]
    rows = tracker_rows(tmp_path, 0)
    # Step 0 merged; steps 1 and 2 are rank 0's own values, said once.
    assert [row["step"] for row in rows] == list(range(rank_worker.STEPS))
    assert rows[0]["metrics"]["num_samples"] == math.fsum(
        rank_worker.values(r, 0)["num_samples"] for r in range(WORLD)
    )
    assert rows[1]["metrics"]["num_samples"] == rank_worker.values(0, 1)["num_samples"]
    for rank in range(3):
        out = (tmp_path / f"out{rank}.txt").read_text()
        assert out.count("ranks are merged no more") == 1, out
        assert json.loads((tmp_path / f"result{rank}.json").read_text())["broken"]
        assert sorted(raw_rows_of(tmp_path, rank)) == list(range(rank_worker.STEPS))


def test_a_rank_that_dies_before_its_last_logged_step_merged_costs_that_step_s_merge(
    tmp_path: Path,
) -> None:
    """Off the loop's thread, a rank that dies right after it logs takes its queued merge
    with it: the others' merge of that step waits out the group's timeout, and rank 0 logs
    its own values from that step on (said once), as for a rank dying mid-collective."""
    codes = run_ranks("dies-at-once", tmp_path, pg_timeout_s=5.0)
    assert codes[3] == 3
    assert codes[:3] == [0, 0, 0], [(tmp_path / f"out{r}.txt").read_text() for r in range(3)]
    rows = tracker_rows(tmp_path, 0)
    assert [row["step"] for row in rows] == list(range(rank_worker.STEPS))
    for row in rows:  # rank 0's own: rank 3's step 0 never reached the collective
        assert row["metrics"]["num_samples"] == rank_worker.values(0, row["step"])["num_samples"]
    for rank in range(3):
        out = (tmp_path / f"out{rank}.txt").read_text()
        assert out.count("ranks are merged no more") == 1, out
        assert sorted(raw_rows_of(tmp_path, rank)) == list(range(rank_worker.STEPS))


@pytest.mark.parametrize("scenario", ["extra", "extra-eval"])
def test_a_call_made_on_rank_0_only_stops_the_merge_on_every_rank_said_once(
    tmp_path: Path, scenario: str
) -> None:
    """Rank 0 logs a dict at step 0 that the others do not (a second train dict, or an eval
    dict under a prefix no rank logged yet): on real gloo ranks, every rank sees the calls
    differ at that collective and stops merging there, none left waiting in a collective the
    others never join; rank 0 logs its own values from then on. Before: rank 0's second
    step-0 dict was merged with the others' step 1, and so on, silently; and the eval dict's
    row, narrower than the others', made gloo abort rank 0's whole process ("Received data
    size doesn't match expected size")."""
    assert run_ranks(scenario, tmp_path) == [0] * WORLD, (tmp_path / "out0.txt").read_text()
    rows = tracker_rows(tmp_path, 0)
    assert [row["step"] for row in rows] == [0, 0, *range(1, rank_worker.STEPS)]
    if scenario == "extra-eval":
        assert rows[1]["prefix"] == "eval" and rows[1]["metrics"] == {"accuracy": 0.5}
        rows = [rows[0], *rows[2:]]
    assert rows[0]["metrics"]["num_samples"] == math.fsum(
        rank_worker.values(r, 0)["num_samples"] for r in range(WORLD)
    )
    for row in rows[1:]:  # rank 0's own
        assert row["metrics"]["num_samples"] == rank_worker.values(0, row["step"])["num_samples"]
    for rank in range(WORLD):
        out = (tmp_path / f"out{rank}.txt").read_text()
        assert out.count("ranks are merged no more") == 1, out
        assert "every rank must call log_metrics with the same steps and prefixes" in out
        assert (
            "RanksOutOfStep" in json.loads((tmp_path / f"result{rank}.json").read_text())["broken"]
        )


def test_a_logger_built_on_rank_0_only_is_said_once_and_rank_0_logs_its_own_values(
    tmp_path: Path,
) -> None:
    """Rank 0 alone builds the Logger with ranks (as under ``if rank == 0:``): it waits for
    the other ranks to build theirs at most half the group's timeout, then the merging stops,
    said once with what to change, and rank 0 logs its own values without waiting again; the
    other ranks, waiting meanwhile in the trainer's next collective on that group, do not time
    out. Before: rank 0 waited the group's whole timeout, so the others' collective timed out
    first and the run crashed (and before that, rank 0 merged on the loop's thread, over the
    trainer's group, where its first log_metrics waited out another timeout)."""
    codes = run_ranks("rank-0-only", tmp_path, pg_timeout_s=30.0)
    assert codes == [0] * WORLD, [(tmp_path / f"out{r}.txt").read_text() for r in range(WORLD)]
    for rank in range(WORLD):  # the trainer's collective after it, on every rank
        assert json.loads((tmp_path / f"result{rank}.json").read_text())["total"] == WORLD
    rows = tracker_rows(tmp_path, 0)
    assert [row["metrics"] for row in rows] == [
        rank_worker.values(0, step) for step in range(rank_worker.STEPS)
    ]
    out = (tmp_path / "out0.txt").read_text()
    assert out.count("build the Logger with ranks= on every rank") == 1, out
    result = json.loads((tmp_path / "result0.json").read_text())
    assert result["broken"] and result["logged_s"] < 15.0  # no step waits a timeout


def test_each_of_several_groups_merges_on_its_own_and_each_rank_keeps_its_raw_file(
    tmp_path: Path,
) -> None:
    """``torch_distributed(group=...)`` over two groups, [0, 1] and [2, 3]: each group's
    leader (its rank 0) writes its group's merged rows, under the run id its group agreed;
    every rank's raw rows go to the file of its global rank and say that rank. Before: the
    raw file and the row's rank were the rank within the group, so global ranks 0 and 2 both
    appended to rank0.jsonl saying "rank": 0."""
    codes = run_ranks("subgroups", tmp_path)
    assert codes == [0] * WORLD, [(tmp_path / f"out{r}.txt").read_text() for r in range(WORLD)]
    raw = raw_rows(tmp_path)  # each row's rank is its file's
    assert {rank: sorted(raw[rank]) for rank in raw} == {
        rank: list(range(rank_worker.STEPS)) for rank in range(WORLD)
    }
    for leader, group in ((0, (0, 1)), (2, (2, 3))):
        rows = tracker_rows(tmp_path, leader)
        assert [row["step"] for row in rows] == list(range(rank_worker.STEPS))
        for row in rows:
            assert row["metrics"]["num_samples"] == math.fsum(
                rank_worker.values(rank, row["step"])["num_samples"] for rank in group
            )
        run_ids = {
            r["run_id"] for rank in group for r in read_jsonl(tmp_path / f"rank{rank}.jsonl")
        }
        assert run_ids == {rows[0]["run_id"]}
    assert tracker_rows(tmp_path, 1) == [] and tracker_rows(tmp_path, 3) == []


def raw_rows_of(folder: Path, rank: int) -> list[int]:
    return [row["step"] for row in read_jsonl(folder / f"rank{rank}.jsonl")]


def test_a_slow_rank_fires_the_straggler_alert_in_a_real_prometheus(
    prometheus_binary: str, tmp_path: Path
) -> None:
    """Rank 2 slow in one phase at every step: ``rlmetrics stack`` scrapes rank 0's endpoint,
    and RLStragglerRank fires in its Prometheus naming rank 2 and the phase."""
    procs = start_ranks("straggler", tmp_path)
    stack: Stack | None = None
    try:
        endpoint = tmp_path / "endpoint.txt"
        wait_until(
            lambda: endpoint.exists() or any(p.poll() is not None for p in procs),
            600,
            "rank 0's Prometheus endpoint (importing torch on four processes)",
        )
        assert endpoint.exists(), "a rank ended before rank 0 served its endpoint"
        address = endpoint.read_text()
        stack = Stack(
            "--dir", str(tmp_path / "stack"), "--run", address, "--no-ray", "--port", "0",
            "--scrape-interval", "1s", "--for", "2s", "--prometheus", prometheus_binary,
            "--no-alertmanager",
        )  # fmt: skip
        wait_until(lambda: stack.query("rl_ranks_slowest"), 120, "the straggler series scraped")
        wait_until(
            lambda: stack.alert_states("RLStragglerRank") == {"firing"}, 120, "the alert firing"
        )
        (alert,) = [
            a
            for a in stack.get("/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == "RLStragglerRank"
        ]
        assert float(alert["value"]) == rank_worker.STRAGGLER_RANK  # the rank, as a value
        assert alert["labels"]["rl_ranks_phase"] == "policy_time"
        assert alert["labels"]["rlmetrics_run_id"] == "ranks-alert"
        assert alert["annotations"]["summary"].startswith(
            f"Rank {rank_worker.STRAGGLER_RANK} of run ranks-alert is the straggler in phase "
            "policy_time"
        )
    finally:
        (tmp_path / "stop").write_text("")
        if stack is not None:
            stack.stop()
        codes = wait_ranks(procs, tmp_path)
    assert codes == [0] * WORLD, [(tmp_path / f"out{r}.txt").read_text() for r in range(WORLD)]
    # The tracker's rows name the slow rank too, from the ranks' raw seconds.
    raw = raw_rows(tmp_path)
    for row in tracker_rows(tmp_path, 0):
        seconds = [raw[rank][row["step"]]["policy_time"] for rank in range(WORLD)]
        assert row["metrics"]["policy_time/slowest_rank"] == seconds.index(max(seconds))
        assert row["metrics"]["policy_time/slowest_rank"] == rank_worker.STRAGGLER_RANK
