"""Every hook is documented and tested (as datasette checks its own hooks).

``test_hook_<name>`` exercises hook ``<name>`` end to end through a registered plugin; the two
checks at the bottom fail when a hook is added without a section in
docs/writing-a-plugin.md or without its ``test_hook_<name>`` here.
"""

from __future__ import annotations

import inspect
import io
import sys
from pathlib import Path
from typing import Any

import pluggy
import pytest

import rlmetrics
from rlmetrics import hookspecs
from rlmetrics.backends.jsonl import read_jsonl
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
    def on_trajectories(self, batch: Any) -> None:
        self.calls["on_trajectories"] = batch

    @rlmetrics.hookimpl
    def on_alert(self, alert: Any) -> None:
        self.calls.setdefault("on_alert", []).append(alert)

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


def test_hook_on_trajectories() -> None:
    seen = _seen()
    rlmetrics.Logger(backends={}).log_trajectories(
        [{"sample_id": "s0", "outcome": "failure", "turns": [{"tool_calls": [{"name": "t"}]}]}],
        step=3,
    )
    batch = seen.calls["on_trajectories"]
    [trajectory] = batch.trajectories
    assert batch.step == 3 and batch.dropped == 0
    assert (trajectory.sample_id, trajectory.outcome, trajectory.tool_call_count) == (
        "s0",
        "failure",
        1,
    )


def test_hook_on_alert(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process stall rule fires RLStepStalled when the run goes silent past its bound
    and resolves it when a step arrives; a backend with ``log_alert`` gets the same alerts."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from rlmetrics import liveness, stall_watch

    now = [1_000.0]
    monkeypatch.setattr(liveness, "clock", lambda: now[0])
    monkeypatch.setattr(stall_watch, "CHECK_INTERVAL_S", 3600.0)  # checked by hand below
    taken: list[Any] = []

    class AlertBackend:
        inline = True

        def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
            pass

        def log_alert(self, alert: Any) -> None:
            taken.append(alert)

        def finish(self) -> None:
            pass

    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("alerts", AlertBackend)

    seen = _seen()
    register(Offers(), "offers-alerts")
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        watch = stall_watch.watch(True)
        assert watch is not None
        logger = rlmetrics.Logger(backends={"alerts": {}})
        logger.log_metrics({"loss": 1.0}, step=4, prefix="train")
        assert watch.check() is None  # not silent long enough
        now[0] += 601.0
        fired = watch.check()
        assert fired is not None and watch.check() is None  # said once while it holds
        logger.log_metrics({"loss": 1.0}, step=5, prefix="train")
        resolved = watch.check()
        logger.finish()
    assert [(a.name, a.state, a.step) for a in seen.calls["on_alert"]] == [
        ("RLStepStalled", "firing", 4),
        ("RLStepStalled", "resolved", 5),
    ]
    assert seen.calls["on_alert"] == [fired, resolved]
    assert "601 s" in fired.summary and fired.time_s == 1_601.0
    assert taken == [fired, resolved]


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


class _Tsv:
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None: ...

    def finish(self) -> None: ...


@pytest.mark.parametrize(
    ("offered", "said"),
    [
        # Before: "failed to start" and, in a traceback, "TypeError: '_Tsv' object is not
        # callable"; now the line says what to register.
        (_Tsv(), "offered a _Tsv instance, not a factory: register('partial', _Tsv)"),
        # Before: it started, then failed at every step (counted, said at finish); then the
        # line, with "Partial has no log_metrics()" in a traceback below it.
        (type("Partial", (), {"finish": _Tsv.finish}), "Partial has no log_metrics()"),
    ],
    ids=["an instance", "no log_metrics"],
)
def test_a_backend_offered_in_the_wrong_shape_is_skipped_saying_what_to_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, offered: Any, said: str
) -> None:
    class Offers:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("partial", offered)

    register(Offers(), "offers-partial")
    with caplog.at_level("WARNING", logger="rlmetrics"):
        logger = rlmetrics.Logger(backends={"partial": {}, "jsonl": {"path": tmp_path / "m"}})
        logger.log_metrics({"x": 1}, step=1)
        logger.finish()
    assert list(logger.backends) == ["jsonl"]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("rlmetrics: backend 'partial' (from plugin 'offers-partial') failed")
    assert said in line  # in the line itself, not only in a traceback below it


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


