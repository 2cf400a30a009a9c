"""Plugin discovery through a real installed distribution, built by the test in a temp dir."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.plugins import Plugins, load_plugins

PACKAGE = "rlmetrics_testplugin"


def _install_test_distribution(site: Path) -> None:
    """Lay out what an installer leaves in site-packages: the package and its dist-info."""
    package = site / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent("""
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
    """)
    )
    (package / "raising.py").write_text(
        textwrap.dedent("""
        import rlmetrics
        from rlmetrics_testplugin import calls

        @rlmetrics.hookimpl
        def log_metrics(metrics, step, prefix):
            calls.append(("raising", prefix, dict(metrics)))
            raise RuntimeError("plugin bug")
    """)
    )
    (package / "broken.py").write_text("import a_module_that_does_not_exist\n")
    (package / "badhook.py").write_text(
        textwrap.dedent("""
        import rlmetrics

        @rlmetrics.hookimpl
        def log_metrcs(metrics):  # typo: no such hook
            pass
    """)
    )
    dist_info = site / "rlmetrics_testplugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rlmetrics-testplugin\nVersion: 0.1\n"
    )
    # Order matters: "raising" is registered after "good", so pluggy's LIFO order calls it
    # first; the good plugin must still run.
    (dist_info / "entry_points.txt").write_text(
        textwrap.dedent("""
        [rlmetrics]
        good = rlmetrics_testplugin
        broken = rlmetrics_testplugin.broken
        badhook = rlmetrics_testplugin.badhook
        raising = rlmetrics_testplugin.raising
    """)
    )


@pytest.fixture
def test_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    _install_test_distribution(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv("RLMETRICS_PLUGINS", raising=False)
    monkeypatch.delenv("RLMETRICS_DISABLE_PLUGINS", raising=False)
    yield __import__(PACKAGE)
    for name in [m for m in sys.modules if m.startswith(PACKAGE)]:
        del sys.modules[name]


def test_installed_distribution_is_discovered(test_distribution: Any) -> None:
    plugins = load_plugins()
    good = plugins.infos["good"]
    assert (good.status, good.distribution, good.version) == (
        "loaded",
        "rlmetrics-testplugin",
        "0.1",
    )
    assert good.hooks == ("log_metrics", "register_backends")
    # The built-ins load through the same entry point group.
    assert plugins.infos["jsonl"].status == "loaded"
    assert plugins.infos["jsonl"].distribution == "rlmetrics"


def test_broken_import_is_skipped_and_named(test_distribution: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    assert plugins.infos["broken"].status == "failed"
    assert "a_module_that_does_not_exist" in (plugins.infos["broken"].error or "")
    assert "'broken'" in caplog.text and "failed to import" in caplog.text
    assert plugins.infos["good"].status == "loaded"


def test_plugin_with_unknown_hook_is_skipped_and_named(test_distribution: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        plugins = load_plugins()
    assert plugins.infos["badhook"].status == "failed"
    assert "'badhook' skipped" in caplog.text and "log_metrcs" in caplog.text
    assert "badhook" not in plugins.names()


def test_raising_hook_does_not_stop_the_other_plugin(test_distribution: Any, caplog: Any) -> None:
    load_plugins()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rlmetrics.Logger(backends={}).log_metrics({"loss": 1.0}, step=1, prefix="train")
    assert [c[0] for c in test_distribution.calls] == ["raising", "good"]
    assert test_distribution.calls[1] == ("good", "train", {"loss": 1.0})
    assert "plugin 'raising' raised in hook 'log_metrics'" in caplog.text


def test_backend_from_a_third_party_plugin(test_distribution: Any) -> None:
    load_plugins(allow=["good"])
    with rlmetrics.Logger(backends={"memory": {"tag": "m1"}}) as logger:
        logger.log_metrics({"a": {"b": 2}}, step=3, prefix="train")
    assert test_distribution.MemoryBackend.rows == [
        ("m1", 3, "train", {"a/b": 2}),
        ("m1", "finished"),
    ]


@pytest.mark.parametrize(
    ("allow", "deny", "loaded"),
    [
        (["good"], None, {"good"}),
        (["rlmetrics-testplugin"], ["broken", "badhook"], {"good", "raising"}),
        (None, ["rlmetrics-testplugin"], {"jsonl", "console"}),
        ([], None, set()),
    ],
)
def test_allow_and_deny_lists(
    test_distribution: Any, allow: list[str] | None, deny: list[str] | None, loaded: set[str]
) -> None:
    plugins = load_plugins(allow=allow, deny=deny)
    watched = {"good", "raising", "broken", "badhook", "jsonl", "console"}
    assert set(plugins.names()) & watched == loaded
    for name in watched - loaded - {"broken", "badhook"}:
        assert plugins.infos[name].status == "disabled"


def test_lists_from_the_environment(
    test_distribution: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_PLUGINS", "good, jsonl")
    assert set(load_plugins().names()) == {"good", "jsonl"}
    monkeypatch.delenv("RLMETRICS_PLUGINS")
    monkeypatch.setenv("RLMETRICS_DISABLE_PLUGINS", "raising,broken,badhook,console")
    names = set(load_plugins().names())
    assert "good" in names and "jsonl" in names
    assert not names & {"raising", "broken", "badhook", "console"}


def test_start_arguments_override_the_environment(
    test_distribution: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_PLUGINS", "jsonl")
    with rlmetrics.start(service_name="t", plugins=["good"], disable_plugins=[]):
        from rlmetrics.plugins import get_plugins

        assert get_plugins().names() == ["good"]


def test_in_process_registration_validates() -> None:
    plugins = Plugins()

    class Typo:
        @rlmetrics.hookimpl
        def on_setup_timings(self, timings: Any) -> None: ...

    assert not plugins.register(Typo(), "typo")
    assert "typo" not in plugins.names()
