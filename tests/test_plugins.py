"""Plugin loading through real installed distributions, laid out by the tests in a temp dir:
discovery, allow/deny lists, name clashes, failures at import (after declaring, or by
``SystemExit``), guarded hooks and wrappers, and exporters offered by a plugin."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_test_dists import install

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.cli import main
from rlmetrics.plugins import DISABLED, FAILED, LOADED, Plugins, load_plugins
from rlmetrics.testing import in_memory_telemetry, points, single


class Site:
    """A site-packages folder on ``sys.path`` for the test's distributions."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def install(self, name: str, files: dict[str, str], entry_points: dict[str, str]) -> None:
        install(self.path, name, files, entry_points)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    for name in ("RLMETRICS_PLUGINS", "RLMETRICS_DISABLE_PLUGINS", "RLMETRICS_OVERRIDE_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    yield Site(path)
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(path)):
            del sys.modules[name]


TESTPLUGIN = {
    "rlmetrics_testplugin/__init__.py": """
        import rlmetrics

        calls = []

        @rlmetrics.hookimpl
        def log_metrics(metrics, prefix):
            calls.append(("good", prefix, dict(metrics)))

        class MemoryBackend:
            rows = []

            def __init__(self, tag="mem"):
                self.tag = tag

            def log_metrics(self, metrics, step, prefix):
                self.rows.append((self.tag, step, prefix, dict(metrics)))

            def finish(self):
                self.rows.append((self.tag, "finished"))

        @rlmetrics.hookimpl
        def register_backends(register):
            register("memory", MemoryBackend)
    """,
    "rlmetrics_testplugin/raising.py": """
        import rlmetrics
        from rlmetrics_testplugin import calls

        @rlmetrics.hookimpl
        def log_metrics(metrics, step, prefix):
            calls.append(("raising", prefix, dict(metrics)))
            raise RuntimeError("plugin bug")
    """,
    "rlmetrics_testplugin/broken.py": "import a_module_that_does_not_exist\n",
    "rlmetrics_testplugin/badhook.py": """
        import rlmetrics

        @rlmetrics.hookimpl
        def log_metrcs(metrics):  # typo: no such hook
            pass
    """,
}
# Loaded in name order within a distribution: "raising" registers after "good", so pluggy's
# LIFO order calls it first, and the good plugin must still run.
TESTPLUGIN_ENTRY_POINTS = {
    "good": "rlmetrics_testplugin",
    "broken": "rlmetrics_testplugin.broken",
    "badhook": "rlmetrics_testplugin.badhook",
    "raising": "rlmetrics_testplugin.raising",
}


@pytest.fixture
def testplugin(site: Site) -> Any:
    site.install("rlmetrics-testplugin", TESTPLUGIN, TESTPLUGIN_ENTRY_POINTS)
    return __import__("rlmetrics_testplugin")


def _info(plugins: Plugins, name: str) -> Any:
    info = plugins.info(name)
    assert info is not None, f"no row for {name}"
    return info


# -- discovery ---------------------------------------------------------------------------------


def test_installed_distribution_is_discovered(testplugin: Any) -> None:
    plugins = load_plugins()
    good = _info(plugins, "good")
    assert (good.status, good.distribution, good.version, good.builtin) == (
        LOADED,
        "rlmetrics-testplugin",
        "0.1",
        False,
    )
    assert good.hooks == ("log_metrics", "register_backends")
    # The built-ins load through the same entry point group.
    jsonl = _info(plugins, "jsonl")
    assert (jsonl.status, jsonl.distribution, jsonl.builtin) == (LOADED, "rlmetrics", True)