@pytest.mark.parametrize(
    ("built", "said"),
    [
        # Before: "its factory returned a InMemoryMetricReader, not an ...Exporter".
        ("reader", r"returned an InMemoryMetricReader, .*: return Exporter\(reader\)"),
        ("processor", r"returned a SimpleSpanProcessor, .*: return Exporter\(span_processor="),
        ("nothing", r"returned None, not an rlmetrics\.exporters\.Exporter"),
    ],
)
def test_an_exporter_factory_returning_a_bare_reader_says_how_to_wrap_it(
    built: str, said: str
) -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def make(export_interval_s: float | None = None) -> Any:
        if built == "reader":
            return InMemoryMetricReader()
        return SimpleSpanProcessor(InMemorySpanExporter()) if built == "processor" else None

    class Offers:
        @rlmetrics.hookimpl
        def register_exporters(self, register: Any) -> None:
            register("bare", make)

    register(Offers(), "offers-bare")
    with pytest.raises(TypeError, match=said):
        rlmetrics.start(exporters=["bare"])
    assert rlmetrics.current() is None


def test_an_exporter_factory_without_export_interval_s_is_refused_naming_the_exporter() -> None:
    """``start()`` raised Python's own "make() got an unexpected keyword argument
    'export_interval_s'", naming neither the exporter nor what a factory takes."""

    def make(path: str | None = None) -> Exporter:
        raise AssertionError("not called")

    class Offers:
        @rlmetrics.hookimpl
        def register_exporters(self, register: Any) -> None:
            register("acme_lines", make)

    register(Offers(), "offers-no-interval")
    with pytest.raises(TypeError, match=r"exporter 'acme_lines': its factory .*make takes no "):
        rlmetrics.start(exporters=["acme_lines"])
    assert rlmetrics.current() is None  # nothing left started


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are Python 3.11's")
def test_an_exporter_factory_that_raises_is_named_on_its_exception() -> None:
    """``start()`` raised the factory's bare ``RuntimeError('collector config broken')``: the
    exception now carries a note naming the exporter whose factory raised it."""

    def make(export_interval_s: float | None = None) -> Exporter:
        raise RuntimeError("collector config broken")

    class Offers:
        @rlmetrics.hookimpl
        def register_exporters(self, register: Any) -> None:
            register("acme_lines", make)

    register(Offers(), "offers-raising")
    with pytest.raises(RuntimeError, match="collector config broken") as raised:
        rlmetrics.start(exporters=["acme_lines"])
    assert getattr(raised.value, "__notes__", []) == [
        "rlmetrics: raised by the factory of exporter 'acme_lines'"
    ]
    assert rlmetrics.current() is None


