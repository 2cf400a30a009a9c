"""``rlmetrics report --perfetto``: two ranks' span files (real processes, the otlp_file
exporter) merged into one Trace Event Format document, checked for structure: one process per
rank, a lane per thread, a complete event per span each rank exported, buckets as categories,
step markers on the shared clock."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rlmetrics.report.perfetto import trace_events
from rlmetrics.report.traces import read_traces
from rlmetrics.tracing import BUCKETS

RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))

RANK = """
import sys, threading, time
import rlmetrics
traces, rank, jsonl = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with (
    rlmetrics.start(
        exporters={"otlp_file": {"path": traces}}, run_id="pf", resource={"rlmetrics.rank": rank}
    ),
    rlmetrics.Logger(backends={"jsonl": {"path": jsonl}}) as logger,
):
    for step in range(2):
        with rlmetrics.step(step, logger=logger):
            with rlmetrics.phase("generation", bucket="productive"):
                time.sleep(0.01 * (rank + 1))

            def score():
                with rlmetrics.phase("reward", bucket="overhead"):
                    time.sleep(0.005)

            worker = threading.Thread(target=score, name="scorer")
            worker.start()
            worker.join()
"""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLMETRICS, *args], capture_output=True, text=True, timeout=120)


def record(folder: Path) -> list[Path]:
    files = []
    procs = []
    for rank in range(2):
        traces = folder / f"traces{rank}.jsonl"
        files.append(traces)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK, str(traces), str(rank), str(folder / f"m{rank}.jsonl")]
            )
        )
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    return files


def test_every_rank_is_a_process_with_its_spans_lanes_and_steps(tmp_path: Path) -> None:
    files = record(tmp_path)
    document = trace_events(read_traces(files))
    json.loads(json.dumps(document))  # plain JSON
    events = document["traceEvents"]
    assert {event["ph"] for event in events} <= {"X", "M", "i"}
    names = {
        event["pid"]: event["args"]["name"]
        for event in events
        if event["ph"] == "M" and event["name"] == "process_name"
    }
    assert len(names) == 2 and all(name.startswith(("0", "1")) for name in names.values())
    lanes = {
        (event["pid"], event["tid"]): event["args"]["name"]
        for event in events
        if event["ph"] == "M" and event["name"] == "thread_name"
    }
    slices = [event for event in events if event["ph"] == "X"]
    for event in slices:
        assert (event["pid"], event["tid"]) in lanes
        assert event["ts"] >= 0 and event["dur"] >= 0
        assert event["cat"] in {*BUCKETS, "span"}
    assert {name for (_, _), name in lanes.items()} >= {"main", "scorer"}
    # Ranks are shown in rank order, whichever started first.
    order = {
        event["pid"]: event["args"]["sort_index"]
        for event in events
        if event["ph"] == "M" and event["name"] == "process_sort_index"
    }
    assert sorted(names.values(), key=lambda name: order[_pid_of(names, name)]) == sorted(
        names.values()
    )
    # Perfetto takes the thread whose tid is its pid for the main thread: only the main lane's.
    for (pid, tid), name in lanes.items():
        assert (tid == pid) == (name == "main"), (pid, tid, name)
    # One process per rank, with exactly the spans that rank exported.
    per_pid = Counter(event["pid"] for event in slices)
    by_rank = {int(name.split(" ")[0]): per_pid[pid] for pid, name in names.items()}
    for rank, path in enumerate(files):
        assert by_rank[rank] == len(read_traces([path]).spans)
    scorer = [e for e in slices if lanes[(e["pid"], e["tid"])] == "scorer"]
    assert scorer and all(e["name"] == "rl.reward" and e["cat"] == "overhead" for e in scorer)
    steps = Counter(event["name"] for event in events if event["ph"] == "i")
    assert steps == {"step 0": 2, "step 1": 2}


def _pid_of(names: dict[int, str], name: str) -> int:
    return next(pid for pid, found in names.items() if found == name)


def test_rlmetrics_report_writes_the_perfetto_file(tmp_path: Path) -> None:
    files = record(tmp_path)
    out = tmp_path / "run.json"
    args = ["report", str(tmp_path / "m0.jsonl")]
    for path in files:
        args += ["--traces", str(path)]
    done = run_cli(*args, "--perfetto", str(out))
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    slices = sum(1 for event in document["traceEvents"] if event["ph"] == "X")
    assert f"{slices} spans written to {out}" in done.stderr
    assert slices == len(read_traces(files).spans)
    missing = run_cli("report", str(tmp_path / "m0.jsonl"), "--perfetto", str(out))
    assert missing.returncode == 2 and "--perfetto writes spans" in missing.stderr


def _rows_with(image: Any, rgb: tuple[int, int, int]) -> list[int]:
    """The pixel rows where colour ``rgb`` is drawn inside the plot (left of its right spine,
    the longest black column: the legend is outside, at its right)."""
    width, height = image.size
    pixels = image.convert("RGB").load()
    black = [sum(pixels[x, y] == (0, 0, 0) for y in range(height)) for x in range(width)]
    spine = max(range(width // 2, width), key=black.__getitem__)
    return [y for y in range(height) if any(pixels[x, y] == rgb for x in range(spine))]


def _bands(rows: list[int]) -> int:
    """How many separate runs of consecutive rows ``rows`` makes (lanes, stacked)."""
    return sum(1 for i, y in enumerate(rows) if i == 0 or y != rows[i - 1] + 1)


def test_the_png_timeline_draws_a_lane_per_rank(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from rlmetrics.report.timeline import BUCKET_COLOURS, lanes, rank_window

    files = record(tmp_path)
    loaded = read_traces(files)
    named = lanes(loaded, rank_window(loaded, list(loaded.steps().values())))
    # Each rank's main thread and its scorer thread: four lanes, named by rank, rank 0 first.
    assert list(named) == ["rank 0", "rank 0 / scorer", "rank 1", "rank 1 / scorer"]
    assert {s.attributes["rl.phase"] for s in named["rank 1"]} == {"generation"}
    png = tmp_path / "timeline.png"
    args = ["report", str(tmp_path / "m0.jsonl")]
    for path in files:
        args += ["--traces", str(path)]
    done = run_cli(*args, "--timeline", str(png))
    assert done.returncode == 0, done.stderr
    with Image.open(png) as image:
        assert image.format == "PNG"
        image.load()
        productive = _rows_with(image, _rgb(BUCKET_COLOURS["productive"]))
        overhead = _rows_with(image, _rgb(BUCKET_COLOURS["overhead"]))
    # Decoded: generation (productive) in two lanes, one per rank's main thread, and the
    # scorers' reward (overhead) in two more, every lane a band of its own.
    assert _bands(productive) == 2
    assert _bands(overhead) == 2
    assert not set(productive) & set(overhead)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)