def test_broken_import_is_skipped_and_named(testplugin: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    broken = _info(plugins, "broken")
    assert broken.status == FAILED
    assert "a_module_that_does_not_exist" in (broken.reason or "")
    assert "'broken'" in caplog.text and "failed to import" in caplog.text
    assert _info(plugins, "good").status == LOADED


def test_plugin_with_unknown_hook_is_skipped_and_named(testplugin: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    assert _info(plugins, "badhook").status == FAILED
    assert "'badhook' skipped" in caplog.text and "log_metrcs" in caplog.text
    assert "badhook" not in plugins.names()


def test_raising_hook_does_not_stop_the_other_plugin(testplugin: Any, caplog: Any) -> None:
    load_plugins()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rlmetrics.Logger(backends={}).log_metrics({"loss": 1.0}, step=1, prefix="train")
    assert [c[0] for c in testplugin.calls] == ["raising", "good"]
    assert testplugin.calls[1] == ("good", "train", {"loss": 1.0})
    assert "plugin 'raising' raised in hook 'log_metrics'" in caplog.text


def test_backend_from_a_third_party_plugin(testplugin: Any) -> None:
    load_plugins(allow=["good"])
    with rlmetrics.Logger(backends={"memory": {"tag": "m1"}}) as logger:
        logger.log_metrics({"a": {"b": 2}}, step=3, prefix="train")
    assert testplugin.MemoryBackend.rows == [
        ("m1", 3, "train", {"a/b": 2}),
        ("m1", "finished"),
    ]


# -- allow and deny lists ------------------------------------------------------------------


THIRD_PARTY = {"good", "raising", "broken", "badhook"}
BUILTINS = {"jsonl", "console", "training", "setup", "efficiency", "rollout_checkpoint", "otlp"}


@pytest.mark.parametrize(
    ("allow", "deny", "loaded"),
    [
        (["good"], None, {"good", *BUILTINS}),
        (["rlmetrics-testplugin"], ["broken", "badhook"], {"good", "raising", *BUILTINS}),
        # PEP 503: the distribution's name in any spelling.
        (["RLMetrics_TestPlugin"], ["broken", "badhook"], {"good", "raising", *BUILTINS}),
        (None, ["rlmetrics-testplugin"], BUILTINS),
        # An empty allow-list loads no third-party plugin; the built-ins still load.
        ([], None, BUILTINS),
        # A built-in is not loaded only when denied by name.
        ([], ["jsonl", "otlp"], BUILTINS - {"jsonl", "otlp"}),
    ],
)
def test_allow_and_deny_lists(
    testplugin: Any, allow: list[str] | None, deny: list[str] | None, loaded: set[str]
) -> None:
    plugins = load_plugins(allow=allow, deny=deny)
    watched = THIRD_PARTY | BUILTINS
    assert set(plugins.names()) & watched == loaded
    for name in watched - loaded - {"broken", "badhook"}:
        info = _info(plugins, name)
        assert info.status == DISABLED
        assert info.reason in ("not in the allow-list allow=", "denied by deny=")


def test_an_allow_list_naming_only_a_third_party_keeps_the_core_working(
    testplugin: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMETRICS_PLUGINS", "rlmetrics_testplugin")
    plugins = load_plugins()
    assert _info(plugins, "good").status == LOADED
    assert _info(plugins, "jsonl").status == LOADED
    # The default backend is the core's jsonl: an allow-list for a third party cannot lose it.
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    assert (tmp_path / "m.jsonl").read_text().count('"metrics"') == 1


def test_lists_from_the_environment(testplugin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMETRICS_PLUGINS", "good, jsonl")
    plugins = load_plugins()
    assert set(plugins.names()) & THIRD_PARTY == {"good"}
    assert _info(plugins, "raising").reason == "not in the allow-list RLMETRICS_PLUGINS"
    monkeypatch.delenv("RLMETRICS_PLUGINS")
    monkeypatch.setenv("RLMETRICS_DISABLE_PLUGINS", "raising,broken,badhook,console")
    plugins = load_plugins()
    names = set(plugins.names())
    assert "good" in names and "jsonl" in names
    assert not names & {"raising", "broken", "badhook", "console"}
    assert _info(plugins, "console").reason == "denied by RLMETRICS_DISABLE_PLUGINS"


def test_start_arguments_override_the_environment(
    testplugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_PLUGINS", "raising")
    with rlmetrics.start(service_name="t", plugins=["good"], disable_plugins=[]):
        from rlmetrics.plugins import get_plugins

        assert set(get_plugins().names()) & THIRD_PARTY == {"good"}


# -- name clashes ------------------------------------------------------------------------------

# A third party that ships an entry point named like the core's training family.
ACME_DUP = {
    "acme_dup/__init__.py": "",
    "acme_dup/mod.py": """
        import rlmetrics

        @rlmetrics.hookimpl
        def log_metrics(metrics):
            pass
    """,
}


def test_a_third_party_entry_point_never_silently_replaces_a_builtin(
    site: Site, caplog: Any
) -> None:
    site.install("acme-dup", ACME_DUP, {"training": "acme_dup.mod"})
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    rows = {(i.name, i.distribution): i for i in plugins.infos if i.name == "training"}
    assert rows[("training", "rlmetrics")].status == LOADED
    assert rows[("training", "acme-dup")].status == DISABLED
    assert "name clash" in (rows[("training", "acme-dup")].reason or "")
    # The clash is warned naming both distributions.
    assert "'rlmetrics', 'acme-dup'" in caplog.text
    # And the core's family still tees.
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_metrics({"reward": 0.5}, step=1, prefix="train")
        assert single(points(reader), "rl.reward.mean").value == 0.5


def test_a_deliberate_override_replaces_a_builtin(
    site: Site, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    site.install("acme-dup", ACME_DUP, {"training": "acme_dup.mod"})
    monkeypatch.setenv("RLMETRICS_OVERRIDE_PLUGINS", "training=acme_dup")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    rows = {i.distribution: i.status for i in plugins.infos if i.name == "training"}
    assert rows == {"acme-dup": LOADED, "rlmetrics": DISABLED}
    # Chosen as the docs say to choose it: no warning that reads as if the choice failed
    # (`rlmetrics plugins` still lists the one left out, with why).
    assert "is offered by" not in caplog.text


def test_a_clash_between_third_parties_is_deterministic(site: Site) -> None:
    site.install("zeta-queue", {"zeta_queue.py": ""}, {"queue": "zeta_queue"})
    site.install("alpha-queue", {"alpha_queue.py": ""}, {"queue": "alpha_queue"})
    rows = {i.distribution: i.status for i in load_plugins().infos if i.name == "queue"}
    assert rows == {"alpha-queue": LOADED, "zeta-queue": DISABLED}


# A third party whose backend is registered under the core's own backend name.
FAST_JSONL = {
    "fast_jsonl.py": """
        import rlmetrics

        rows = []

        class FastJsonl:
            def __init__(self, path=None):
                self.path = path

            def log_metrics(self, metrics, step, prefix):
                rows.append((step, dict(metrics)))

            def finish(self):
                pass

        @rlmetrics.hookimpl
        def register_backends(register):
            register("jsonl", FastJsonl)
    """,
}


def test_a_registered_name_never_silently_replaces_a_builtin(
    site: Site, tmp_path: Path, caplog: Any, capsys: Any
) -> None:
    """A plugin's ``register_backends("jsonl", ...)`` (under an entry point of its own) loses
    to the core's JSONL backend, as an entry-point clash does; the warning names both, and
    ``rlmetrics plugins`` lists the loser with how to choose it."""
    site.install("fast-jsonl", FAST_JSONL, {"fast": "fast_jsonl"})
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        load_plugins()
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"loss": 1.0}, step=1)
        logger.finish()
    assert [row["metrics"] for row in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 1.0}]
    assert sys.modules["fast_jsonl"].rows == []
    assert "backend 'jsonl' is offered by 'jsonl' (rlmetrics) and 'fast' (fast-jsonl)" in (
        caplog.text
    )
    assert main(["plugins"]) == 0
    listed = capsys.readouterr().out.splitlines()
    [row] = [line for line in listed if "fast-jsonl" in line and "shadowed" in line]
    assert row.split()[:3] == ["jsonl", "shadowed", "fast-jsonl"]
    assert "backend 'jsonl' of 'fast'" in row
    assert "RLMETRICS_OVERRIDE_PLUGINS=jsonl=fast-jsonl" in row


def test_a_deliberate_override_replaces_a_builtin_registered_name(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    site.install("fast-jsonl", FAST_JSONL, {"fast": "fast_jsonl"})
    monkeypatch.setenv("RLMETRICS_OVERRIDE_PLUGINS", "jsonl=fast_jsonl")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        load_plugins()
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"loss": 1.0}, step=1)
        logger.finish(timeout_s=30)
    assert sys.modules["fast_jsonl"].rows == [(1, {"loss": 1.0})]
    assert not (tmp_path / "m.jsonl").exists()
    # Chosen deliberately: not warned every run as a clash the core's built-in wins.
    assert "is offered by" not in caplog.text


# -- failures at import ------------------------------------------------------------------------


def test_a_plugin_that_fails_after_declaring_leaves_nothing_declared(site: Site) -> None:
    site.install(
        "half-done",
        {
            "half_done.py": """
                import rlmetrics

                observed = []

                def callback():
                    observed.append("called")
                    return [(1.0, {})]

                rlmetrics.declare("half", [
                    rlmetrics.MetricSpec("half.gauge", rlmetrics.Kind.GAUGE),
                    rlmetrics.MetricSpec("half.observed", rlmetrics.Kind.OBSERVABLE_GAUGE,
                                         callback=callback),
                ])
                raise RuntimeError("configuration missing")
            """
        },
        {"half": "half_done"},
    )
    plugins = load_plugins()
    assert _info(plugins, "half").status == FAILED
    declared = {d.spec.name for d in rlmetrics.default_registry().declared()}
    assert not declared & {"half.gauge", "half.observed"}
    with in_memory_telemetry() as (_handle, reader):
        exported = {p.name for p in points(reader)}
    assert not exported & {"half.gauge", "half.observed"}
    assert "half_done" not in sys.modules  # its callback cannot have been kept anywhere


def test_a_failed_plugin_leaves_what_a_module_it_imported_declared(site: Site) -> None:
    """Two entry points of one distribution share a module of specs. The first to load fails
    (a misspelt hook) after importing it; the module stays imported and never declares
    again, so rolling its series back would leave the second plugin, which loads fine,
    recording into series that no longer exist."""
    site.install(
        "acme-shared",
        {
            "acme_shared/__init__.py": "",
            "acme_shared/specs.py": """
                import rlmetrics

                GROUP = "acme.shared"
                rlmetrics.declare(GROUP, [rlmetrics.MetricSpec("acme.shared.depth",
                                                               rlmetrics.Kind.GAUGE)])
            """,
            "acme_shared/dash.py": """
                import rlmetrics
                from acme_shared.specs import GROUP

                @rlmetrics.hookimpl
                def register_dashboard_row(register):
                    pass
            """,
            "acme_shared/family.py": """
                import rlmetrics
                from acme_shared.specs import GROUP

                @rlmetrics.hookimpl
                def log_metrics(metrics, prefix):
                    if prefix == "train":
                        rlmetrics.record_declared(GROUP, metrics)
            """,
        },
        {"acme_a_dash": "acme_shared.dash", "acme_b_family": "acme_shared.family"},
    )
    plugins = load_plugins()
    assert _info(plugins, "acme_a_dash").status == FAILED
    assert _info(plugins, "acme_b_family").status == LOADED
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_metrics({"acme.shared.depth": 4}, step=1, prefix="train")
        assert single(points(reader), "acme.shared.depth").value == 4


def test_system_exit_at_a_plugins_import_does_not_end_the_process(site: Site, caplog: Any) -> None:
    site.install("quitter", {"quitter.py": "import sys\nsys.exit(3)\n"}, {"quitter": "quitter"})
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
        rlmetrics.Logger(backends={})
    info = _info(plugins, "quitter")
    assert info.status == FAILED and "SystemExit(3)" in (info.reason or "")
    assert _info(plugins, "training").status == LOADED


def test_system_exit_in_a_hook_is_reported_and_the_others_run(caplog: Any) -> None:
    seen: list[str] = []

    class Quits:
        @rlmetrics.hookimpl(tryfirst=True)
        def log_metrics(self) -> None:
            raise SystemExit(1)

    class Records:
        @rlmetrics.hookimpl
        def log_metrics(self, metrics: Any) -> None:
            seen.append("ran")

    rlmetrics.plugins.register(Quits(), "quits")
    rlmetrics.plugins.register(Records(), "records")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert seen == ["ran"]
    assert "plugin 'quits' raised in hook 'log_metrics'" in caplog.text


def test_keyboard_interrupt_in_a_hook_still_reaches_the_caller() -> None:
    class Interrupted:
        @rlmetrics.hookimpl
        def log_metrics(self) -> None:
            raise KeyboardInterrupt

    rlmetrics.plugins.register(Interrupted(), "interrupted")
    with pytest.raises(KeyboardInterrupt):
        rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)


def test_in_process_registration_validates(caplog: Any) -> None:
    class Typo:
        @rlmetrics.hookimpl
        def on_setup_timings(self, timings: Any) -> None: ...

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert not rlmetrics.plugins.register(Typo(), "typo")
    assert "'typo' skipped" in caplog.text and "on_setup_timings" in caplog.text
    assert "typo" not in rlmetrics.plugins.get_plugins().names()


# -- wrappers ----------------------------------------------------------------------------------


class _Plain:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    @rlmetrics.hookimpl
    def log_metrics(self) -> None:
        self.order.append("plain")


def test_a_wrapper_runs_around_the_other_implementations() -> None:
    order: list[str] = []

    class NewStyle:
        @rlmetrics.hookimpl(wrapper=True)
        def log_metrics(self, prefix: str) -> Iterator[None]:
            order.append(f"new:before:{prefix}")
            result = yield
            order.append("new:after")
            return result

    class OldStyle:
        @rlmetrics.hookimpl(hookwrapper=True)
        def log_metrics(self) -> Iterator[None]:
            order.append("old:before")
            outcome = yield
            order.append(f"old:after:{outcome.exception is None}")

    rlmetrics.plugins.register(_Plain(order), "plain")
    rlmetrics.plugins.register(NewStyle(), "new")
    rlmetrics.plugins.register(OldStyle(), "old")
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1, prefix="train")
    assert order == ["old:before", "new:before:train", "plain", "new:after", "old:after:True"]