def test_hook_register_phases() -> None:
    """A phase a plugin offers is accounted as it says: per step, or added up over the run."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Offers:
        @rlmetrics.hookimpl
        def register_phases(self, register: Any) -> None:
            register("acme/queue_wait", rlmetrics.PhaseKind(bucket="idle"))
            register("acme/warmup", rlmetrics.PhaseKind(bucket=None, cumulative=True))

    seen = _seen()
    register(Offers(), "offers-phases")
    spans = InMemorySpanExporter()
    with rlmetrics.start(span_processors=[SimpleSpanProcessor(spans)]):
        for n in (1, 2):
            with rlmetrics.step(n):
                rlmetrics.account("acme/queue_wait", 1.5)
                rlmetrics.account("acme/warmup", 2.0)
                with rlmetrics.phase("acme/queue_wait"):
                    pass
    summary, step = seen.calls["on_efficiency_summary"]
    assert step == 2
    assert summary.seconds["acme/queue_wait"] == pytest.approx(1.5, abs=0.01)  # this step's
    assert summary.seconds["acme/warmup"] == 4.0  # the run's, so far
    [phase] = [s for s in spans.get_finished_spans() if s.name == "rl.acme.queue_wait"][-1:]
    assert phase.attributes["rl.bucket"] == "idle"


def test_hook_register_demo_parts(tmp_path: Path) -> None:
    from rlmetrics.demo.run import DemoOptions, run_demo

    steps = rlmetrics.MetricSpec("hooked.demo.steps", rlmetrics.Kind.GAUGE)
    rlmetrics.declare("hooked.demo", [steps])
    seen: list[Any] = []

    class Part:
        def __init__(self, settings: Any) -> None:
            seen.append(("built", settings.seed, settings.steps, rlmetrics.is_exporting()))

        def step(self, step: Any) -> dict[str, Any]:
            rlmetrics.record("hooked.demo", {"hooked.demo.steps": step.step})
            seen.append(("step", step.step, len(step.rewards) == len(step.response_tokens)))
            return {"hooked/step": step.step}

        def close(self) -> None:
            seen.append("closed")

    class Offers:
        @rlmetrics.hookimpl
        def register_demo_parts(self, register: Any) -> None:
            register("hooked", Part)

    register(Offers(), "offers-demo-part")
    options = DemoOptions(steps=2, seed=5, output=tmp_path, interval_s=0, prometheus_port=0)
    result = run_demo(options, say=io.StringIO(), progress=io.StringIO())
    # Built before telemetry started, stepped in order, closed once; its keys were logged.
    assert seen[0] == ("built", 5, 2, False)
    assert seen[1:] == [("step", 1, True), ("step", 2, True), "closed"]
    assert "hooked" in result.parts
    logged = [
        row["metrics"].get("hooked/step")
        for row in read_jsonl(result.jsonl)
        if row["prefix"] == "train"
    ]
    assert logged == [1, 2]


def test_hook_register_dashboard_rows() -> None:
    from rlmetrics.dashboard.grafana import build_dashboard, collect_rows, panel_queries
    from rlmetrics.dashboard.model import Panel, Query, Row

    rlmetrics.declare(
        "hooked.dash",
        [
            rlmetrics.MetricSpec(
                "hooked.dash.latency", rlmetrics.Kind.HISTOGRAM, unit="s", buckets=[1.0]
            )
        ],
    )

    class Offers:
        @rlmetrics.hookimpl
        def register_dashboard_rows(self, register: Any) -> None:
            register(
                lambda names: Row(
                    "Hooked",
                    [
                        Panel(
                            "Latency",
                            [Query(names.histogram("hooked.dash.latency"))],
                            reads=["hooked.dash.latency"],
                        )
                    ],
                    order=999,
                )
            )
            register(
                lambda names: Row(
                    "Broken", [Panel("x", [Query(names.gauge("nope"))], reads=["nope"])]
                )
            )

    register(Offers(), "offers-dashboard-row")
    rows, problems = collect_rows()
    assert rows[-1].title == "Hooked"
    assert [("nope" in p.reason) for p in problems] == [True]  # reported, the others built
    queries = panel_queries(build_dashboard(rows))
    assert ("Latency", "hooked_dash_latency_seconds_bucket") in queries


def test_a_row_builder_that_fails_is_named_with_its_plugin() -> None:
    """A builder that is no function (or raises) is reported naming the plugin that offered
    it, not ``?.<what it is>``."""
    from rlmetrics.dashboard.grafana import collect_rows

    class Junk:
        @rlmetrics.hookimpl
        def register_dashboard_rows(self, register: Any) -> None:
            register("not a builder")

    register(Junk(), "junk-rows")
    _rows, problems = collect_rows()
    [problem] = problems
    assert "plugin 'junk-rows'" in problem.builder and "?" not in problem.builder


def test_an_alert_rule_builder_that_fails_is_named_with_its_plugin() -> None:
    from rlmetrics.alerts.rules import collect_rules

    class Junk:
        @rlmetrics.hookimpl
        def register_alert_rules(self, register: Any) -> None:
            register(None)

    register(Junk(), "junk-rules")
    _rules, problems, _context = collect_rules()
    [problem] = problems
    assert "plugin 'junk-rules'" in problem.builder and "?" not in problem.builder


def test_hook_register_alert_rules() -> None:
    from rlmetrics.alerts.model import AlertExample, AlertRule
    from rlmetrics.alerts.rules import collect_rules, rules_yaml

    rlmetrics.declare(
        "hooked.alert",
        [rlmetrics.MetricSpec("hooked.alert.depth", rlmetrics.Kind.GAUGE, unit="{item}")],
    )

    class Offers:
        @rlmetrics.hookimpl
        def register_alert_rules(self, register: Any) -> None:
            def build(context: Any) -> list[AlertRule]:
                depth = context.names.gauge("hooked.alert.depth")
                limit = context.threshold("hooked.depth", 100, "queue depth that alerts")
                return [
                    AlertRule(
                        "HookedQueueDeep",
                        f"{depth} > {limit:g}",
                        summary="deep",
                        runbook="drain it",
                        for_s=context.for_(120),
                        reads=["hooked.alert.depth"],
                        examples=[
                            AlertExample("deep", [(depth, "500x9")], 480, [{}]),
                            AlertExample("shallow", [(depth, "5x9")], 480),
                        ],
                        group="hooked",
                    )
                ]

            register(build)
            register(lambda context: [context.names.gauge("hooked.nope")])

    register(Offers(), "offers-alert-rules")
    rules, problems, context = collect_rules()
    (rule,) = [r for r in rules if r.group == "hooked"]
    assert rule.expr == "hooked_alert_depth > 100"
    assert context.thresholds["hooked.depth"].default == 100
    assert [("hooked.nope" in p.reason) for p in problems] == [True]  # the others built
    assert '- alert: "HookedQueueDeep"' in rules_yaml(rules)


def test_hook_register_check_exemptions() -> None:
    from rlmetrics.check import Exemption, check_plugins
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    rlmetrics.declare(
        "hooked.check",
        [
            rlmetrics.MetricSpec(
                "hooked.check.wait_ms", rlmetrics.Kind.GAUGE, unit="ms", description="d"
            )
        ],
    )

    class Offers:
        @rlmetrics.hookimpl
        def register_check_exemptions(self, register: Any) -> None:
            register(Exemption("unit-in-name", {"hooked.check.wait_ms"}, "a spec fixes it"))

    def findings() -> list[str]:
        result = check_plugins(get_plugins(), default_registry().declared())
        return [f.rule for f in result.findings if f.metric == "hooked.check.wait_ms"]

    assert findings() == ["unit-in-name"]
    register(Offers(), "offers-exemption")
    assert findings() == []


def test_an_exemption_that_is_no_exemption_is_the_plugins_failure_alone(caplog: Any) -> None:
    """``register(("unit-in-name", [...], "why"))``, a tuple for an ``Exemption``, is reported
    naming the plugin; ``rlmetrics check`` still runs, with the other plugins' exemptions."""
    from rlmetrics.check import Exemption, check_plugins
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    spec = rlmetrics.MetricSpec(
        "hooked.junk.wait_ms", rlmetrics.Kind.GAUGE, unit="ms", description="d"
    )
    rlmetrics.declare("hooked.junk", [spec])

    class Junk:
        @rlmetrics.hookimpl
        def register_check_exemptions(self, register: Any) -> None:
            register(("unit-in-name", ["hooked.junk.wait_ms"], "a spec fixes it"))

    class Offers:
        @rlmetrics.hookimpl
        def register_check_exemptions(self, register: Any) -> None:
            register(Exemption("unit-in-name", {"hooked.junk.wait_ms"}, "a spec fixes it"))

    register(Junk(), "junk-exemption")
    register(Offers(), "offers-exemption")
    with caplog.at_level("WARNING", logger="rlmetrics"):
        result = check_plugins(get_plugins(), default_registry().declared())
    assert [f.rule for f in result.findings if f.metric == "hooked.junk.wait_ms"] == []
    assert "plugin 'junk-exemption' raised in hook 'register_check_exemptions'" in caplog.text
    assert "takes rlmetrics.check.Exemption objects, got tuple" in caplog.text


