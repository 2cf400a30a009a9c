"""``rlmetrics demo``: the README's first command, as a user runs it, and deterministic for a
seed. (Its endpoint scraped by a real Prometheus during the run: test_tools_dashboard.py.)"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tools_support import RLMETRICS, run_cli

from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.demo.run import DemoOptions, run_demo
from rlmetrics.report.traces import read_traces
from rlmetrics.testing import OtlpReceiver


def _logged(path: Path) -> list[tuple[Any, str, dict[str, Any]]]:
    """What the run logged, without the JSONL's own write time."""
    return [(row["step"], row["prefix"], row["metrics"]) for row in read_jsonl(path)]


def _run_in_process(output: Path, seed: int) -> list[tuple[Any, str, dict[str, Any]]]:
    options = DemoOptions(steps=6, seed=seed, output=output, interval_s=0.0, prometheus_port=0)
    result = run_demo(options, say=io.StringIO(), progress=io.StringIO())
    return _logged(result.jsonl)


def test_the_run_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    first = _run_in_process(tmp_path / "a", seed=3)
    again = _run_in_process(tmp_path / "b", seed=3)
    other = _run_in_process(tmp_path / "c", seed=4)
    assert first == again
    assert first != other
    prefixes = {prefix for _, prefix, _ in first}
    assert prefixes == {
        "timing/setup",
        "train",
        "",  # each step's efficiency summary, from its timed phases
        "timing/rollout_recovery",
        "timing/rollout_checkpoint",
        "rollout/checkpoint_outcome",
        "rollout/throughput",
    }


def test_a_trajectorys_reward_components_add_up_to_its_reward(tmp_path: Path) -> None:
    """Its row's ``reward/correct`` and ``reward/format`` are the parts of its ``reward``: a
    right answer with a format slip is 0.5 (as the samples table tells it), a wrong one 0.
    Before, a 0.5 rollout had both components 0 and a 0 one a format of 1."""
    options = DemoOptions(steps=3, output=tmp_path, interval_s=0.0, prometheus_port=0)
    run_demo(options, say=io.StringIO(), progress=io.StringIO())
    rows = [
        row["sample"]
        for row in read_jsonl(tmp_path / "metrics.samples.jsonl")
        if row.get("name") == "trajectories"
    ]
    assert {row["reward"] for row in rows} == {0.0, 0.5, 1.0}
    for row in rows:
        assert row["reward/correct"] + row["reward/format"] == row["reward"], row