@pytest.mark.parametrize("fails", ["before", "after", "no-yield"])
def test_a_failing_wrapper_is_reported_and_steps_aside(fails: str, caplog: Any) -> None:
    order: list[str] = []

    class Failing:
        @rlmetrics.hookimpl(wrapper=True)
        def log_metrics(self) -> Iterator[None]:
            if fails == "before":
                raise RuntimeError("before")
            if fails == "no-yield":
                return None  # type: ignore[return-value]
            yield
            raise RuntimeError("after")

    rlmetrics.plugins.register(_Plain(order), "plain")
    rlmetrics.plugins.register(Failing(), "failing")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert order == ["plain"]
    expected = "failed after its yield" if fails == "after" else "failed before its yield"
    assert f"plugin 'failing' {expected} in hook 'log_metrics'" in caplog.text


# -- exporters from a plugin -------------------------------------------------------------------


def test_a_third_party_exporter_is_a_plugin(site: Site) -> None:
    site.install(
        "rlmetrics-memory-exporter",
        {
            "memory_exporter.py": """
                import rlmetrics
                from rlmetrics.exporters import Exporter

                readers = []

                def make(export_interval_s=None, tag="m"):
                    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

                    reader = InMemoryMetricReader()
                    readers.append((tag, reader))
                    return Exporter(reader)

                @rlmetrics.hookimpl
                def register_exporters(register):
                    register("memory", make)
            """
        },
        {"memory_exporter": "memory_exporter"},
    )
    rlmetrics.declare("exp", [rlmetrics.MetricSpec("exp.gauge", rlmetrics.Kind.GAUGE, key="g")])
    with rlmetrics.start(exporters={"memory": {"tag": "t1"}}) as handle:
        rlmetrics.record("exp", {"g": 2.0})
        import memory_exporter

        [(tag, reader)] = memory_exporter.readers
        assert tag == "t1"
        assert single(points(reader), "exp.gauge").value == 2.0
        assert handle.exporter_addresses == {}
    info = rlmetrics.plugins.get_plugins().info("memory_exporter")
    assert info is not None and info.hooks == ("register_exporters",)


