"""``RLMETRICS_*`` variables that nothing reads: a misspelt name (``RLMETRICS_EXPORTER``, the S
left out) or a setting that has no variable (``RLMETRICS_RUN_ID``) is said once by ``start()``
and ``Logger()``, naming the closest variable that is read, and refused by ``rlmetrics config``.
Before, each was ignored without a word and the run went on with the defaults."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.cli import main
from rlmetrics.plugins import get_plugins
from rlmetrics.testing import CapturedLog, captured_log, in_memory_telemetry
from rlmetrics.variables import CORE_VARIABLES, PREFIX, known_variables, unknown_variables

ROOT = Path(__file__).resolve().parents[1]

MISTAKES = {
    "RLMETRICS_EXPORTER": ("otlp", "'RLMETRICS_EXPORTERS'"),
    "RLMETRICS_BACKEND": ("wandb", "'RLMETRICS_BACKENDS'"),
    "RLMETRICS_STRICT_MODE": ("1", "'RLMETRICS_STRICT'"),
    "RLMETRICS_RUN_ID": ("run-7", ""),
}


@pytest.fixture
def rlmetrics_log() -> Iterator[CapturedLog]:
    with captured_log() as log:
        yield log


@pytest.fixture(autouse=True)
def no_other_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's own switches (RLMETRICS_EXPECT_SDK...) are known; a stray one of the
    machine's would make these tests about it."""
    for name in [n for n in os.environ if n.startswith(PREFIX)]:
        if name not in known_variables(get_plugins()):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_start_says_a_variable_nothing_reads_once_naming_the_closest(
    name: str, monkeypatch: pytest.MonkeyPatch, rlmetrics_log: CapturedLog
) -> None:
    value, closest = MISTAKES[name]
    monkeypatch.setenv(name, value)
    with in_memory_telemetry():
        pass
    with in_memory_telemetry():
        pass
    said = [r.getMessage() for r in rlmetrics_log.matching(name, level=logging.WARNING)]
    assert len(said) == 1, said
    assert f"{name} is read by nothing" in said[0]
    assert (f"did you mean {closest}?" in said[0]) == bool(closest), said[0]


def test_a_logger_alone_says_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rlmetrics_log: CapturedLog
) -> None:
    monkeypatch.setenv("RLMETRICS_BACKEND", "wandb")
    with rlmetrics.Logger(backends={"jsonl": {"path": str(tmp_path / "m.jsonl")}}) as logger:
        logger.log_metrics({"loss": 1.0}, step=0)
    (said,) = rlmetrics_log.matching("RLMETRICS_BACKEND ", level=logging.WARNING)
    assert "did you mean 'RLMETRICS_BACKENDS'?" in said.getMessage()


def test_rlmetrics_config_refuses_each_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, (value, _) in MISTAKES.items():
        monkeypatch.setenv(name, value)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    for name, (_, closest) in MISTAKES.items():
        assert f"{name} is read by nothing" in err
        if closest:
            assert closest in err