def test_a_registration_hook_that_raises_under_check_is_an_error_of_the_check() -> None:
    """``rlmetrics check`` ran the key maps, exemptions and phases a plugin registers; one
    whose hook raised was a warning on stderr, and the check passed without what it
    registers, unchecked."""
    from rlmetrics.check import ERROR, check_plugins
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    class Junk:
        @rlmetrics.hookimpl
        def register_key_maps(self, register: Any) -> None:
            register("not a key map")

    register(Junk(), "junk-maps")
    result = check_plugins(get_plugins(), default_registry().declared())
    [finding] = [f for f in result.findings if "junk-maps" in f.plugin]
    assert (finding.severity, finding.rule) == (ERROR, "load")
    assert finding.message.startswith(
        "hook 'register_key_maps' raised TypeError('register_key_maps takes a KeyMap, got str')"
    )


def test_hook_register_key_maps(tmp_path: Path) -> None:
    from rlmetrics.check import check_plugins
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    class Offers:
        @rlmetrics.hookimpl
        def register_key_maps(self, register: Any) -> None:
            register(
                rlmetrics.KeyMap("hooked", [rlmetrics.KeyRule("score", series="rl.grad_norm")])
            )
            register(rlmetrics.KeyMap("hooked-bad", [rlmetrics.KeyRule("x", series="no.such")]))

    register(Offers(), "offers-key-maps")
    path = tmp_path / "m.jsonl"
    with rlmetrics.start(readers=[reader := _reader()]):
        with rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="hooked") as logger:
            logger.log_metrics({"score": 2.5}, step=1, prefix="train")
        assert single(points(reader), "rl.grad_norm").value == 2.5
    assert [row["metrics"] for row in read_jsonl(path)] == [{"score": 2.5}]
    result = check_plugins(get_plugins(), default_registry().declared())
    assert {"hooked", "hooked-bad"} <= set(result.key_maps)
    assert [(f.rule, f.plugin, f.attribute) for f in result.findings if f.rule == "key-map"] == [
        ("key-map", "(in process):offers-key-maps", "x")
    ]


