"""A local Prometheus for a run, in one command: writes DIR/prometheus.yml scraping the run's
endpoint (--run, default 127.0.0.1:9464), Gym servers (--gym), vLLM engines (--vllm) and every
Ray node (Ray's own service-discovery file, when Ray runs here), each job's targets in
DIR/targets/<job>.json (Prometheus re-reads them: edit them as servers come and go), the
generated alert rules in DIR/rules/ and the Grafana dashboard in DIR/grafana/; then starts
Debian's `prometheus` on 127.0.0.1 and keeps it running until Ctrl-C (or SIGTERM).

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
from ..stack.config import JOBS, RAY_SERVICE_DISCOVERY, StackSettings, write_stack
from ..stack.server import (
    INSTALL_HINT,
    PrometheusProcess,
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


def _address(text: str) -> str:
    host, colon, port = text.strip().removeprefix("http://").rstrip("/").rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return f"{host}:{int(port)}"


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
            help=f"{what} (repeatable)",
        )
    parser.add_argument(
        "--ray-sd",
        type=Path,
        metavar="FILE",
        help=f"Ray's service-discovery file (default {RAY_SERVICE_DISCOVERY}, when it exists)",
    )
    parser.add_argument("--no-ray", action="store_true", help="no Ray job")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"Prometheus' port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=parse_duration,
        default=5.0,
        metavar="DURATION",
        help="how often every target is scraped (default 5s)",
    )
    parser.add_argument(
        "--evaluation-interval",
        type=parse_duration,
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
    add_settings(parser)
    add_format_options(parser)


class _Stop(Exception):
    """SIGTERM: stop Prometheus and leave."""


def _raise_stop(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop


def _die_with_parent() -> None:
    """In the child before exec: receive SIGTERM when the stack command dies, however it
    dies (Linux), so no Prometheus outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _settings(args: argparse.Namespace) -> StackSettings:
    ray: Path | None = None
    if not args.no_ray:
        ray = args.ray_sd or (RAY_SERVICE_DISCOVERY if RAY_SERVICE_DISCOVERY.exists() else None)
    return StackSettings(
        targets={
            "rlmetrics": args.run_targets or [DEFAULT_RUN],
            "gym": args.gym_targets,
            "vllm": args.vllm_targets,
        },
        ray_service_discovery=ray.resolve() if ray is not None else None,
        scrape_interval_s=args.scrape_interval,
        evaluation_interval_s=args.evaluation_interval or args.scrape_interval,
    )


def run(args: argparse.Namespace) -> int:
    rules, problems, _context = collect_rules(settings_from(args))
    for problem in problems:
        sys.stderr.write(f"rlmetrics stack: alert rules {problem.builder}: {problem.reason}\n")
    if problems:
        return 2
    rows, _ = collect_rows()
    settings = _settings(args)
    root = args.dir.resolve()
    files = write_stack(root, settings, rules_yaml(rules), dashboard_json(build_dashboard(rows)))
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
    }
    binary = None if args.no_start else find_prometheus(args.prometheus)
    if binary is None:
        told = PrometheusProcess(
            "prometheus", files, args.port or DEFAULT_PORT, lifecycle=args.enable_lifecycle
        )
        command = f"cd {shlex.quote(str(root))} && {shlex.join(told.command())}"
        if not args.no_start:
            sys.stderr.write(f"rlmetrics stack: {INSTALL_HINT}\n")
        _say(
            args,
            {**report, "prometheus": None, "start_with": command},
            [f"Wrote {files.config} ({len(rules)} alert rules).", f"Start it with: {command}"],
        )
        return 0 if args.no_start else 1
    port = free_port() if args.port == 0 else args.port
    if not port_is_free(port):
        sys.stderr.write(
            f"rlmetrics stack: 127.0.0.1:{port} is taken (another Prometheus?): choose another "
            "with --port (0 picks a free one)\n"
        )
        return 1
    server = PrometheusProcess(binary, files, port, lifecycle=args.enable_lifecycle)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.start(preexec=_die_with_parent)
        if not server.wait_ready():
            sys.stderr.write(
                f"rlmetrics stack: prometheus did not come up; its log ({server.log}):\n"
                f"{server.log_tail()}\n"
            )
            return 1
        assert server.process is not None
        _say(
            args,
            {
                **report,
                "prometheus": {
                    "url": server.url,
                    "pid": server.process.pid,
                    "log": str(server.log),
                },
                "health": [f"http://{address}/health" for address in settings.targets["rlmetrics"]],
            },
            _lines(server.url, files.dashboard, settings, len(rules), root),
        )
        status = server.process.wait()
        sys.stderr.write(
            f"rlmetrics stack: prometheus exited with status {status}:\n{server.log_tail()}\n"
        )
        return 1
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _lines(
    url: str, dashboard: Path, settings: StackSettings, alerts: int, root: Path
) -> list[str]:
    interval = duration(settings.scrape_interval_s)
    lines = [
        f"Prometheus:  {url}  (every target every {interval}; {alerts} alert rules)",
        f"  targets:   {url}/targets",
        f"  alerts:    {url}/alerts",
    ]
    lines += [f"  run health: http://{a}/health" for a in settings.targets.get("rlmetrics", ())]
    lines += [
        f"Targets: {root}/targets/<job>.json (Prometheus re-reads them as you edit them)",
        f"Dashboard: import {dashboard} into Grafana (Dashboards > New > Import), with a "
        f"Prometheus data source at {url}; `rlmetrics dashboard --prometheus {url}` gives one "
        "clipped to what the run exported.",
        "Ctrl-C stops Prometheus.",
    ]
    return lines


def _say(args: argparse.Namespace, report: dict[str, Any], lines: list[str]) -> None:
    if args.json:
        print_json(report)
    else:
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
