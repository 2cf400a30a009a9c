"""Memory and time of the operator tools on a long run: ``rlmetrics query``, ``report``,
``report --json``, ``report --html``, ``check --run`` and the MCP server's ``run_state``.

Writes a realistic run (the first ``--keys`` keys of the 60-key GRPO step of ``grpo_step.py``,
jittered, a slowdown from a third to a half of the way, one hyperparameters row) of ``--steps``
steps, then runs each
tool in a fresh process and reports its peak RSS (``ru_maxrss`` of that child, from
``os.wait4``) and wall time. With ``--browser``, also opens the ``report --html`` page in
headless Debian Chromium (Playwright, run it with the browser env's Python) and times how long
the page takes to become ready, and writes a screenshot beside the run.

    .tox/browser/bin/python benchmarks/bench_tools_long_run.py --steps 100000 --browser

Not a test: numbers for the notes, on a shared machine (the load averages are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_step import GRPO_STEP

RUN_ID = "bench-long-run"


def write_run(path: Path, steps: int, keys: int, seed: int = 0) -> None:
    """``steps`` GRPO steps of the first ``keys`` keys, jittered, with the step wall time:
    50 s apart (75 s from a third to a half of the run)."""
    rng = random.Random(seed)
    step_keys = dict(list(GRPO_STEP.items())[:keys])
    at = 1_700_000_000.0
    with path.open("w") as out:
        out.write(
            json.dumps(
                {"time": at, "run_id": RUN_ID, "kind": "hyperparams", "hyperparams": {"lr": 1e-6}}
            )
            + "\n"
        )
        for step in range(steps):
            slow = steps // 3 <= step < steps // 2
            wall = (75.0 if slow else 50.0) * rng.uniform(0.95, 1.05)
            at += wall
            metrics = {
                key: (
                    round(value * rng.uniform(0.9, 1.1), 6) if isinstance(value, float) else value
                )
                for key, value in step_keys.items()
            }
            metrics["efficiency/step_wall_time_s"] = round(wall, 4)
            row = {
                "time": at,
                "run_id": RUN_ID,
                "step": step,
                "prefix": "train",
                "metrics": metrics,
            }
            out.write(json.dumps(row) + "\n")


def measure(argv: list[str]) -> tuple[float, float, int, int]:
    """Wall seconds, peak RSS in MB, exit status and stdout bytes of one child."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        size = out.tell()
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), size


def browser_ready(page_path: Path, screenshot: Path) -> float:
    """Seconds from navigation until the page says it is ready (``data-ready``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ.get("RLMETRICS_CHROMIUM", "/usr/bin/chromium")
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        started = time.monotonic()
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=600_000)
        ready = time.monotonic() - started
        page.screenshot(path=str(screenshot), full_page=False)
        browser.close()
    return ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=25, help="keys a step logs (at most 60)")
    parser.add_argument("--folder", type=Path, default=None, help="keep the run here")
    parser.add_argument("--python", default=sys.executable, help="the env whose rlmetrics runs")
    parser.add_argument("--browser", action="store_true", help="open the page in Chromium")
    parser.add_argument("--only", default="", help="comma-separated tool names to run")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="bench-tools-"))
    folder.mkdir(parents=True, exist_ok=True)
    run = folder / "metrics.jsonl"
    if not run.exists():
        write_run(run, args.steps, args.keys)
    print(f"run: {run} ({run.stat().st_size / 1e6:.0f} MB, {args.steps} steps)")
    print("load averages at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    cli = [str(Path(args.python).with_name("rlmetrics"))]
    page = folder / "page.html"
    mcp = (
        "import sys; from rlmetrics.mcp_server import RunFolder; "
        "RunFolder(sys.argv[1]).state('metrics.jsonl', None, None)"
    )
    tools = {
        "query": [*cli, "query", str(run)],
        "report": [*cli, "report", str(run)],
        "report --json": [*cli, "report", str(run), "--json"],
        "report --html": [*cli, "report", str(run), "--html", str(page)],
        "check --run": [*cli, "check", "--run", str(run)],
        "mcp run_state": [args.python, "-c", mcp, str(folder)],
    }
    chosen = {name.strip() for name in args.only.split(",") if name.strip()}
    print(f"{'tool':<16} {'wall s':>8} {'peak RSS MB':>12} {'exit':>5} {'stdout MB':>10}")
    for name, argv in tools.items():
        if chosen and name not in chosen:
            continue
        wall, rss, code, size = measure(argv)
        print(f"{name:<16} {wall:>8.1f} {rss:>12.0f} {code:>5} {size / 1e6:>10.2f}")
    if args.browser and page.exists():
        print(f"page: {page.stat().st_size / 1e6:.1f} MB")
        ready = browser_ready(page, folder / "page.png")
        print(f"page ready in Chromium: {ready:.1f} s (screenshot {folder / 'page.png'})")
    print("load averages at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