# -- what a registration hook offers -----------------------------------------------------------


def test_an_offer_under_a_name_that_is_no_string_is_the_plugins_failure_alone(
    tmp_path: Path, caplog: Any
) -> None:
    """``register(42, factory)`` in a plugin's ``register_backends`` is reported naming the
    plugin; the Logger still starts, with the core's backends."""

    class Junk:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register(42, dict)

    rlmetrics.plugins.register(Junk(), "junk")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"loss": 1.0}, step=1)
        logger.finish(timeout_s=30)
    assert [row["metrics"] for row in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 1.0}]
    assert "plugin 'junk' raised in hook 'register_backends'" in caplog.text
    assert "backend names are non-empty strings, got 42" in caplog.text


def test_a_phase_offered_without_a_name_leaves_the_other_phases_accounted(caplog: Any) -> None:
    class Junk:
        @rlmetrics.hookimpl
        def register_phases(self, register: Any) -> None:
            register(None, None)

    rlmetrics.plugins.register(Junk(), "junk")
    summaries: list[Any] = []

    class Listens:
        @rlmetrics.hookimpl
        def on_efficiency_summary(self, summary: Any) -> None:
            summaries.append(summary)

    rlmetrics.plugins.register(Listens(), "listens")
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        in_memory_telemetry(),
        rlmetrics.step(1),
        rlmetrics.phase("idle/buffer_starvation"),
    ):
        pass
    assert "plugin 'junk' raised in hook 'register_phases'" in caplog.text
    assert "accounting a phase failed" not in caplog.text
    [summary] = summaries
    assert "idle/buffer_starvation" in summary.seconds


