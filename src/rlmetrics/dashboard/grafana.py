"""The Grafana dashboard: every plugin's rows, laid out as Grafana JSON.

``rlmetrics dashboard`` prints it; ``docs/grafana/rlmetrics.json`` is that output, committed,
and a test fails when it differs from what the installed plugins generate. Plain JSON, no
dashboard SDK: the layout is a grid of rows and the JSON model is stable (schema 39).

No datasource uid is hard-coded (a common defect of shared dashboards): a ``datasource``
variable picks the Prometheus, and every query is restricted to the runs the ``run_id``
variable selects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .. import warn_once
from ..hooks import collect_offered, offered_label
from ..plugins import load_plugins
from ..registry import default_registry
from .model import Panel, Row, RowBuilder, Variable
from .promql import RUN_ID_LABEL, Names

__all__ = [
    "DASHBOARD_UID",
    "GridProblem",
    "build_dashboard",
    "collect_rows",
    "dashboard_json",
    "panel_queries",
    "substitute",
]

DASHBOARD_UID = "rlmetrics"
_SCHEMA_VERSION = 39
_GRID_WIDTH = 24
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@attrs.frozen
class GridProblem:
    """A row that could not be built: which builder, and why."""

    builder: str
    reason: str


def collect_rows() -> tuple[list[Row], list[GridProblem]]:
    """The rows every loaded plugin offers, built from the declared series, in order."""
    plugins = load_plugins()
    names = Names(item.spec for item in default_registry().declared())
    builders: list[tuple[str, RowBuilder]] = collect_offered(plugins.hooks.register_dashboard_rows)
    rows: list[Row] = []
    problems: list[GridProblem] = []
    for plugin, build in builders:
        label = offered_label(plugin, build)
        try:
            row = build(names)
            if row is not None:
                for panel in row.panels:
                    for read in panel.reads:
                        names.spec(read)  # raises KeyError for an undeclared series
                rows.append(row)
        except Exception as exc:
            warn_once(f"dashboard-row:{label}", f"rlmetrics: dashboard row {label} failed: {exc}")
            problems.append(GridProblem(label, str(exc)))
    rows.sort(key=lambda row: (row.order, row.title))
    return rows, problems


def _variables(rows: Sequence[Row]) -> list[dict[str, Any]]:
    found: dict[str, Variable] = {}
    for row in rows:
        for variable in row.variables:
            found.setdefault(variable.name, variable)
    listed: list[dict[str, Any]] = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        _query_variable(
            Variable("run_id", RUN_ID_LABEL, "target_info", "Run"),
        ),
    ]
    listed += [_query_variable(variable) for variable in found.values()]
    return listed


def _query_variable(variable: Variable) -> dict[str, Any]:
    query = f"label_values({variable.series}, {variable.label})"
    return {
        "name": variable.name,
        "label": variable.title or variable.name,
        "type": "query",
        "datasource": _DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": variable.name},
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "sort": 1,
        "current": {},
        "hide": 0,
    }


def _field_config(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.type == "timeseries":
        custom: dict[str, Any] = {
            "drawStyle": "bars" if panel.bars else "line",
            "fillOpacity": 70 if (panel.bars or panel.stacked) else 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
        }
        if panel.stacked:
            custom["stacking"] = {"mode": "normal", "group": "A"}
        defaults["custom"] = custom
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    steps += [{"color": color, "value": value} for value, color in panel.thresholds]
    defaults["thresholds"] = {"mode": "absolute", "steps": steps}
    if panel.type == "gauge":
        defaults["min"] = 0
        defaults["max"] = 100
    return {"defaults": defaults, "overrides": []}


def _options(panel: Panel) -> dict[str, Any]:
    if panel.type == "timeseries":
        return {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel.type == "bargauge":
        return {"orientation": "horizontal", "displayMode": "basic", "reduceOptions": reduce}
    if panel.type == "gauge":
        return {"reduceOptions": reduce, "showThresholdMarkers": True}
    return {"reduceOptions": reduce, "colorMode": "value", "graphMode": "none"}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.type,
        "title": panel.title,
        "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": _DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend or "__auto",
                "range": panel.type == "timeseries",
                "instant": panel.type != "timeseries",
            }
            for index, query in enumerate(panel.queries)
        ],
        "fieldConfig": _field_config(panel),
        "options": _options(panel),
    }


def build_dashboard(rows: Iterable[Row], title: str = "rlmetrics") -> dict[str, Any]:
    """The Grafana JSON model of ``rows``: a row header per row, its panels on a 24-column
    grid, left to right."""
    rows = list(rows)
    panels: list[dict[str, Any]] = []
    y = 0
    panel_id = 1
    for row in rows:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": _GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = 0
        line_height = 0
        for panel in row.panels:
            if x + panel.width > _GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panels.append(_panel(panel, panel_id, x, y))
            panel_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return {
        "title": title,
        "uid": DASHBOARD_UID,
        "description": "Generated by `rlmetrics dashboard` from the declared series of every "
        "installed rlmetrics plugin; do not edit by hand.",
        "tags": ["rlmetrics", "reinforcement-learning", "opentelemetry"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": _SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": _variables(rows)},
        "panels": panels,
    }


def dashboard_json(dashboard: Mapping[str, Any]) -> str:
    """The committed text form: two-space indentation, a final newline."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def panel_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard.get("panels", ())
        if panel.get("type") != "row"
        for target in panel.get("targets", ())
    ]


_VARIABLE = re.compile(r"\$(\{(\w+)(?::\w+)?\}|(\w+))")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with Grafana variables (``$name``, ``${name}``) replaced from ``values``, as
    Grafana does before it sends a query; an unknown variable raises ``KeyError``."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(2) or match.group(3)
        if name not in values:
            raise KeyError(f"no value for the dashboard variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