def test_the_demo_as_a_user_runs_it(tmp_path: Path) -> None:
    output = tmp_path / "out"
    done = run_cli(
        "demo", "--steps", "10", "--interval", "0", "--prometheus-port", "0", "--output", output
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"metrics (JSONL):     {output / 'metrics.jsonl'}" in out
    assert "Prometheus endpoint: http://127.0.0.1:" in out
    assert "family parts:        gym, host_memory, vllm" in out
    # It ends with the report of its own JSONL, and its picture.
    assert "Goodput over 10 steps:" in out and "Rollout checkpoints:" in out
    assert "vLLM:" in out and "no engine reading at steps [6]" in out
    assert out.rstrip().endswith(f"Picture: {output / 'report.png'}")
    assert (output / "report.png").stat().st_size > 10_000
    # ... goodput from its spans beside the metrics', every difference explained, a timeline.
    assert f"spans (OTLP/JSON):   {output / 'traces.jsonl'}" in out
    assert "Goodput from spans (" in out and "nothing else: every difference is one" in out
    assert "idle/validation: " in out and "idle/refit_event_wait: " in out
    assert f"Timeline: {output / 'timeline.png'}" in out
    assert (output / "timeline.png").stat().st_size > 10_000
    # Not a terminal: one plain progress line per step, no carriage returns.
    progress = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert len(progress) == 10 and progress[-1].startswith("step 10/10 reward=")
    assert "\r" not in done.stderr and "Traceback" not in done.stderr
    # Every kind of logged dict is in the JSONL the report read.
    summary = json.loads(run_cli("report", output / "metrics.jsonl", "--json").stdout)
    assert len(summary["steps"]) == 10 and summary["skipped_lines"] == 0
    assert summary["checkpoints"]["attempts"] == {"completed": 4, "failed": 1}
    assert summary["vllm"]["generations_failed"] > 0


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_taken_port_falls_back_to_a_free_one_and_says_so(tmp_path: Path, how: str) -> None:
    """The port comes from --prometheus-port, else OTEL_EXPORTER_PROMETHEUS_PORT (the variable
    the exporter's own message recommends), else 9464; a taken one is a demo's hiccup, not an
    error."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flag = ("--prometheus-port", str(port)) if how == "flag" else ()
        env = {"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)} if how == "environment" else {}
        done = run_cli(
            "demo",
            "--steps",
            "2",
            "--interval",
            "0",
            "--no-plot",
            "--output",
            tmp_path,
            *flag,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    assert f"127.0.0.1:{port} is taken" in done.stdout and "a free port instead" in done.stdout
    [url] = [line for line in done.stdout.splitlines() if line.startswith("Prometheus endpoint")]
    assert "http://127.0.0.1:" in url and f":{port}/" not in url
    assert "Traceback" not in done.stderr


def test_the_environments_port_is_the_demos_default(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_cli(
        "demo",
        "--steps",
        "1",
        "--interval",
        "0",
        "--no-plot",
        "--output",
        tmp_path,
        env={"OTEL_EXPORTER_PROMETHEUS_PORT": str(port)},
    )
    assert done.returncode == 0, done.stderr
    # Unless another process took it meanwhile, the demo listened where it was told.
    assert f"http://127.0.0.1:{port}/metrics" in done.stdout or "is taken" in done.stdout
    assert "127.0.0.1:9464" not in done.stdout


@pytest.mark.parametrize("steps", ["0", "-3", "x"])
def test_steps_must_be_a_positive_count(steps: str, tmp_path: Path) -> None:
    """Before, ``x`` said "invalid _positive value: 'x'" (the name of a private function)."""
    done = run_cli("demo", "--steps", steps, "--output", tmp_path)
    assert done.returncode == 2
    said = f"argument --steps: expected a positive whole number, got {steps!r}"
    assert done.stderr.endswith(f"rlmetrics demo: error: {said}\n"), done.stderr


@pytest.mark.parametrize("port", ["99999", "-1", "x"])
def test_a_port_that_is_none_is_one_line_and_status_2(port: str, tmp_path: Path) -> None:
    """Before, 99999 and -1 ended in a ConfigurationError's traceback."""
    done = run_cli("demo", "--steps", "1", "--prometheus-port", port, "--output", tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    said = (
        "argument --prometheus-port: expected a port number (0-65535; 0 picks a free one), "
        f"got {port!r}"
    )
    assert done.stderr.endswith(f"rlmetrics demo: error: {said}\n"), done.stderr


@pytest.mark.parametrize("interval", ["-1", "inf", "nan", "1e10", "x"])
def test_an_interval_that_is_no_pause_is_one_line_and_status_2(
    interval: str, tmp_path: Path
) -> None:
    """Before, inf and 1e10 ended in time.sleep's OverflowError traceback after the first
    step, and -1 and nan ran without a word."""
    done = run_cli("demo", "--steps", "2", "--interval", interval, "--output", tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    said = f"argument --interval: expected seconds from 0 to 3600, got {interval!r}"
    assert done.stderr.endswith(f"rlmetrics demo: error: {said}\n"), done.stderr


def test_a_configuration_mistake_is_one_line_and_status_2(tmp_path: Path) -> None:
    """A variable the demo's telemetry refuses (here the span queue's) is said as the demo's
    error, not as a ConfigurationError's traceback."""
    done = run_cli(
        "demo", "--steps", "1", "--prometheus-port", "0", "--output", tmp_path,
        env={"OTEL_BSP_MAX_QUEUE_SIZE": "abc"},
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "rlmetrics demo: OTEL_BSP_MAX_QUEUE_SIZE='abc' must be a positive integer; unset it for "
        "the SDK's default"
    ]


def test_an_exporter_whose_package_is_missing_is_one_line_and_status_2(tmp_path: Path) -> None:
    """docs/trajectories.md sends the demo to Phoenix with
    OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf; in the README's virtualenv (`.[demo,otlp]`,
    no `otlp-http`) the exporter's package is missing. That is the user's to install, said
    in one line with the install command, not an ImportError's traceback, and nothing runs."""
    program = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.http'] = None  # not installed\n"
        "from rlmetrics.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["--steps", "1", "--prometheus-port", "0", "--output", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-c", program, "demo", *args, "--otlp-endpoint", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "rlmetrics demo: exporter 'otlp_http' needs the OTLP HTTP exporter: "
        "pip install 'rlmetrics[otlp-http]'"
    ]
    assert not (tmp_path / "metrics.jsonl").exists()


def test_the_demo_without_protobuf_runs_without_its_spans_file(tmp_path: Path) -> None:
    """`pip install -e .` (no `otlp` extra, so no `google` package at all) then `rlmetrics
    demo`: asking whether `google.protobuf` is there imported `google`, and the demo died
    with a ModuleNotFoundError traceback before its first step."""
    program = (
        "import sys\n"
        "sys.modules['google'] = None  # no google.* package installed\n"
        "from rlmetrics.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["--steps", "2", "--interval", "0", "--prometheus-port", "0", "--no-plot"]
    done = subprocess.run(
        [sys.executable, "-c", program, "demo", *args, "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert [row["step"] for row in read_jsonl(tmp_path / "metrics.jsonl")].count(2) > 0
    assert not (tmp_path / "traces.jsonl").exists()


def test_otlp_endpoint_receives_the_run(tmp_path: Path) -> None:
    receiver = OtlpReceiver().start()
    try:
        options = DemoOptions(
            steps=3,
            output=tmp_path,
            interval_s=0.0,
            prometheus_port=0,
            otlp_endpoint=receiver.endpoint,
            run_id="otlp-demo",
        )
        run_demo(options, say=io.StringIO(), progress=io.StringIO())
        # Shutdown exported the final state: the last step's reward, under the run's id.
        last = [row for row in read_jsonl(tmp_path / "metrics.jsonl") if row["prefix"] == "train"]
        point = receiver.find("rl.reward.mean")
        assert point is not None and point.value == last[-1]["metrics"]["reward"]
        assert point.resource["rlmetrics.run.id"] == "otlp-demo"
        spans = receiver.wait_for(lambda r: r.spans(), what="the run's spans")
        assert {s.resource["rlmetrics.run.id"] for s in spans} == {"otlp-demo"}
        assert {s.name for s in spans} >= {"rl.run", "rl.step", "rl.policy_training"}
        names = {p.name for p in receiver.points()}
        assert {
            "rl.efficiency.seconds",
            "gen_ai.client.token.usage",
            "rl.host.memory.used",
            "gym.rollout.completed_total",
        } <= names
    finally:
        receiver.stop()


class _SlowReceiver(OtlpReceiver):
    """A collector that takes a second for each batch of spans, as a trace UI writing every
    span to its database does (MLflow took about a second for 512 spans here)."""

    def _handle(self, request: Any, context: Any, into: list[Any] | None = None) -> None:
        if into is self.trace_requests:
            time.sleep(1.0)  # the server's own slowness, not a wait for an event
        super()._handle(request, context, into)


def test_a_slow_otlp_endpoint_receives_every_span_of_the_run(tmp_path: Path) -> None:
    """The demo makes about 300 spans a step, faster than a trace UI takes them: none of them
    is dropped on the way (the batch processor's queue of 2048 overflowed and half of a
    40-step run never reached MLflow), and the end of the run waits for them, bounded."""
    receiver = _SlowReceiver().start()
    try:
        options = DemoOptions(
            steps=12,
            output=tmp_path,
            interval_s=0.0,
            prometheus_port=0,
            otlp_endpoint=receiver.endpoint,
        )
        said = io.StringIO()
        run_demo(options, say=said, progress=io.StringIO())
        sent = read_traces([tmp_path / "traces.jsonl"]).spans
        assert len(sent) > 2048 + 512
        received = {s.span_id for s in receiver.spans()}
        assert received == {s.span_id for s in sent}
        assert "OTLP endpoint" in said.getvalue()
    finally:
        receiver.stop()


def test_the_progress_bar_on_a_terminal_and_plain_lines_elsewhere() -> None:
    from rlmetrics.demo.progress import Progress

    bar_stream, plain_stream = io.StringIO(), io.StringIO()
    bar, plain = Progress(2, bar_stream, bar=True), Progress(2, plain_stream)  # not a TTY
    for progress in (bar, plain):
        progress.update(1, reward=0.5)
        progress.update(2, reward=0.75)
        progress.close()
    assert plain_stream.getvalue() == "step 1/2 reward=0.5\nstep 2/2 reward=0.75\n"
    assert "\r" in bar_stream.getvalue() and "2/2" in bar_stream.getvalue()  # tqdm redraws


def test_the_demos_spans_and_metrics_come_from_the_same_clock_readings(tmp_path: Path) -> None:
    from rlmetrics.report.traces import read_traces

    options = DemoOptions(steps=10, seed=1, output=tmp_path, interval_s=0.0, prometheus_port=0)
    result = run_demo(options, say=io.StringIO(), progress=io.StringIO())
    assert result.traces == tmp_path / "traces.jsonl"
    traces = read_traces([result.traces])
    steps = traces.steps()
    assert sorted(steps) == list(range(1, 11))
    summaries = {
        row["step"]: row["metrics"] for row in read_jsonl(result.jsonl) if row["prefix"] == ""
    }
    for n, step in steps.items():
        assert step.attributes["rl.weight_version"] == n - 1
        assert summaries[n]["efficiency/step_wall_time_s"] == step.seconds
        below = traces.descendants(step)
        # The step's 32 rollouts as trajectories (docs/trajectories.md), beside its phases.
        assert sum(s.attributes.get("gen_ai.operation.name") == "invoke_agent" for s in below) == 32
        for leaf in below:
            phase = leaf.attributes.get("rl.phase")
            if isinstance(phase, str) and phase.startswith("idle/"):
                assert summaries[n][f"efficiency/{phase}_s"] == leaf.seconds
    [run_span] = [s for s in traces.spans if s.name == "rl.run"]
    [init] = [s for s in traces.spans if s.attributes.get("rl.phase") == "init/total"]
    assert init.parent_id == run_span.span_id and init.attributes["rl.bucket"] == "overhead"
    goodput = result.goodput
    assert goodput is not None and goodput["unexplained_steps"] == []
    # Every step had overhead (logging) on its spans; step 10 validated.
    assert goodput["reasons_steps"] == {"overhead_and_wasted": 10}
    assert goodput["disagreements"]["validation"]["spans_overhead_s"] > 0


def test_promtool_finds_the_demos_endpoint_clean_but_for_the_specs_milliseconds(
    tmp_path: Path, promtool: str
) -> None:
    """The demo's endpoint after its run (it flushed for its report, as a trainer might): one
    exposition, each unit said once. What promtool still asks — seconds for NeMo Gym's
    histograms, whose specification fixes milliseconds — is all it says."""
    import subprocess
    import urllib.request

    found: list[str] = []

    def lint(result: Any) -> None:
        with urllib.request.urlopen(result.url, timeout=10) as answer:
            exposition = answer.read().decode()
        done = subprocess.run(
            [promtool, "check", "metrics"],
            input=exposition,
            capture_output=True,
            text=True,
            timeout=60,
        )
        found.extend(line for line in (done.stdout + done.stderr).splitlines() if line.strip())
        assert "gym_rollout_duration_milliseconds_bucket" in exposition
        assert "_ms_milliseconds" not in exposition

    options = DemoOptions(steps=3, seed=0, output=tmp_path, interval_s=0.0, prometheus_port=0)
    run_demo(options, say=io.StringIO(), progress=io.StringIO(), on_result=lint)
    assert found, "the endpoint was not linted"
    allowed = re.compile(
        r'gym_[a-z_]+_milliseconds use base unit "seconds" instead of "milliseconds"'
    )
    assert [line for line in found if not allowed.fullmatch(line)] == []


def test_the_demos_output_folder_is_ignored_by_git(tmp_path: Path) -> None:
    """Run from a checkout, the demo writes ./rlmetrics-demo (and the quickstart
    ./quickstart-run); nothing of either may show up as a file to commit."""
    import shutil
    import subprocess

    from rlmetrics.demo.run import DEFAULT_OUTPUT

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    written = [
        f"{DEFAULT_OUTPUT}/{name}"
        for name in (
            "metrics.jsonl",
            "metrics.samples.jsonl",
            "traces.jsonl",
            "report.png",
            "timeline.png",
            "anything-a-later-demo-writes.svg",
        )
    ] + ["quickstart-run/metrics.jsonl", "rlmetrics.jsonl", "run/metrics.jsonl"]
    # docs/trajectories.md's viewer commands: the demo and its page in demo-run/.
    written += ["demo-run/report.png", "demo-run/timeline.png", "demo-run/run.html"]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *written],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sorted(done.stdout.split()) == sorted(written)


def test_a_demo_under_the_rl_naming_profile_speaks_the_proposal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RLMETRICS_NAMING=rl_proposal (docs/conventions.md): the demo's steps are ``rl.loop``
    spans, its training and refit-bubble phases ``rl.train`` / ``rl.sync``, the resource
    carries ``rl.run.id``; the report still finds every step and reconciles goodput."""
    from rlmetrics.report.traces import read_traces

    monkeypatch.setenv("RLMETRICS_NAMING", "rl_proposal")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "rl.algorithm=grpo,rl.system=rlmetrics-demo")
    options = DemoOptions(steps=4, seed=1, output=tmp_path, interval_s=0.0, prometheus_port=0)
    result = run_demo(options, say=io.StringIO(), progress=io.StringIO())
    assert result.traces is not None and result.goodput is not None
    traces = read_traces([result.traces])
    names = {span.name for span in traces.spans}
    assert {"rl.loop", "rl.train", "rl.sync"} <= names
    assert not names & {"rl.step", "rl.policy_training", "rl.idle.refit_bubble"}
    assert sorted(traces.steps()) == [1, 2, 3, 4]
    assert result.goodput["unexplained_steps"] == []
    [resource] = {
        tuple(sorted(span.resource.items())) for span in traces.spans if span.name == "rl.loop"
    }
    attributes = dict(resource)
    assert attributes["rl.run.id"] == result.run_id
    assert (attributes["rl.algorithm"], attributes["rl.system"]) == ("grpo", "rlmetrics-demo")


DEMO = ("demo", "--steps", "2", "--interval", "0", "--prometheus-port", "0", "--no-plot")


@pytest.mark.parametrize("where", ["a file", "under a file", "uncreatable"])
def test_an_output_nothing_can_be_written_in_is_one_line_and_status_2(
    tmp_path: Path, where: str
) -> None:
    """Before: a traceback out of mkdir (FileExistsError, NotADirectoryError)."""
    (tmp_path / "file").write_text("mine\n")
    given = {
        "a file": tmp_path / "file",
        "under a file": tmp_path / "file" / "demo",
        "uncreatable": Path("/proc/rlmetrics-test/demo"),
    }[where]
    done = run_cli(*DEMO, "--output", given)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics demo: --output {given}"), line
    assert done.stdout == "" and (tmp_path / "file").read_text() == "mine\n"


def test_a_folder_holding_a_real_run_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Before: the demo deleted the run's metrics.jsonl and traces.jsonl and wrote its own."""
    import rlmetrics

    run = tmp_path / "my-run"
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": run / "traces.jsonl"}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(run / "metrics.jsonl")}}) as logger,
    ):
        logger.log_hyperparams({"policy": {"model": "my/model"}})
        with rlmetrics.phase("generation", bucket="productive"):
            logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
    before = {path.name: path.read_bytes() for path in run.iterdir()}
    assert set(before) == {"metrics.jsonl", "traces.jsonl"}
    done = run_cli(*DEMO, "--output", run)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics demo: --output {run}") and "metrics.jsonl" in line, line
    assert {path.name: path.read_bytes() for path in run.iterdir()} == before
    # A traces file alone (its run's JSONL elsewhere) is no demo's either.
    (run / "metrics.jsonl").unlink()
    done = run_cli(*DEMO, "--output", run)
    assert done.returncode == 2 and "traces.jsonl" in done.stderr, done.stderr
    assert (run / "traces.jsonl").read_bytes() == before["traces.jsonl"]


def test_a_previous_demos_output_is_replaced_and_other_files_kept(tmp_path: Path) -> None:
    output = tmp_path / "demo"
    output.mkdir()
    (output / "notes.txt").write_text("mine\n")
    first = run_cli(*DEMO, "--output", output, "--json")
    assert first.returncode == 0, first.stderr
    again = run_cli(*DEMO, "--output", output, "--json")
    assert again.returncode == 0, again.stderr
    run_ids = {row["run_id"] for row in read_jsonl(output / "metrics.jsonl", every_row=True)}
    assert run_ids == {json.loads(again.stdout)["run_id"]}  # its own log, not appended
    assert (output / "notes.txt").read_text() == "mine\n"


def test_a_served_demo_stopped_after_a_scrape_says_it_waits_for_a_last_scrape(
    tmp_path: Path,
) -> None:
    """SIGTERM ends a scraped endpoint's run cleanly, and the end waits (bounded) for one last
    scrape to take it: the demo says so and for how long at most, not a silent pause."""
    demo = subprocess.Popen(
        [
            RLMETRICS,
            "demo",
            "--steps",
            "2",
            "--interval",
            "0",
            "--no-plot",
            "--prometheus-port",
            "0",
            "--output",
            str(tmp_path),
            "--serve",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        url = None
        for line in demo.stdout:  # bounded by the demo's own lines: it ends them with Serving
            if line.startswith("Prometheus endpoint:"):
                url = line.split()[-1]
            if line.startswith("Serving "):
                break
        assert url is not None
        for _ in range(2):  # two scrapes, as a Prometheus makes: the end now waits for a third
            request = urllib.request.Request(url)
            request.add_header("X-Prometheus-Scrape-Timeout-Seconds", "5")
            with urllib.request.urlopen(request, timeout=30) as response:
                assert b"rlmetrics_run_ended 0.0" in response.read()
        demo.send_signal(signal.SIGTERM)
        rest, stderr = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate(timeout=30)
    assert demo.returncode == 0, stderr
    assert re.search(r"waiting for a last scrape .*\(at most \d+ s\)", rest), rest
    assert "Traceback" not in stderr