# -- an invalid hook implementation says what to change ----------------------------------------


def test_a_misspelt_hook_is_named_with_the_hook_meant(caplog: Any) -> None:
    class Typo:
        @rlmetrics.hookimpl
        def log_metric(self, metrics: Any) -> None: ...

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert not rlmetrics.plugins.register(Typo(), "typo")
    info = rlmetrics.plugins.get_plugins().info("typo")
    assert info is not None and info.summary is not None
    assert "'log_metric' is not an rlmetrics hook: did you mean 'log_metrics'?" in info.summary
    assert "did you mean 'log_metrics'?" in caplog.text


def test_a_wrong_argument_name_is_named_with_the_arguments_the_hook_has(site: Site) -> None:
    site.install(
        "wrong-args",
        {
            "wrong_args.py": """
                import rlmetrics

                @rlmetrics.hookimpl
                def log_metrics(metric, step):
                    pass
            """
        },
        {"wrong_args": "wrong_args"},
    )
    info = _info(load_plugins(), "wrong_args")
    assert info.status == FAILED and info.summary is not None
    assert (
        "hook 'log_metrics' has no argument 'metric': it takes any of metrics, step, prefix"
        in info.summary
    )


# -- an entry point naming the wrong object ----------------------------------------------------

_MISPOINTED = {
    "acme_points.py": """
        import rlmetrics

        GROUP = "acme.points"

        def helper(metrics):
            return metrics

        class Family:
            @rlmetrics.hookimpl
            def log_metrics(self, metrics):
                pass

        @rlmetrics.hookimpl
        def log_metrics(metrics):
            pass
    """
}


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("acme_points:Family", "names the class Family: hooks are called on a module or an "),
        ("acme_points:helper", "names a function that implements no rlmetrics hook; "),
        ("acme_points:GROUP", "names a str that implements no rlmetrics hook; "),
    ],
)
def test_an_entry_point_naming_an_object_without_hooks_fails_saying_what_to_name(
    site: Site, target: str, says: str
) -> None:
    """A class (its hooks would each fail on every call for want of ``self``), a function or
    a constant loaded as "no hooks" and did nothing; the module beside it had the hooks."""
    site.install("acme-points", _MISPOINTED, {"acme_points": target})
    info = _info(load_plugins(), "acme_points")
    assert info.status == FAILED
    assert says in (info.summary or "")
    if not target.endswith(":Family"):
        assert "acme_points implements log_metrics: name the module" in (info.summary or "")


