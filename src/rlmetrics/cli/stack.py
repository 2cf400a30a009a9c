"""A local Prometheus for a run, in one command: writes DIR/prometheus.yml scraping the run's
endpoint (--run, default 127.0.0.1:9464), Gym servers (--gym), vLLM engines (--vllm) and every
Ray node (Ray's own service-discovery file, read once Ray writes it), each job's targets in
DIR/targets/<job>.json (Prometheus re-reads them: edit them as servers come and go), the
generated alert rules in DIR/rules/ and the Grafana dashboard in DIR/grafana/; then starts
Debian's `prometheus` on 127.0.0.1 and keeps it running until Ctrl-C (or SIGTERM).

With Debian's `prometheus-alertmanager` installed it also starts Alertmanager on 127.0.0.1
(DIR/alertmanager.yml), which Prometheus sends its alerts to: grouped by run id, delivered to
the webhooks given (--webhook for Alertmanager's JSON, --slack, --discord), resolutions
included. Without it the stack says so in one line and runs without delivery.

Without `prometheus` installed it says how to install it; --no-start only writes the files."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from ..alerts.model import duration
from ..alerts.rules import collect_rules, rules_yaml
from ..dashboard.grafana import build_dashboard, collect_rows, dashboard_json
from ..report.destinations import folder_problem
from ..stack.alertmanager import (
    ALERTMANAGER_MISSING,
    AlertmanagerProcess,
    Delivery,
    find_alertmanager,
    write_alertmanager_config,
)
from ..stack.config import JOBS, RAY_SERVICE_DISCOVERY, StackFiles, StackSettings, write_stack
from ..stack.server import (
    INSTALL_HINT,
    PrometheusProcess,
    ServerProcess,
    find_prometheus,
    free_port,
    port_is_free,
)
from ._output import add_format_options, print_json
from .alerts import add_settings, parse_duration, settings_from

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "stack"
HELP = "a local Prometheus scraping the run, Gym, vLLM and Ray, with the alert rules"

DEFAULT_RUN = "127.0.0.1:9464"
DEFAULT_PORT = 9090
DEFAULT_ALERTMANAGER_PORT = 9093


def _address(text: str) -> str:
    """``HOST:PORT`` of an endpoint, also given as the URL the demo and the vLLM docs print
    (``http://HOST:PORT/metrics``): a target file holds only the address, which Prometheus
    scrapes over http at /metrics, so an https URL or another path is refused, not written
    as a target Prometheus would drop or scrape at the wrong path."""
    given = text.strip()
    if given.startswith("https://"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: the stack scrapes over http only; give HOST:PORT of an http endpoint"
        )
    address = given.removeprefix("http://").rstrip("/").removesuffix("/metrics")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT (nor http://HOST:PORT/metrics)"
        )
    return f"{host}:{int(port)}"


def _port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535 (0 picks a free one), got {text}")
    return port


def _interval(text: str) -> float:
    """A duration that is an interval (a scrape, an evaluation, a notification's repeat):
    0 is none, which Prometheus reads as its default and Alertmanager refuses."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no interval: give one longer than 0 (such as 5s)"
        )
    return seconds


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", type=Path, default=Path("rlmetrics-stack"), help="folder for the stack's files"
    )
    for job, what in (
        ("run", f"the run's Prometheus endpoint (default {DEFAULT_RUN})"),
        ("gym", "a Gym server's endpoint"),
        ("vllm", "a vLLM engine's /metrics endpoint"),
    ):
        parser.add_argument(
            f"--{job}",
            dest=f"{job}_targets",
            action="append",
            type=_address,
            default=[],
            metavar="HOST:PORT",
            help=f"{what}, as HOST:PORT or http://HOST:PORT/metrics (repeatable)",
        )
    parser.add_argument(
        "--ray-sd",
        type=Path,
        metavar="FILE",
        help=f"Ray's service-discovery file (default {RAY_SERVICE_DISCOVERY}; read once Ray "
        "writes it, so the stack may start first)",
    )
    parser.add_argument("--no-ray", action="store_true", help="no Ray job")
    parser.add_argument(
        "--port",
        type=_port_number,
        default=DEFAULT_PORT,
        help=f"Prometheus' port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=_interval,
        default=5.0,
        metavar="DURATION",
        help="how often every target is scraped (default 5s)",
    )
    parser.add_argument(
        "--evaluation-interval",
        type=_interval,
        metavar="DURATION",
        help="how often the rules are evaluated (default: the scrape interval)",
    )
    parser.add_argument("--prometheus", metavar="PATH", help="the prometheus binary to run")
    parser.add_argument(
        "--enable-lifecycle",
        action="store_true",
        help="let Prometheus serve POST /-/reload and /-/quit (--web.enable-lifecycle): any "
        "local process could then stop it; off by default",
    )
    parser.add_argument("--no-start", action="store_true", help="write the files only")
    _add_delivery(parser)
    add_settings(parser)
    add_format_options(parser)


