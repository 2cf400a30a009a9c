"""Every hook is documented and tested (as datasette checks its own hooks).

``test_hook_<name>`` exercises hook ``<name>`` end to end through a registered plugin; the two
checks at the bottom fail when a hook is added without a section in
docs/writing-a-plugin.md or without its ``test_hook_<name>`` here.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import pluggy

import rlmetrics
from rlmetrics import hookspecs
from rlmetrics.events import CheckpointSave, EfficiencySummary, SetupTimings
from rlmetrics.exporters import Exporter
from rlmetrics.plugins import register
from rlmetrics.testing import points, single

DOCS = Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md"


def _hooks() -> dict[str, list[str]]:
    """``{hook name: argument names}`` from the hookspecs module."""
    marker = "rlmetrics_spec"
    return {
        name: list(inspect.signature(function).parameters)
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, marker)
    }


class Seen:
    """A plugin implementing every hook, remembering what each received."""

    def __init__(self) -> None:
        self.calls: dict[str, Any] = {}

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.calls["log_metrics"] = (dict(metrics), step, prefix)

    @rlmetrics.hookimpl
    def on_setup_timing(self, timings: Any) -> None:
        self.calls["on_setup_timing"] = timings

    @rlmetrics.hookimpl
    def on_efficiency_summary(self, summary: Any, step: int) -> None:
        self.calls["on_efficiency_summary"] = (summary, step)

    @rlmetrics.hookimpl
    def on_rollout_checkpoint(self, event: Any) -> None:
        self.calls["on_rollout_checkpoint"] = event

    @rlmetrics.hookimpl
    def telemetry_started(self, telemetry: Any) -> None:
        self.calls["telemetry_started"] = (telemetry, rlmetrics.is_exporting())

    @rlmetrics.hookimpl
    def telemetry_stopping(self, telemetry: Any) -> None:
        self.calls["telemetry_stopping"] = (telemetry, rlmetrics.is_exporting())


def _seen() -> Seen:
    seen = Seen()
    assert register(seen, "seen")
    return seen


def test_hook_log_metrics() -> None:
    seen = _seen()
    rlmetrics.Logger(backends={}).log_metrics({"a": {"b": 1.0}}, step=7, prefix="train")
    assert seen.calls["log_metrics"] == ({"a/b": 1.0}, 7, "train")


def test_hook_on_setup_timing() -> None:
    seen = _seen()
    rlmetrics.Logger(backends={}).log_setup_timing({"policy_init_time_s": 2.0, "flag": 1})
    assert seen.calls["on_setup_timing"] == SetupTimings({"policy_init": 2.0}, {"flag": 1})


def test_hook_on_efficiency_summary() -> None:
    seen = _seen()
    summary = EfficiencySummary(seconds={"idle/validation": 1.0}, step_wall_time_s=4.0)
    rlmetrics.Logger(backends={}).log_efficiency_summary(summary, step=9)
    assert seen.calls["on_efficiency_summary"] == (summary, 9)


def test_hook_on_rollout_checkpoint() -> None:
    seen = _seen()
    event = CheckpointSave({"total_save_seconds": 1.5}, wall_time_s=100.0)
    rlmetrics.Logger(backends={}).log_rollout_checkpoint(event)
    assert seen.calls["on_rollout_checkpoint"] == event


def test_hook_telemetry_started() -> None:
    seen = _seen()
    with rlmetrics.start(service_name="hooks") as handle:
        assert seen.calls["telemetry_started"] == (handle, False)  # no reader: not exporting


def test_hook_telemetry_stopping() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    seen = _seen()
    with rlmetrics.start(readers=[InMemoryMetricReader()]) as handle:
        assert "telemetry_stopping" not in seen.calls
    # Called before the last export, while recording still works.
    assert seen.calls["telemetry_stopping"] == (handle, True)


def test_hook_register_backends(tmp_path: Path) -> None:
    rows: list[Any] = []

    class ListBackend:
        def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
            rows.append((dict(metrics), step, prefix))

        def finish(self) -> None:
            rows.append("finished")

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("list", ListBackend)

    register(Offers(), "offers-list")
    with rlmetrics.Logger(backends={"list": {}}) as logger:
        logger.log_metrics({"x": 1}, step=2, prefix="p")
    assert rows == [({"x": 1}, 2, "p"), "finished"]


def test_hook_register_exporters() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    options: list[Any] = []

    def make(export_interval_s: float | None = None, **given: Any) -> Exporter:
        options.append((export_interval_s, given))
        return Exporter(reader)

    class Offers:
        @rlmetrics.hookimpl
        def register_exporters(self, register: Any) -> None:
            register("in-memory", make)

    register(Offers(), "offers-in-memory")
    rlmetrics.declare("hooked", [rlmetrics.MetricSpec("hooked.gauge", rlmetrics.Kind.GAUGE)])
    with rlmetrics.start(exporters={"in-memory": {"flavour": "x"}}, export_interval_s=2):
        rlmetrics.record("hooked", {"hooked.gauge": 3.0})
        assert single(points(reader), "hooked.gauge").value == 3.0
    assert options == [(2, {"flavour": "x"})]


# -- the checks on the checks -------------------------------------------------------------------


def test_every_hook_is_documented() -> None:
    """docs/writing-a-plugin.md has a ``### `hook(arguments)` `` section per hook."""
    text = DOCS.read_text()
    for name, arguments in _hooks().items():
        heading = f"### `{name}({', '.join(arguments)})`"
        assert heading in text, f"docs/writing-a-plugin.md lacks the section {heading}"


def test_every_hook_has_a_test() -> None:
    module = sys.modules[__name__]
    for name in _hooks():
        assert hasattr(module, f"test_hook_{name}"), f"hook {name!r} has no test_hook_{name}"


def test_the_hookspecs_are_what_the_plugin_manager_uses() -> None:
    pm = pluggy.PluginManager("rlmetrics")
    pm.add_hookspecs(hookspecs)
    assert {caller.name for caller in pm.hook.__dict__.values() if hasattr(caller, "name")} == set(
        _hooks()
    )
