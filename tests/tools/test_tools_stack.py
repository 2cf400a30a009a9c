"""``rlmetrics stack``: the files it writes, and a real Prometheus it starts scraping a real
rlmetrics endpoint, whose stall alert goes pending, then firing when the run pauses, and
resolves when it resumes; Ray nodes found (and forgotten) through a service-discovery file as
it changes. Loopback only; every wait is bounded."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from stack_support import Run, Stack
from tools_support import RLMETRICS, run_cli

import rlmetrics
from rlmetrics.testing import ExpositionServer, wait_until

RUN_ID = "stack-test-run"


def test_the_stall_alert_goes_pending_then_firing_and_resolves(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    with (
        rlmetrics.start(run_id=RUN_ID, exporters=["prometheus"], prometheus_port=0) as handle,
        Run(interval_s=0.1) as run,
    ):
        assert handle.prometheus_address is not None
        endpoint = f"127.0.0.1:{handle.prometheus_address[1]}"
        stack = Stack(
            "--dir",
            str(tmp_path / "stack"),
            "--run",
            endpoint,
            "--no-ray",
            "--port",
            "0",
            "--scrape-interval",
            "1s",
            "--for",
            "2s",
            "--set",
            "stall.min_s=3",
            "--prometheus",
            prometheus_binary,
        )
        stacks.append(stack)
        assert stack.url.startswith("http://127.0.0.1:")
        assert stack.report["health"] == [f"http://{endpoint}/health"]
        # Scraped, and the median step interval is known (20 intervals at 0.1 s).
        wait_until(
            lambda: stack.active_targets("rlmetrics") == {endpoint: "up"}, 30, "the run's target up"
        )
        median = wait_until(
            lambda: stack.query("rl_step_interval_median_seconds"), 30, "the median step interval"
        )
        assert float(median[0]["value"][1]) < 1.0
        assert stack.alert_states("RLStepStalled") == set()

        run.running.clear()  # the run pauses
        seen: list[set[str]] = []

        def state(wanted: str) -> bool:
            seen.append(stack.alert_states("RLStepStalled"))
            return wanted in seen[-1]

        wait_until(lambda: state("pending"), 30, "RLStepStalled pending")
        wait_until(lambda: state("firing"), 30, "RLStepStalled firing")
        firing = [a for a in stack.get("/api/v1/alerts")["alerts"] if a["state"] == "firing"]
        assert firing[0]["labels"]["rlmetrics_run_id"] == RUN_ID
        assert firing[0]["labels"]["severity"] == "page"
        assert firing[0]["annotations"]["summary"].startswith(f"Run {RUN_ID} (127.0.0.1:")

        run.running.set()  # the run resumes
        wait_until(lambda: stack.alert_states("RLStepStalled") == set(), 30, "the alert to resolve")
        # Prometheus' own record of the alert: pending, then firing, for this run.
        states = stack.query(
            'count by (alertstate) (count_over_time(ALERTS{alertname="RLStepStalled"}[5m]))'
        )
        assert {s["metric"]["alertstate"] for s in states} == {"pending", "firing"}

    # No local process can stop it over HTTP: the lifecycle endpoints are off.
    request = urllib.request.Request(f"{stack.url}/-/quit", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    assert stack.process.poll() is None and stack.active_targets("rlmetrics")

    pid = stack.report["prometheus"]["pid"]
    status, err = stack.stop()
    assert status == 0, err
    assert "Traceback" not in err
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _ray_node(render: str) -> ExpositionServer:
    return ExpositionServer(lambda: render, name="fake-raylet")


def test_ray_nodes_are_found_and_forgotten_as_the_discovery_file_changes(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    # Ray's head node keeps this file (one group per node: the node's metrics endpoint); the
    # raylets here are real endpoints on 127.0.0.1 serving a line of Ray's exposition.
    nodes = [_ray_node('ray_node_mem_used{ip="127.0.0.1"} 1.0e9\n') for _ in range(2)]
    try:
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        discovery = tmp_path / "prom_metrics_service_discovery.json"

        def publish(listed: list[str]) -> None:
            groups = [{"labels": {"job": "ray"}, "targets": listed}]
            staging = discovery.with_suffix(".tmp")
            staging.write_text(json.dumps(groups))
            staging.replace(discovery)

        publish(addresses[:1])
        stack = Stack(
            "--dir",
            str(tmp_path / "stack"),
            "--run",
            "127.0.0.1:9",
            "--ray-sd",
            str(discovery),
            "--port",
            "0",
            "--scrape-interval",
            "1s",
            "--prometheus",
            prometheus_binary,
        )
        stacks.append(stack)
        assert stack.report["ray_service_discovery"] == str(discovery)
        wait_until(lambda: stack.active_targets("ray") == {addresses[0]: "up"}, 30, "node 1")
        publish(addresses)  # a node joins
        wait_until(
            lambda: stack.active_targets("ray") == {a: "up" for a in addresses}, 30, "both nodes"
        )
        publish(addresses[1:])  # a node leaves
        wait_until(lambda: stack.active_targets("ray") == {addresses[1]: "up"}, 30, "node 2 only")
        assert stack.stop()[0] == 0
    finally:
        for node in nodes:
            node.close()


def test_a_new_ray_session_is_followed_through_the_discovery_files_link(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    # Ray's /tmp/ray/prom_metrics_service_discovery.json is a link into the session folder
    # of the cluster that last started; a cluster started later (a restart, the next job)
    # points it at its own session. The stack reads the link, not the folder it pointed at
    # when the stack started, which would be the ended session's nodes forever.
    nodes = [_ray_node('ray_node_mem_used{ip="127.0.0.1"} 1.0e9\n') for _ in range(2)]
    try:
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        sessions = [tmp_path / f"session_{n}" for n in (1, 2)]
        for session, address in zip(sessions, addresses, strict=True):
            session.mkdir()
            groups = [{"labels": {"job": "ray"}, "targets": [address]}]
            (session / "prom_metrics_service_discovery.json").write_text(json.dumps(groups))
        link = tmp_path / "prom_metrics_service_discovery.json"
        link.symlink_to(sessions[0] / "prom_metrics_service_discovery.json")
        stack = Stack(
            *("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--ray-sd", str(link)),
            *("--port", "0", "--scrape-interval", "1s", "--prometheus", prometheus_binary),
        )
        stacks.append(stack)
        assert stack.report["ray_service_discovery"] == str(link)
        wait_until(lambda: stack.active_targets("ray") == {addresses[0]: "up"}, 30, "session 1")
        staging = tmp_path / "link.tmp"  # re-pointed in one step, as Ray replaces it
        staging.symlink_to(sessions[1] / "prom_metrics_service_discovery.json")
        staging.replace(link)
        wait_until(lambda: stack.active_targets("ray") == {addresses[1]: "up"}, 30, "session 2")
        assert stack.stop()[0] == 0
    finally:
        for node in nodes:
            node.close()


def test_the_stack_says_where_its_ray_nodes_come_from(
    prometheus_binary: str, tmp_path: Path
) -> None:
    # Ray's file outlives the cluster that wrote it: on a machine where Ray ran earlier, the
    # stack's `ray` job lists dead nodes, and the user must be able to tell where they came
    # from and how to leave them out, as the stack says it for every other job.
    discovery = tmp_path / "prom_metrics_service_discovery.json"
    discovery.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": ["127.0.0.1:9"]}]))
    common = ("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--ray-sd", str(discovery))
    said = f"Ray nodes: {discovery} (Ray's own list; --no-ray leaves them out)"
    written = run_cli("stack", *common, "--no-start")
    assert written.returncode == 0, written.stderr
    assert said in written.stdout.splitlines()
    started = ("--port", "0", "--no-alertmanager", "--prometheus", prometheus_binary)
    stack = subprocess.Popen(
        [RLMETRICS, "stack", *common, *started],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert stack.stdout is not None
        lines = []
        for line in stack.stdout:  # ends when the stack prints its last line, or dies
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops the stack."):
                break
        assert said in lines, lines
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.communicate(timeout=60)
    assert stack.returncode == 0


def test_without_prometheus_it_writes_the_files_and_says_how_to_install(tmp_path: Path) -> None:
    done = run_cli(
        "stack",
        "--dir",
        tmp_path / "stack",
        "--gym",
        "127.0.0.1:9100",
        "--vllm",
        "http://127.0.0.1:8000/",
        "--no-ray",
        "--prometheus",
        str(tmp_path / "no-such-binary"),
    )
    assert done.returncode == 1
    assert "apt-get install --no-install-recommends prometheus" in done.stderr
    assert "Start it with: cd " in done.stdout
    root = tmp_path / "stack"
    assert json.loads((root / "targets" / "rlmetrics.json").read_text()) == [
        {"targets": ["127.0.0.1:9464"], "labels": {}}
    ]
    assert json.loads((root / "targets" / "vllm.json").read_text())[0]["targets"] == [
        "127.0.0.1:8000"
    ]
    assert json.loads((root / "targets" / "gym.json").read_text())[0]["targets"] == [
        "127.0.0.1:9100"
    ]
    config = (root / "prometheus.yml").read_text()
    assert '"rules/rlmetrics.yml"' in config and '"targets/gym.json"' in config
    assert "RLStepStalled" in (root / "rules" / "rlmetrics.yml").read_text()
    assert json.loads((root / "grafana" / "rlmetrics.json").read_text())["uid"] == "rlmetrics"


def test_no_start_writes_a_configuration_promtool_accepts(promtool: str, tmp_path: Path) -> None:
    done = run_cli("stack", "--dir", tmp_path / "stack", "--no-start", "--no-ray", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["prometheus"] is None and "--config.file=prometheus.yml" in report["start_with"]
    checked = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"],
        cwd=tmp_path / "stack",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("args", "lifecycle"), [((), False), (("--enable-lifecycle",), True)], ids=["default", "asked"]
)
def test_prometheus_serves_its_lifecycle_endpoints_only_when_asked(
    tmp_path: Path, args: tuple[str, ...], lifecycle: bool
) -> None:
    """--web.enable-lifecycle lets any local process stop Prometheus (POST /-/quit)."""
    from rlmetrics.stack.config import StackFiles
    from rlmetrics.stack.server import PrometheusProcess

    done = run_cli("stack", "--dir", tmp_path / "stack", "--no-start", "--no-ray", "--json", *args)
    assert done.returncode == 0, done.stderr
    told = shlex.split(json.loads(done.stdout)["start_with"].split(" && ", 1)[1])
    assert told[0] == "prometheus" and "--web.listen-address=127.0.0.1:9090" in told
    assert ("--web.enable-lifecycle" in told) is lifecycle
    files = StackFiles(tmp_path / "direct")
    built = PrometheusProcess("/usr/bin/prometheus", files, 9091, lifecycle=lifecycle).command()
    assert built[1:] == [
        "--config.file=prometheus.yml",
        "--web.listen-address=127.0.0.1:9091",
        "--web.external-url=http://127.0.0.1:9091",
        f"--storage.tsdb.path={files.data.name}",
        *(["--web.enable-lifecycle"] if lifecycle else []),
    ]
    assert "--web.enable-lifecycle" not in PrometheusProcess("p", files, 1).command()


def test_a_misspelt_threshold_fails_before_anything_is_written(tmp_path: Path) -> None:
    done = run_cli("stack", "--dir", tmp_path / "stack", "--no-start", "--set", "stall.factr=5")
    assert done.returncode == 2
    assert "stall.factr" in done.stderr and "stall.factor" in done.stderr
    assert not (tmp_path / "stack").exists()


VLLM_FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "plugins"
    / "rlmetrics-vllm"
    / "tests"
    / "fixtures"
    / "vllm-0.32.0-metrics.txt"
)


def test_a_vllm_engine_restart_fires_its_plugin_s_alert(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    pytest.importorskip("rlmetrics_vllm", reason="the vLLM plugin offers the rule")
    exposition = VLLM_FIXTURE.read_text()
    created = 'vllm:prompt_tokens_created{engine="0",model_name="tiny-model"} '
    assert created in exposition
    state = {"created": "1.795939763929488e+09"}

    def render() -> str:
        # The engine's real exposition, its prompt-token counter created at state["created"].
        return "".join(
            created + state["created"] + "\n" if line.startswith(created) else line + "\n"
            for line in exposition.splitlines()
        )

    engine = ExpositionServer(render, name="fake-vllm")
    try:
        address = f"127.0.0.1:{engine.port}"
        stack = Stack(
            "--dir",
            str(tmp_path / "stack"),
            "--run",
            "127.0.0.1:9",
            "--vllm",
            address,
            "--no-ray",
            "--port",
            "0",
            "--scrape-interval",
            "1s",
            "--prometheus",
            prometheus_binary,
        )
        stacks.append(stack)
        wait_until(lambda: stack.active_targets("vllm") == {address: "up"}, 30, "the engine")
        wait_until(lambda: stack.query("vllm:prompt_tokens_created"), 30, "its counters")
        assert stack.alert_states("VLLMEngineRestarted") == set()
        state["created"] = "1.795940000e+09"  # the engine restarts: its counters are new
        wait_until(lambda: stack.alert_states("VLLMEngineRestarted") == {"firing"}, 30, "the alert")
        (alert,) = [
            a
            for a in stack.get("/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == "VLLMEngineRestarted"
        ]
        assert alert["labels"]["engine"] == "0" and alert["labels"]["job"] == "vllm"
        assert stack.stop()[0] == 0
    finally:
        engine.close()


def test_a_port_its_last_server_left_in_time_wait_is_free_again() -> None:
    """The side that closes a connection first keeps its port in TIME_WAIT for a minute; a
    server that answered ``Connection: close`` (Prometheus answering the stack's readiness
    checks) is that side. TIME_WAIT is no listener: Prometheus and Alertmanager (Go) bind over
    it, so the stack must not call the port taken."""
    from rlmetrics.stack.server import port_is_free

    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners do
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free(port)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            served, _ = listener.accept()
            served.close()  # the server closes first: its end waits
            assert client.recv(1) == b""
    assert port_is_free(port)


def _stack_args(tmp_path: Path, prometheus_binary: str, port: int) -> tuple[str, ...]:
    return (
        *("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--no-ray"),
        *("--no-alertmanager", "--port", str(port), "--prometheus", prometheus_binary),
    )


def test_stopped_and_started_again_it_gets_its_port_back(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    """Ctrl-C, then the same command again (the first thing anyone does after editing a
    threshold) found the port "taken" for a minute while nothing listened on it."""
    from rlmetrics.stack.server import free_port

    args = _stack_args(tmp_path, prometheus_binary, free_port())
    status, err = Stack(*args).stop()
    assert status == 0 and err == ""
    again = Stack(*args)
    stacks.append(again)
    assert again.get("/api/v1/status/buildinfo")["version"]


def test_a_second_sigterm_while_it_stops_its_servers_is_not_a_traceback(
    prometheus_binary: str, tmp_path: Path
) -> None:
    """A scheduler or ``timeout`` signals the whole process group, so the stack command can
    be told to stop again while it is stopping Prometheus; it goes on stopping it and exits
    0. Prometheus is held stopped (SIGSTOP) so the second signal surely lands while the stack
    waits for it."""
    from rlmetrics.stack.server import free_port

    stack = Stack(*_stack_args(tmp_path, prometheus_binary, free_port()))
    prometheus = psutil.Process(stack.report["prometheus"]["pid"])
    prometheus.suspend()
    try:
        # Stopped before the stack signals it, so its SIGTERM waits instead of being taken.
        assert wait_until(lambda: prometheus.status() == psutil.STATUS_STOPPED, 30)
        stack.process.send_signal(signal.SIGTERM)
        # Prometheus has its SIGTERM pending: the stack is in its stop, waiting for it.
        assert wait_until(lambda: _pending(prometheus.pid) & (1 << (signal.SIGTERM - 1)), 30)
        stack.process.send_signal(signal.SIGTERM)
    finally:
        prometheus.resume()
    status, err = stack.stop()
    assert (status, err) == (0, "")
    assert not prometheus.is_running() or prometheus.status() == psutil.STATUS_ZOMBIE


def _pending(pid: int) -> int:
    """The signals pending for process ``pid`` (its SigPnd and ShdPnd masks, Linux)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    masks = [line.split()[1] for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return sum(int(mask, 16) for mask in masks)


@pytest.mark.parametrize("where", ["a file", "under a file", "uncreatable", "targets a file"])
@pytest.mark.parametrize("start", [(), ("--no-start",)], ids=["start", "no-start"])
def test_a_dir_nothing_can_be_written_in_is_one_line_and_status_2(
    tmp_path: Path, where: str, start: tuple[str, ...]
) -> None:
    """Before: a traceback out of atomic_write's mkdir (FileExistsError, NotADirectoryError)."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "targets").write_text("x")  # a file where the stack needs a folder
    given = {
        "a file": tmp_path / "file",
        "under a file": tmp_path / "file" / "stack",
        "uncreatable": Path("/proc/rlmetrics-test/stack"),
        "targets a file": tmp_path / "half",
    }[where]
    # (--prometheus names a binary that does not exist: nothing may start, whatever happens.)
    done = run_cli(
        "stack", "--dir", given, *start, "--no-ray", "--prometheus", tmp_path / "no-prometheus"
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics stack: --dir {given}"), line
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--port", "99999", "a port is 0-65535 (0 picks a free one), got 99999"),
        ("--port", "-1", "a port is 0-65535 (0 picks a free one), got -1"),
        ("--alertmanager-port", "70000", "a port is 0-65535 (0 picks a free one), got 70000"),
        ("--scrape-interval", "0", "'0' is no interval: give one longer than 0 (such as 5s)"),
        ("--evaluation-interval", "0s", "'0s' is no interval: give one longer than 0"),
        ("--group-interval", "0s", "'0s' is no interval: give one longer than 0"),
        ("--repeat-interval", "0ms", "'0ms' is no interval: give one longer than 0"),
    ],
)
def test_a_port_or_interval_out_of_range_is_one_line_and_status_2(
    tmp_path: Path, option: str, value: str, said: str
) -> None:
    """Not a traceback of the port check (OverflowError) once started, nor a Prometheus or
    Alertmanager started with an interval of 0 (a default in its place) or refusing it."""
    done = run_cli("stack", "--dir", tmp_path / "s", "--no-start", f"{option}={value}")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert said in done.stderr
    assert not (tmp_path / "s").exists()


def test_an_endpoint_given_as_the_url_the_demo_prints_is_scraped_at_host_port(
    tmp_path: Path,
) -> None:
    """The demo prints its endpoint as http://HOST:PORT/metrics; that URL (the path Prometheus
    scrapes anyway) names the same target as HOST:PORT, for --run as for --vllm."""
    done = run_cli(
        "stack",
        "--dir",
        tmp_path / "stack",
        "--run",
        "http://127.0.0.1:9464/metrics",
        "--vllm",
        "http://127.0.0.1:8000/metrics/",
        "--no-ray",
        "--no-start",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["targets"]["rlmetrics"] == ["127.0.0.1:9464"]
    assert json.loads((tmp_path / "stack" / "targets" / "vllm.json").read_text())[0]["targets"] == [
        "127.0.0.1:8000"
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("https://127.0.0.1:9464", "https"),
        ("http://127.0.0.1:9464/other/path", "/other/path"),
        ("127.0.0.1", "HOST:PORT"),
    ],
)
def test_an_endpoint_the_stack_cannot_scrape_as_given_is_refused_saying_why(
    tmp_path: Path, given: str, said: str
) -> None:
    """A target file holds HOST:PORT only (scraped over http at /metrics): an https URL or
    another path would be written as a target Prometheus drops, so it is refused."""
    done = run_cli("stack", "--dir", tmp_path / "stack", "--run", given, "--no-start")
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "stack").exists()


def test_ray_s_discovery_file_is_named_before_ray_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the stack named Ray's file only when it existed as the stack started, so a
    stack started before the Ray job (the usual order) never scraped Ray's nodes. Prometheus'
    file discovery finds a file that appears later (the next test), so it is always named."""
    import rlmetrics.cli.stack as stack_cli
    from rlmetrics.cli import main

    later = tmp_path / "ray" / "prom_metrics_service_discovery.json"  # no folder yet either
    monkeypatch.setattr(stack_cli, "RAY_SERVICE_DISCOVERY", later)
    assert main(["stack", "--dir", str(tmp_path / "stack"), "--no-start", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ray_service_discovery"] == str(later)
    assert str(later) in (tmp_path / "stack" / "prometheus.yml").read_text()
    assert main(["stack", "--dir", str(tmp_path / "stack"), "--no-start"]) == 0
    said = f"Ray nodes: {later} (Ray's own list, read once Ray writes it; --no-ray leaves them out)"
    assert said in capsys.readouterr().out.splitlines()


def test_ray_nodes_are_found_once_ray_writes_its_discovery_file(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    node = _ray_node('ray_node_mem_used{ip="127.0.0.1"} 1.0e9\n')
    try:
        discovery = tmp_path / "ray" / "prom_metrics_service_discovery.json"
        stack = Stack(
            *("--dir", str(tmp_path / "stack"), "--run", "127.0.0.1:9", "--ray-sd", str(discovery)),
            *("--port", "0", "--scrape-interval", "1s", "--prometheus", prometheus_binary),
        )
        stacks.append(stack)
        assert stack.active_targets("ray") == {}
        discovery.parent.mkdir()  # Ray's head starts after the stack
        groups = [{"labels": {"job": "ray"}, "targets": [f"127.0.0.1:{node.port}"]}]
        discovery.write_text(json.dumps(groups))
        address = f"127.0.0.1:{node.port}"
        wait_until(lambda: stack.active_targets("ray") == {address: "up"}, 60, "the Ray node")
        assert stack.stop()[0] == 0
    finally:
        node.close()


def test_the_help_names_the_url_form_an_endpoint_may_take() -> None:
    # The URL the demo prints (http://HOST:PORT/metrics) is taken: the help says so, not
    # HOST:PORT alone.
    done = run_cli("stack", "--help")
    assert done.returncode == 0
    assert done.stdout.count("http://HOST:PORT/metrics") >= 3, done.stdout