def _add_delivery(parser: argparse.ArgumentParser) -> None:
    delivery = parser.add_argument_group(
        "alert delivery (Alertmanager; grouped by run id, resolutions sent)"
    )
    for flag, what in (
        ("webhook", "a URL that gets Alertmanager's JSON payload"),
        ("slack", "a Slack incoming-webhook URL"),
        ("discord", "a Discord webhook URL"),
    ):
        delivery.add_argument(
            f"--{flag}",
            action="append",
            type=_url,
            default=[],
            metavar="URL",
            help=f"{what} (repeatable)",
        )
    delivery.add_argument(
        "--alertmanager",
        metavar="PATH",
        help="the Alertmanager binary to run (default: "
        "prometheus-alertmanager, else alertmanager, on PATH)",
    )
    delivery.add_argument(
        "--no-alertmanager", action="store_true", help="no Alertmanager: alerts stay in Prometheus"
    )
    delivery.add_argument(
        "--alertmanager-port",
        type=_port_number,
        metavar="PORT",
        help=f"Alertmanager's port on 127.0.0.1 (default {DEFAULT_ALERTMANAGER_PORT}, else a free "
        "one; 0 picks a free one)",
    )
    # A first message may go at once (group_wait 0); Alertmanager refuses the other two at 0.
    for flag, default, what, kind in (
        (
            "group-wait",
            "30s",
            "how long a run's first alert waits for others to join it",
            parse_duration,
        ),
        ("group-interval", "5m", "how long before a run's group tells what changed", _interval),
        (
            "repeat-interval",
            "4h",
            "how often a run's alerts still firing are told again",
            _interval,
        ),
    ):
        delivery.add_argument(
            f"--{flag}",
            type=kind,
            default=kind(default),
            metavar="DURATION",
            help=f"{what} (default {default})",
        )


def _delivery(args: argparse.Namespace) -> Delivery:
    return Delivery(
        webhooks=args.webhook,
        slack=args.slack,
        discord=args.discord,
        group_wait_s=args.group_wait,
        group_interval_s=args.group_interval,
        repeat_interval_s=args.repeat_interval,
    )


class _Stop(Exception):
    """SIGTERM: stop Prometheus and leave."""


