"""The dashboard clipped to one run: only the panels whose series that run exported, over the
time the run ran (``rlmetrics dashboard --prometheus URL``).

The full dashboard has a panel for every declared series of every installed plugin; a run that
used no Gym server and no vLLM engine shows rows of "No data". Asked against the Prometheus that
scraped the run, the run's targets are those whose ``target_info`` carries its run id; the
series names they exported over the run's time are listed by the HTTP API, and a panel is kept
when at least one series it reads is among them. The time range is the run's first and newest
step (``rl.step.last_timestamp``), "now" while it is still logging.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .model import Panel, Row
from .promql import RUN_ID_LABEL, Names, sample_names

__all__ = [
    "ClipResult",
    "PrometheusAPI",
    "PrometheusError",
    "RunWindow",
    "clip_dashboard",
    "clip_rows",
    "exported_names",
    "find_run",
]

_LAST_STEP = "rl.step.last_timestamp"
#: A run whose newest step is this recent is still running: its range ends "now".
_LIVE_S = 300.0
#: Margin around the run's first and newest step, so the edges are visible.
_MARGIN_S = 60.0


class PrometheusError(RuntimeError):
    """The Prometheus API could not answer (unreachable, an error status, a bad query)."""


class PrometheusAPI:
    """The few calls of Prometheus' HTTP API the clipping needs."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, params: Sequence[tuple[str, str]] = ()) -> Any:
        query = urllib.parse.urlencode(list(params))
        address = f"{self.url}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            try:
                body = json.load(error)
            except Exception:
                raise PrometheusError(f"{address}: HTTP {error.code}") from None
        except (OSError, ValueError) as error:
            raise PrometheusError(f"cannot query Prometheus at {self.url}: {error}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = [("query", expr)] + ([("time", f"{at:.3f}")] if at is not None else [])
        return list(self.get("/api/v1/query", params)["result"])


@attrs.frozen
class RunWindow:
    """A run as Prometheus saw it: its targets and its first and newest step."""

    run_id: str
    targets: tuple[tuple[str, str], ...]  # (job, instance)
    first_step_s: float | None
    last_step_s: float | None


def _selector(targets: Iterable[tuple[str, str]]) -> list[str]:
    return [f'{{job="{job}",instance="{instance}"}}' for job, instance in targets]


def find_run(api: PrometheusAPI, names: Names, run_id: str | None, lookback_s: float) -> RunWindow:
    """The run ``run_id`` (default: the one whose newest step is the latest) within
    ``lookback_s`` seconds of now."""
    now = time.time()
    window = f"{int(lookback_s)}s"
    info = f'max_over_time(target_info{{{RUN_ID_LABEL}!=""}}[{window}])'
    seen = api.query(f"max by (job, instance, {RUN_ID_LABEL}) ({info})", now)
    runs: dict[str, set[tuple[str, str]]] = {}
    for series in seen:
        labels = series["metric"]
        runs.setdefault(labels[RUN_ID_LABEL], set()).add((labels["job"], labels["instance"]))
    if not runs:
        raise PrometheusError(
            f"no rlmetrics run in {api.url} over the last {window} (no target_info with "
            f"{RUN_ID_LABEL}): is it scraping the run's endpoint?"
        )
    steps: dict[str, tuple[float | None, float | None]] = {}
    if _LAST_STEP in names:
        last = names.gauge(_LAST_STEP)
        for run in runs:
            info = f'target_info{{{RUN_ID_LABEL}="{run}"}}'
            joined = f" and on(job, instance) max_over_time({info}[{window}])"
            earliest = api.query(f"min(min_over_time({last}[{window}]){joined})", now)
            latest = api.query(f"max(max_over_time({last}[{window}]){joined})", now)
            steps[run] = (
                float(earliest[0]["value"][1]) if earliest else None,
                float(latest[0]["value"][1]) if latest else None,
            )
    if run_id is None:
        run_id = max(runs, key=lambda run: (steps.get(run, (None, None))[1] or 0.0, run))
    elif run_id not in runs:
        raise PrometheusError(f"run {run_id!r} is not in {api.url}; runs there: {sorted(runs)}")
    first, newest = steps.get(run_id, (None, None))
    return RunWindow(run_id, tuple(sorted(runs[run_id])), first, newest)


def exported_names(api: PrometheusAPI, run: RunWindow, lookback_s: float) -> set[str]:
    """Every series name the run's targets exported within the lookback."""
    now = time.time()
    params = [("match[]", s) for s in _selector(run.targets)]
    params += [("start", f"{now - lookback_s:.3f}"), ("end", f"{now:.3f}")]
    return set(api.get("/api/v1/label/__name__/values", params))


@attrs.frozen
class ClipResult:
    """The rows kept and the panels dropped (``(row title, panel title)``)."""

    rows: tuple[Row, ...]
    dropped: tuple[tuple[str, str], ...]


def _panel_present(panel: Panel, names: Names, present: set[str]) -> bool:
    return any(
        sample in present for read in panel.reads for sample in sample_names(names.spec(read))
    )


def clip_rows(rows: Iterable[Row], names: Names, present: set[str]) -> ClipResult:
    """``rows`` with only the panels at least one of whose series is in ``present`` (sample
    names: ``rl_reward_mean``, ``..._total``, ``..._bucket``); rows left empty go too."""
    kept: list[Row] = []
    dropped: list[tuple[str, str]] = []
    for row in rows:
        panels = [p for p in row.panels if _panel_present(p, names, present)]
        dropped += [(row.title, p.title) for p in row.panels if p not in panels]
        if panels:
            kept.append(attrs.evolve(row, panels=panels))
    return ClipResult(tuple(kept), tuple(dropped))


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clip_dashboard(
    dashboard: Mapping[str, Any], run: RunWindow, now: float | None = None
) -> dict[str, Any]:
    """``dashboard`` (Grafana JSON) set to ``run``: its time range and its ``run_id``
    variable's current value."""
    now = time.time() if now is None else now
    clipped = dict(dashboard)
    if run.first_step_s is not None and run.last_step_s is not None:
        live = now - run.last_step_s < _LIVE_S
        clipped["time"] = {
            "from": _iso(run.first_step_s - _MARGIN_S),
            "to": "now" if live else _iso(run.last_step_s + _MARGIN_S),
        }
    variables = []
    for variable in clipped.get("templating", {}).get("list", []):
        if variable.get("name") == "run_id":
            variable = {
                **variable,
                "current": {"selected": True, "text": [run.run_id], "value": [run.run_id]},
            }
        variables.append(variable)
    clipped["templating"] = {"list": variables}
    clipped["description"] = (
        f"{dashboard.get('description', '')} Clipped to run {run.run_id}: only the panels "
        "whose series it exported."
    ).strip()
    return clipped
