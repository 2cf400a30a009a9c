"""The files of a local monitoring stack: a Prometheus configuration, its scrape targets and
the generated alert rules, all in one folder.

Every job finds its targets through a file (Prometheus' file-based service discovery), which
Prometheus watches and re-reads: rewrite ``targets/gym.json`` when a Gym server comes up and the
next scrape cycle has it, no restart. The Ray job reads the file Ray itself keeps on the head
node (``/tmp/ray/prom_metrics_service_discovery.json``), which Ray rewrites as nodes join and
leave.

Nothing here listens on anything but loopback: the configuration is for a Prometheus on
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .._yaml import render_yaml
from ..alerts.model import duration

__all__ = [
    "JOBS",
    "RAY_SERVICE_DISCOVERY",
    "StackFiles",
    "StackSettings",
    "atomic_write",
    "prometheus_config",
    "write_stack",
    "write_targets",
]

#: The jobs of the stack, each with the file its targets are read from (``targets/<job>.json``).
JOBS = ("rlmetrics", "gym", "vllm")

#: Where Ray's head node keeps its own service-discovery file for Prometheus.
RAY_SERVICE_DISCOVERY = Path("/tmp/ray/prom_metrics_service_discovery.json")


@attrs.frozen
class StackSettings:
    """What the stack scrapes and how often.

    :param targets: ``{job: ["host:port", ...]}`` for the jobs of :data:`JOBS`.
    :param ray_service_discovery: Ray's service-discovery file, or None for no Ray job.
    :param alertmanager: where Prometheus sends the alerts it fires (``host:port``).
    """

    targets: Mapping[str, Sequence[str]] = attrs.field(factory=dict)
    ray_service_discovery: Path | None = None
    scrape_interval_s: float = 15.0
    evaluation_interval_s: float = 15.0
    refresh_interval_s: float = 5.0
    #: ``host:port`` of the Alertmanager Prometheus sends its alerts to, or None for none.
    alertmanager: str | None = None


@attrs.frozen
class StackFiles:
    """Where :func:`write_stack` put each file."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def rules(self) -> Path:
        return self.root / "rules" / "rlmetrics.yml"

    @property
    def dashboard(self) -> Path:
        return self.root / "grafana" / "rlmetrics.json"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def alertmanager_config(self) -> Path:
        return self.root / "alertmanager.yml"

    @property
    def alertmanager_data(self) -> Path:
        return self.root / "alertmanager-data"

    def targets(self, job: str) -> Path:
        return self.root / "targets" / f"{job}.json"


def atomic_write(path: Path, text: str) -> None:
    """Write ``path`` so that a reader (Prometheus watching it) never sees half a file; only
    its owner may read it (NamedTemporaryFile's 0600: a file may hold a webhook's secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
    ) as handle:
        handle.write(text)
    os.replace(handle.name, path)


def write_targets(
    path: Path, addresses: Iterable[str], labels: Mapping[str, str] | None = None
) -> None:
    """A file-based service-discovery file listing ``addresses`` (``host:port``)."""
    groups: list[dict[str, Any]] = []
    listed = sorted(set(addresses))
    if listed:
        groups.append({"targets": listed, "labels": dict(labels or {})})
    atomic_write(path, json.dumps(groups, indent=2) + "\n")


def prometheus_config(files: StackFiles, settings: StackSettings) -> dict[str, Any]:
    """The configuration document (paths relative to the stack's folder, where Prometheus
    runs)."""
    interval = duration(settings.scrape_interval_s)
    # A scrape must end before the next one starts: Prometheus refuses a longer timeout.
    timeout = duration(min(10.0, settings.scrape_interval_s * 0.9))
    refresh = duration(settings.refresh_interval_s)

    def job(name: str, sd_file: str) -> dict[str, Any]:
        return {
            "job_name": name,
            "scrape_interval": interval,
            "scrape_timeout": timeout,
            "file_sd_configs": [{"files": [sd_file], "refresh_interval": refresh}],
        }

    jobs = [job(name, str(files.targets(name).relative_to(files.root))) for name in JOBS]
    if settings.ray_service_discovery is not None:
        jobs.append(job("ray", str(settings.ray_service_discovery)))
    document: dict[str, Any] = {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": duration(settings.evaluation_interval_s),
        },
        "rule_files": [str(files.rules.relative_to(files.root))],
        "scrape_configs": jobs,
    }
    if settings.alertmanager is not None:
        document["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [settings.alertmanager]}]}]
        }
    return document


def write_stack(
    root: Path, settings: StackSettings, rules_text: str, dashboard_text: str
) -> StackFiles:
    """Write the configuration, the targets of each job, the rules and the dashboard under
    ``root``."""
    files = StackFiles(root)
    for name in JOBS:
        write_targets(files.targets(name), settings.targets.get(name, ()))
    atomic_write(files.rules, rules_text)
    atomic_write(files.dashboard, dashboard_text)
    atomic_write(
        files.config,
        "# Generated by `rlmetrics stack`; the targets are in targets/*.json (edit them:\n"
        "# Prometheus re-reads them), the alert rules in rules/ (`rlmetrics alerts`).\n"
        + render_yaml(prometheus_config(files, settings)),
    )
    return files