def test_known_variables_pass_unsaid(
    monkeypatch: pytest.MonkeyPatch, rlmetrics_log: CapturedLog, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RLMETRICS_STALL_AFTER_S", "600")
    monkeypatch.setenv("RLMETRICS_UNKNOWN_KEYS", "ignore")
    monkeypatch.setenv("RLMETRICS_REQUIRE_SOMETHING", "1")  # a test suite's switch
    with in_memory_telemetry():
        pass
    assert not rlmetrics_log.matching("is read by nothing")
    assert main(["config"]) == 0, capsys.readouterr().err


def test_every_variable_the_docs_and_ci_name_is_read() -> None:
    """Keeps the known list and the documentation in line: a variable a page tells users to
    set (or CI sets) that nothing reads is a mistake in the page or in the list."""
    known = known_variables(get_plugins())
    pages = [*ROOT.glob("docs/**/*.md"), ROOT / "README.md", ROOT / "tox.ini", ROOT / ".ci/run"]
    pages += ROOT.glob("plugins/*/README.md")
    named = {
        (page.relative_to(ROOT).as_posix(), name)
        for page in pages
        for name in re.findall(r"\bRLMETRICS_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())
    }
    # The pages' examples: mistakes, said as such where they stand, and a third-party
    # plugin's variable in the plugin guide.
    examples = {
        ("docs/configuration.md", "RLMETRICS_BACKEND_JSONL_PTH"),
        ("docs/configuration.md", "RLMETRICS_EXPORTER"),
        ("docs/configuration.md", "RLMETRICS_RUN_ID"),
        ("docs/configuration.md", "RLMETRICS_RAY_GPU"),
        ("docs/writing-a-plugin.md", "RLMETRICS_ACME_URL"),
    }
    strays = sorted(
        f"{page}: {name}"
        for page, name in named
        if (page, name) not in examples and unknown_variables({name: "1"}, known)
    )
    assert strays == []


@given(
    name=st.from_regex(r"RLMETRICS_[A-Z0-9_]{1,30}", fullmatch=True),
)
def test_a_variable_is_said_exactly_when_it_is_neither_known_nor_an_option(name: str) -> None:
    known = frozenset(CORE_VARIABLES)
    said = unknown_variables({name: "x", "PATH": "/bin", "rlmetrics_lower": "x"}, known)
    option = name.startswith(("RLMETRICS_EXPORTER_", "RLMETRICS_BACKEND_", "RLMETRICS_REQUIRE_"))
    assert [problem.split(" ", 1)[0] for problem in said] == (
        [] if name in known or option else [name]
    )


# -- a plugin's variables ----------------------------------------------------------------------


def test_a_variable_whose_check_is_not_callable_is_refused_where_it_is_declared() -> None:
    from rlmetrics.variables import Variable

    with pytest.raises(TypeError, match=r"RLMETRICS_ACME_MODE.*check.*callable.*got 'online'"):
        Variable("RLMETRICS_ACME_MODE", "online")  # type: ignore[arg-type]


def test_a_plugins_check_that_raises_is_said_naming_the_variable_and_the_plugin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The value may be right; the plugin's check is what failed, and ``rlmetrics config``
    says so instead of printing the bare exception."""
    from rlmetrics.plugins import register
    from rlmetrics.variables import Variable

    def check(value: str) -> str | None:
        raise ValueError("check exploded")

    class Reads:
        @rlmetrics.hookimpl
        def register_variables(self, register: object) -> None:
            register(Variable("RLMETRICS_ACME_URL", check))  # type: ignore[operator]

    register(Reads(), "acme-reads")
    monkeypatch.setenv("RLMETRICS_ACME_URL", "http://127.0.0.1:9")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert (
        "RLMETRICS_ACME_URL: the check of plugin 'acme-reads' raised ValueError('check "
        "exploded'), so the value is not known to be right"
    ) in err


@pytest.mark.parametrize("returned", [True, False])
def test_a_plugins_check_that_returns_a_bool_is_said_as_the_checks_mistake(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], returned: bool
) -> None:
    """A predicate (``lambda v: v.startswith("http")``) where a check returns what is wrong:
    before, a right value was refused as ``RLMETRICS_ACME_URL='http://...': True``."""
    from rlmetrics.plugins import register
    from rlmetrics.variables import Variable

    class Reads:
        @rlmetrics.hookimpl
        def register_variables(self, register: object) -> None:
            check = lambda value: returned  # noqa: E731
            register(Variable("RLMETRICS_ACME_URL", check))  # type: ignore[operator]

    register(Reads(), "acme-reads")
    monkeypatch.setenv("RLMETRICS_ACME_URL", "http://127.0.0.1:9")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert (
        f"RLMETRICS_ACME_URL: the check of plugin 'acme-reads' returned {returned}, not what "
        "is wrong with the value (a str) or None, so the value is not known to be right"
    ) in err