# -- one object, one plugin --------------------------------------------------------------------


def test_two_entry_points_naming_one_module_leave_the_first_working(site: Site) -> None:
    """The second registration of an object pluggy already holds failed, and the rollback
    unregistered the object itself: the first entry point's row said loaded while its hooks
    were gone."""
    site.install(
        "twice",
        {
            "twice.py": """
                import rlmetrics

                calls = []

                @rlmetrics.hookimpl
                def log_metrics(metrics):
                    calls.append(dict(metrics))
            """
        },
        {"acme_one": "twice", "acme_two": "twice"},
    )
    plugins = load_plugins()
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert sys.modules["twice"].calls == [{"x": 1}]
    assert _info(plugins, "acme_one").status == LOADED
    second = _info(plugins, "acme_two")
    assert second.status == FAILED
    assert second.summary == (
        "invalid hooks: it is the object plugin 'acme_one' is already; one object is one "
        "plugin: keep one of the two (entry points, or registrations)"
    )


def test_registering_one_object_again_is_a_no_op(caplog: Any) -> None:
    calls: list[Any] = []

    class Counts:
        @rlmetrics.hookimpl
        def log_metrics(self, metrics: Any) -> None:
            calls.append(dict(metrics))

    plugin = Counts()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert rlmetrics.plugins.register(plugin, "counts")
        assert rlmetrics.plugins.register(plugin, "counts")
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert calls == [{"x": 1}]
    rows = [i for i in rlmetrics.plugins.get_plugins().infos if i.name == "counts"]
    assert [row.status for row in rows] == [LOADED]
    assert caplog.records == []