def _raise_stop(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop


def _die_with_parent() -> None:
    """In the child before exec: receive SIGTERM when the stack command dies, however it
    dies (Linux), so no Prometheus outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _settings(args: argparse.Namespace, alertmanager: str | None) -> StackSettings:
    # Named whether or not it exists yet: Prometheus' file discovery finds a file that
    # appears later, as Ray's does when its head starts after the stack.
    ray: Path | None = None if args.no_ray else (args.ray_sd or RAY_SERVICE_DISCOVERY)
    return StackSettings(
        targets={
            "rlmetrics": args.run_targets or [DEFAULT_RUN],
            "gym": args.gym_targets,
            "vllm": args.vllm_targets,
        },
        # Absolute, not resolved: Ray's file is a link into the latest session's folder,
        # re-pointed when a cluster starts, and Prometheus re-reads what the link names.
        ray_service_discovery=ray.absolute() if ray is not None else None,
        scrape_interval_s=args.scrape_interval,
        evaluation_interval_s=args.evaluation_interval or args.scrape_interval,
        alertmanager=alertmanager,
    )


def _port(wanted: int, flag: str, what: str, taken: int | None = None) -> int | None:
    """``wanted`` (0: a free one other than ``taken``, the port the stack's other server was
    given but may not listen on yet), or None after saying it is taken."""
    port = wanted
    while port == 0 or (wanted == 0 and port == taken):
        port = free_port()
    if port != taken and port_is_free(port):
        return port
    sys.stderr.write(
        f"rlmetrics stack: 127.0.0.1:{port} is taken (another {what}?): choose another with "
        f"{flag} (0 picks a free one)\n"
    )
    return None


def _start(server: ServerProcess) -> bool:
    server.start(preexec=_die_with_parent)
    if server.wait_ready():
        return True
    sys.stderr.write(
        f"rlmetrics stack: {server.name} did not come up; its log ({server.log}):\n"
        f"{server.log_tail()}\n"
    )
    return False


def _started(server: ServerProcess) -> dict[str, Any]:
    assert server.process is not None
    return {"url": server.url, "pid": server.process.pid, "log": str(server.log)}


def run(args: argparse.Namespace) -> int:
    try:
        alert_settings = settings_from(args)
    except ValueError as exc:  # a threshold out of its range, before anything is written
        sys.stderr.write(f"rlmetrics stack: --set {exc}\n")
        return 2
    rules, problems, _context = collect_rules(alert_settings)
    for problem in problems:
        sys.stderr.write(f"rlmetrics stack: alert rules {problem.builder}: {problem.reason}\n")
    if problems:
        return 2
    refused = folder_problem(args.dir)
    if refused is not None:  # before a file is written or a server looked for
        sys.stderr.write(f"rlmetrics stack: --dir {refused}\n")
        return 2
    rows, _ = collect_rows()
    root = args.dir.resolve()
    files = StackFiles(root)
    delivery = _delivery(args)
    binary = None if args.no_start else find_prometheus(args.prometheus)
    manager: AlertmanagerProcess | None = None
    if not args.no_alertmanager:
        found = find_alertmanager(args.alertmanager)
        if binary is not None and found is None:
            sys.stderr.write(f"rlmetrics stack: {ALERTMANAGER_MISSING}\n")
        elif binary is not None and found is not None:
            wanted = args.alertmanager_port
            if wanted is None:  # not asked for: the usual port, else any (Prometheus is told)
                wanted = DEFAULT_ALERTMANAGER_PORT if port_is_free(DEFAULT_ALERTMANAGER_PORT) else 0
            port = _port(wanted, "--alertmanager-port", "Alertmanager")
            if port is None:
                return 1
            manager = AlertmanagerProcess(found, files, port)
        else:  # not started: the files, and the commands that would start it
            manager = AlertmanagerProcess(
                found or "prometheus-alertmanager",
                files,
                args.alertmanager_port or DEFAULT_ALERTMANAGER_PORT,
            )
    settings = _settings(args, manager.address if manager is not None else None)
    try:
        write_stack(root, settings, rules_yaml(rules), dashboard_json(build_dashboard(rows)))
        if manager is not None:
            write_alertmanager_config(files, delivery)
    except OSError as exc:  # a folder that cannot be created, a file where one goes: one line
        where = exc.filename or root
        sys.stderr.write(
            f"rlmetrics stack: --dir {args.dir}: cannot write {where}: {exc.strerror}\n"
        )
        return 2
    report: dict[str, Any] = {
        "dir": str(root),
        "config": str(files.config),
        "rules": str(files.rules),
        "alerts": len(rules),
        "dashboard": str(files.dashboard),
        "targets": {job: list(settings.targets.get(job, ())) for job in JOBS},
        "ray_service_discovery": (
            str(settings.ray_service_discovery) if settings.ray_service_discovery else None
        ),
        "alertmanager": None,
        "delivery": delivery.destinations if manager is not None else None,
    }
    if binary is None:
        told = PrometheusProcess(
            "prometheus", files, args.port or DEFAULT_PORT, lifecycle=args.enable_lifecycle
        )
        commands = [told] if manager is None else [manager, told]
        start_with = [f"cd {shlex.quote(str(root))} && {shlex.join(c.command())}" for c in commands]
        if not args.no_start:
            sys.stderr.write(f"rlmetrics stack: {INSTALL_HINT}\n")
        _say(
            args,
            {**report, "prometheus": None, "start_with": start_with[-1], "start_all": start_with},
            [
                f"Wrote {files.config} ({len(rules)} alert rules).",
                *_ray_lines(settings),
                *[f"Start Alertmanager first with: {command}" for command in start_with[:-1]],
                f"Start it with: {start_with[-1]}",
            ],
        )
        return 0 if args.no_start else 1
    port = _port(args.port, "--port", "Prometheus", manager.port if manager else None)
    if port is None:
        return 1
    server = PrometheusProcess(binary, files, port, lifecycle=args.enable_lifecycle)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        if manager is not None:
            if not _start(manager):
                return 1
            report["alertmanager"] = {**_started(manager), "config": str(files.alertmanager_config)}
        if not _start(server):
            return 1
        assert server.process is not None
        _say(
            args,
            {
                **report,
                "prometheus": _started(server),
                "health": [f"http://{address}/health" for address in settings.targets["rlmetrics"]],
            },
            _lines(server.url, files.dashboard, settings, len(rules), root, manager, delivery),
        )
        status = server.process.wait()
        sys.stderr.write(
            f"rlmetrics stack: prometheus exited with status {status}:\n{server.log_tail()}\n"
        )
        return 1
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        # Once stopping, it finishes stopping: a scheduler or `timeout` signals the whole
        # process group, so a second SIGTERM (or Ctrl-C) can land while it waits for its
        # servers, and must not cut that wait short with a traceback.
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.stop()
        if manager is not None:
            manager.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, interrupt)


def _lines(
    url: str,
    dashboard: Path,
    settings: StackSettings,
    alerts: int,
    root: Path,
    manager: AlertmanagerProcess | None,
    delivery: Delivery,
) -> list[str]:
    interval = duration(settings.scrape_interval_s)
    lines = [
        f"Prometheus:  {url}  (every target every {interval}; {alerts} alert rules)",
        f"  targets:   {url}/targets",
        f"  alerts:    {url}/alerts",
    ]
    if manager is not None:
        sent = ", ".join(f"{n} {kind}" for kind, n in delivery.destinations.items() if n)
        sent = sent or "no webhook: pass --webhook, --slack or --discord"
        lines.append(f"Alertmanager: {manager.url}  (grouped by run id; to {sent})")
    lines += [f"  run health: http://{a}/health" for a in settings.targets.get("rlmetrics", ())]
    lines += [
        f"Targets: {root}/targets/<job>.json (Prometheus re-reads them as you edit them)",
        *_ray_lines(settings),
        f"Dashboard: import {dashboard} into Grafana (Dashboards > New > Import), with a "
        f"Prometheus data source at {url}; `rlmetrics dashboard --prometheus {url}` gives one "
        "clipped to what the run exported.",
        "Ctrl-C stops the stack.",
    ]
    return lines


def _ray_lines(settings: StackSettings) -> list[str]:
    """Where the ``ray`` job's nodes come from: Ray's file outlives the cluster that wrote
    it, so on a machine where Ray ran earlier its dead nodes are listed, and the user must be
    able to tell why, and how to leave them out."""
    found = settings.ray_service_discovery
    if found is None:
        return []
    when = "" if found.exists() else ", read once Ray writes it"
    return [f"Ray nodes: {found} (Ray's own list{when}; --no-ray leaves them out)"]


def _say(args: argparse.Namespace, report: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print_json(report)
    else:
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
