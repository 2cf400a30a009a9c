"""``rlmetrics check --run RUN.jsonl``: the keys a run logged that no declared series reads
(they reach the trackers only), each with the line that would declare one (issue 25, item 9).
The keys are tried through the installed plugins themselves, so a family's patterns, routes and
key maps count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools_support import run_cli

from rlmetrics.cli import main
from rlmetrics.families.training import tee_scalar


def _write(path: Path, rows: list[tuple[int, str, dict[str, Any]]]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"time": 0.0, "run_id": "r", "step": s, "prefix": p, "metrics": m}) + "\n"
            for s, p, m in rows
        )
    )
    return path


ROWS = [
    (0, "timing/setup", {"policy_init_time_s": 1.0, "parallel_init_enabled": True}),
    (
        1,
        "train",
        {
            "reward": 0.5,
            "loss": 0.1,
            "my_custom_thing": 3.0,
            "efficiency/step_wall_time_s": 10.0,
            "efficiency/idle/buffer_starvation_s": 1.0,
            "vllm/prompt_tokens": 100,
            "reward/format": 1.0,
            "validation/gsm8k/accuracy": 0.7,
            "validation/gsm8k/undeclared_score": 0.2,
            "note": "a string is no number to tee",
        },
    ),
    (1, "perf", {"tokens_per_s": 1000.0}),
]


def test_the_keys_no_series_reads_are_listed_with_their_declaring_line(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    done = run_cli("check", "--run", jsonl)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert f"{jsonl}: 3 of the 10 keys logged reach the trackers only" in out
    listed = {line.split()[0] for line in out.split("keys logged reach")[1].splitlines()[1:]}
    assert listed == {"my_custom_thing", "validation/gsm8k/undeclared_score", "perf/tokens_per_s"}
    [line] = [line for line in out.splitlines() if line.strip().startswith("my_custom_thing")]
    assert 'tee_scalar("my_custom_thing", "rl.my_custom_thing", description="...")' in line
    [score] = [line for line in out.splitlines() if "undeclared_score" in line]
    assert 'tee_dataset_metric("undeclared_score", "rl.validation.undeclared_score"' in score
    [perf] = [line for line in out.splitlines() if "perf/tokens_per_s" in line]
    assert "no family reads dicts logged under 'perf'" in perf
    as_json = json.loads(run_cli("check", "--run", jsonl, "--json").stdout)["run"]
    assert as_json["keys_tried"] == 10
    assert {u["key"] for u in as_json["unexported"]} == {
        "my_custom_thing",
        "validation/gsm8k/undeclared_score",
        "tokens_per_s",
    }


def test_the_declaring_line_does_what_it_says(tmp_path: Path, capsys: Any) -> None:
    jsonl = _write(tmp_path / "run.jsonl", [(1, "train", {"reward": 1.0, "my_custom_thing": 3.0})])
    assert main(["check", "--run", str(jsonl)]) == 1
    assert "my_custom_thing" in capsys.readouterr().out
    tee_scalar("my_custom_thing", "rl.my_custom_thing", description="...")
    assert main(["check", "--run", str(jsonl)]) == 0
    assert "every one of the 2 keys logged reaches a series" in capsys.readouterr().out


def test_a_key_map_is_applied_as_the_loggers(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", [(1, "train", {"rewards/format_reward/mean": 0.5})])
    assert run_cli("check", "--run", jsonl).returncode == 1
    mapped = run_cli("check", "--run", jsonl, "--key-map", "trl")
    assert mapped.returncode == 0, mapped.stdout
    unknown = run_cli("check", "--run", jsonl, "--key-map", "nope")
    assert unknown.returncode == 2 and "nope" in unknown.stderr


def test_a_folder_for_the_run_is_one_line(tmp_path: Path) -> None:
    done = run_cli("check", "--run", tmp_path)
    assert done.returncode == 2
    assert "is a folder" in done.stderr and "Traceback" not in done.stderr