def _reader() -> Any:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    return InMemoryMetricReader()


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


def test_hook_register_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlmetrics.cli import main
    from rlmetrics.testing import captured_log
    from rlmetrics.variables import Variable

    class Reads:
        @rlmetrics.hookimpl
        def register_variables(self, register: Any) -> None:
            register(Variable("RLMETRICS_ACME_URL", lambda v: None if "://" in v else "no URL"))

    for name in [n for n in __import__("os").environ if n.startswith("RLMETRICS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RLMETRICS_ACME_URL", "acme.example")
    with captured_log() as log, rlmetrics.start(readers=[_reader()]):
        pass
    assert log.matching("RLMETRICS_ACME_URL is read by nothing")
    assert main(["config"]) == 2
    assert "RLMETRICS_ACME_URL is read by nothing" in capsys.readouterr().err
    register(Reads(), "reads-variables")
    assert main(["config"]) == 2
    assert "RLMETRICS_ACME_URL='acme.example': no URL" in capsys.readouterr().err
    monkeypatch.setenv("RLMETRICS_ACME_URL", "http://acme.example")
    assert main(["config"]) == 0
    with captured_log() as log, rlmetrics.start(readers=[_reader()]):
        pass
    assert not log.matching("RLMETRICS_ACME_URL")
    with pytest.raises(ValueError, match="RLMETRICS_<SOMETHING>"):
        Variable("ACME_URL")