def test_a_name_another_plugin_holds_is_refused_in_one_line(caplog: Any) -> None:
    class Other:
        @rlmetrics.hookimpl
        def log_metrics(self) -> None: ...

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert not rlmetrics.plugins.register(Other(), "training")
    assert caplog.messages == [
        "rlmetrics: plugin 'training' skipped: the name 'training' is another plugin's "
        "(rlmetrics); register this one under a name of its own"
    ]


# -- an entry point in a group rlmetrics never reads -------------------------------------------


@pytest.mark.parametrize("group", ["rlmetrics.plugins", "rlmetrics_plugins", "rl_metrics"])
def test_an_entry_point_in_a_misspelt_group_is_listed_as_failed_naming_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    """``[project.entry-points."rlmetrics.plugins"]`` loaded nothing and said nothing: the
    plugin was simply absent from ``rlmetrics plugins``."""
    install(
        tmp_path,
        "acme-misplaced",
        {"acme_misplaced.py": ""},
        {"acme": "acme_misplaced"},
        group=group,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    info = _info(load_plugins(quiet=True), "acme")
    assert (info.status, info.distribution) == (FAILED, "acme-misplaced")
    assert info.summary == (
        f"entry point in group {group!r}, which rlmetrics never reads: declare it under "
        "[project.entry-points.rlmetrics]"
    )
    assert "acme_misplaced" not in sys.modules


def test_groups_of_rlmetrics_own_are_not_misspellings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for group in ("rlmetrics.ranks", "rlmetrics_gym", "pytest11"):
        install(tmp_path, f"acme-{group}", {}, {"acme_x": "acme_x"}, group=group)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _info(load_plugins(quiet=True), "training").status == LOADED
    assert load_plugins(quiet=True).info("acme_x") is None


def test_an_async_hook_is_refused_at_registration(caplog: Any) -> None:
    """An ``async def`` implementation loaded, and each call made a coroutine nobody awaited:
    the hook never ran, with a RuntimeWarning pointing into rlmetrics."""

    class Async:
        @rlmetrics.hookimpl
        async def log_metrics(self, metrics: Any) -> None: ...

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert not rlmetrics.plugins.register(Async(), "async")
    info = rlmetrics.plugins.get_plugins().info("async")
    assert info is not None and info.status == FAILED
    assert info.reason == (
        "hook 'log_metrics' is an async def: rlmetrics calls hooks and never awaits them; make "
        "it a plain def (hand the work to your own event loop from there)"
    )


def test_a_generator_hook_that_is_no_wrapper_is_refused_at_registration() -> None:
    """``yield`` in a plain implementation made each call a generator nobody ran."""

    class Yields:
        @rlmetrics.hookimpl
        def log_metrics(self, metrics: Any) -> Iterator[None]:
            yield

    assert not rlmetrics.plugins.register(Yields(), "yields")
    info = rlmetrics.plugins.get_plugins().info("yields")
    assert info is not None and info.reason == (
        "hook 'log_metrics' is a generator function without wrapper=True: its body would "
        "never run; drop the yield, or mark it @rlmetrics.hookimpl(wrapper=True)"
    )


# -- RLMETRICS_OVERRIDE_PLUGINS ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("training=acme-trainng", "'acme-trainng' (did you mean 'acme-training'?)"),
        ("training", "'training' is not name=distribution"),
    ],
)
def test_an_override_naming_no_installed_distribution_is_refused_at_start(
    site: Site, monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    """A misspelt override chose nothing, silently: the built-in kept winning."""
    from rlmetrics.configuration import ConfigurationError

    site.install("acme-training", {"acme_training.py": ""}, {"training": "acme_training"})
    monkeypatch.setenv("RLMETRICS_OVERRIDE_PLUGINS", value)
    with pytest.raises(ConfigurationError, match="RLMETRICS_OVERRIDE_PLUGINS") as raised:
        rlmetrics.Logger(backends={})
    assert said in str(raised.value)
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        rlmetrics.start(exporters=[])
    assert main(["config"]) == 2


def test_a_hook_without_its_decorator_is_refused_naming_it(site: Site) -> None:
    """``def log_metrics(...)`` with the ``@rlmetrics.hookimpl`` left off loaded as "no hooks"
    and was never called."""
    site.install(
        "acme-bare",
        {
            "acme_bare.py": """
                import rlmetrics

                def log_metrics(metrics, prefix):
                    pass
            """
        },
        {"acme_bare": "acme_bare"},
    )
    info = _info(load_plugins(quiet=True), "acme_bare")
    assert info.status == FAILED
    assert info.summary == (
        "invalid hooks: 'log_metrics' is named like a hook but not marked @rlmetrics.hookimpl, "
        "so it is never called: mark it (or rename it)"
    )


def test_an_object_that_is_a_backend_and_a_plugin_registers(tmp_path: Path) -> None:
    """Its backend method ``log_metrics`` is named like the hook and is no hook: only a
    module's unmarked function is taken for a forgotten decorator."""

    class Both:
        def __init__(self) -> None:
            self.rows: list[Any] = []

        def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
            self.rows.append(dict(metrics))

        def finish(self) -> None:
            pass

        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("both", lambda: self)

    both = Both()
    assert rlmetrics.plugins.register(both, "both")
    with rlmetrics.Logger(backends={"both": {}}) as logger:
        logger.log_metrics({"x": 1}, step=1)
    assert both.rows == [{"x": 1}]
