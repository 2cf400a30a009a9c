"""What a dashboard row is made of: panels of PromQL queries, and the variables they use.

A family offers rows through the ``register_dashboard_rows`` hook; :mod:`.grafana` lays them
out as Grafana JSON. The model is plain data so it can be checked before it is rendered: every
query names the declared series it reads (``reads``), which the generator checks against the
registry and the Prometheus test checks against a real server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from .promql import Names

__all__ = ["PANEL_TYPES", "Panel", "Query", "Row", "RowBuilder", "Variable"]

#: Grafana panel types the generator lays out.
PANEL_TYPES = frozenset({"timeseries", "stat", "bargauge", "gauge"})


def _queries(items: Iterable[Query]) -> tuple[Query, ...]:
    return tuple(items)


def _strings(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _steps(items: Iterable[tuple[float, str]]) -> tuple[tuple[float, str], ...]:
    return tuple(items)


def _panels(items: Iterable[Panel]) -> tuple[Panel, ...]:
    return tuple(items)


def _variables(items: Iterable[Variable]) -> tuple[Variable, ...]:
    return tuple(items)


@attrs.frozen
class Query:
    """One PromQL expression and the legend of the series it returns.

    ``expr`` may use the dashboard's variables (``$run_id``, ``$__rate_interval``, ``$__range``
    and any a row declares) and should restrict itself to the selected runs with
    :func:`rlmetrics.dashboard.promql.for_run`.
    """

    expr: str
    legend: str = ""


@attrs.frozen
class Panel:
    """One Grafana panel.

    :param reads: the OpenTelemetry names of the declared series the queries read (checked
        against the registry when the dashboard is generated).
    :param unit: a Grafana unit id (``s``, ``percent``, ``bytes``, ``short``…).
    :param stacked: stack the series (a breakdown that adds up to a whole).
    :param thresholds: ``(value, color)`` steps above the base green, for gauges.
    """

    title: str
    queries: tuple[Query, ...] = attrs.field(converter=_queries)
    reads: tuple[str, ...] = attrs.field(converter=_strings)
    description: str = ""
    type: str = attrs.field(default="timeseries")
    unit: str = "short"
    stacked: bool = False
    bars: bool = False
    thresholds: tuple[tuple[float, str], ...] = attrs.field(default=(), converter=_steps)
    width: int = 12
    height: int = 8

    @type.validator
    def _check_type(self, _attribute: object, value: str) -> None:
        if value not in PANEL_TYPES:
            raise ValueError(
                f"panel {self.title!r}: type {value!r} is not one of {sorted(PANEL_TYPES)}"
            )


@attrs.frozen
class Variable:
    """A dashboard variable whose values come from a label of the selected runs' series
    (``label_values(<series>, <label>)``), multi-valued with an ``All`` that matches any."""

    name: str
    label: str
    series: str
    title: str = ""


@attrs.frozen
class Row:
    """A titled row of panels. ``order`` places it (the built-in families use 0-49, plugins
    50 and up; ties by title)."""

    title: str
    panels: tuple[Panel, ...] = attrs.field(converter=_panels)
    order: int = 100
    variables: tuple[Variable, ...] = attrs.field(default=(), converter=_variables)
    description: str = ""


#: What a plugin registers: builds its row from the Prometheus names of the declared series.
RowBuilder = Callable[[Names], "Row | None"]
