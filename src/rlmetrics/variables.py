"""The ``RLMETRICS_*`` variables: which ones something reads, and the ones that name nothing.

A misspelt variable is the quietest mistake of a first hour: ``RLMETRICS_EXPORTER=otlp`` (the
S left out), ``RLMETRICS_RUN_ID`` (a setting with no variable) or ``RLMETRICS_RAY_GPU=0`` is
read by nothing, so the run goes on with the defaults and nobody is told. Every name under
the ``RLMETRICS_`` prefix is rlmetrics' own, so one that neither the core nor a loaded plugin
reads is a mistake: ``start()`` and ``Logger()`` say it once, naming the closest variable
that is read, and ``rlmetrics config`` refuses it. A plugin names its variables in
``register_variables``, each with the check of its value that ``rlmetrics config`` runs.

``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` and ``RLMETRICS_BACKEND_<NAME>_<OPTION>`` are checked
where the options are read (an unknown exporter, backend or option is refused there), and
``RLMETRICS_REQUIRE_<PEER>`` is a test suite's switch, so none of them is said here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

from ._warn import warn_once
from .configuration import (
    BACKEND_OPTION_ENV,
    BACKENDS_ENV,
    CONFIG_ENV,
    EXPORTER_OPTION_ENV,
    EXPORTERS_ENV,
    LOGGER_SETTINGS,
    SETTING_VARIABLES,
    TELEMETRY_SETTINGS,
    suggest,
)

if TYPE_CHECKING:
    from .plugins import Plugins

__all__ = [
    "CORE_VARIABLES",
    "PREFIX",
    "TEST_SWITCHES",
    "Variable",
    "known_variables",
    "plugin_variables",
    "unknown_variables",
    "variable_problems",
    "warn_unknown_variables",
]

PREFIX = "RLMETRICS_"

#: The prefixes whose variables are checked elsewhere, or belong to a test suite.
_CHECKED_ELSEWHERE = (EXPORTER_OPTION_ENV, BACKEND_OPTION_ENV, "RLMETRICS_REQUIRE_")

#: The test and CI switches (docs/configuration.md): the project's suite reads them, and a
#: plugin's suite may (``rlmetrics.testing``), so they are never a mistake.
TEST_SWITCHES = (
    "RLMETRICS_HYPOTHESIS_PROFILE",
    "RLMETRICS_EXPECT_SDK",
    "RLMETRICS_CHROMIUM",
    "RLMETRICS_HTML_SCREENSHOTS",
    "RLMETRICS_WHEELHOUSE_TEST",
    "RLMETRICS_TEST_PG_TIMEOUT",
)

#: The settings a call or the file gives, by table: a name among them that has no variable is
#: told where it is given instead.
_SETTINGS = {"telemetry": TELEMETRY_SETTINGS, "logger": LOGGER_SETTINGS}

#: Every variable the core reads.
CORE_VARIABLES: tuple[str, ...] = tuple(
    sorted(
        {
            CONFIG_ENV,
            EXPORTERS_ENV,
            BACKENDS_ENV,
            "RLMETRICS_OVERRIDE_PLUGINS",
            "RLMETRICS_STALL_AFTER_S",
            *(
                name
                for table in SETTING_VARIABLES.values()
                for name in table.values()
                if name.startswith(PREFIX)
            ),
            *TEST_SWITCHES,
        }
    )
)


@attrs.frozen
class Variable:
    """A variable a plugin reads, and what is wrong with a value of it.

    ``check(value)`` returns what is wrong with ``value`` and what it takes, in one line, or
    None where the value is taken; ``rlmetrics config`` refuses a wrong one. (The plugin
    itself, reading it, says the same once and keeps its default: it never stops a run.)
    """

    name: str = attrs.field()
    check: Callable[[str], str | None] | None = attrs.field(default=None)

    @name.validator
    def _named(self, _: object, name: str) -> None:
        if not isinstance(name, str) or not name.startswith(PREFIX) or name == PREFIX:
            raise ValueError(
                f"a plugin's variable is named RLMETRICS_<SOMETHING>, got {name!r}: the "
                "RLMETRICS_ names are the ones checked for mistakes"
            )

    @check.validator
    def _callable(self, _: object, check: object) -> None:
        if check is not None and not callable(check):
            raise TypeError(
                f"Variable {self.name!r}: check is a callable taking the value and returning "
                f"what is wrong with it (or None), got {check!r}"
            )


def plugin_variables(plugins: Plugins) -> dict[str, Variable]:
    """``{name: Variable}`` from every loaded plugin's ``register_variables``."""
    return {name: variable for name, (_, variable) in _offered(plugins).items()}


def _offered(plugins: Plugins) -> dict[str, tuple[str, Variable]]:
    """``{name: (the plugin that names it, Variable)}``, the first plugin's if two do."""
    from .hooks import current_plugin

    found: dict[str, tuple[str, Variable]] = {}

    def register(variable: Variable) -> None:
        if not isinstance(variable, Variable):
            raise TypeError(
                f"register_variables takes rlmetrics.variables.Variable objects, got "
                f"{type(variable).__name__}"
            )
        found.setdefault(variable.name, (current_plugin() or "?", variable))

    plugins.hooks.register_variables(register)
    return found


def known_variables(plugins: Plugins) -> frozenset[str]:
    """The names the core and the loaded plugins read."""
    return frozenset(CORE_VARIABLES) | frozenset(plugin_variables(plugins))


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One line for each ``RLMETRICS_*`` variable of ``environ`` that nothing reads, naming
    the closest one that is read (or, for a setting with no variable, where it is given)."""
    known = frozenset(known)
    problems = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in known or name.startswith(_CHECKED_ELSEWHERE):
            continue
        problems.append(f"{name} is read by nothing{_closest(name, known)}")
    return problems


def _closest(name: str, known: frozenset[str]) -> str:
    # Compared without the prefix they all share, which would make any two names "close".
    rest = name[len(PREFIX) :]
    setting = rest.lower()
    tables = [t for t, settings in _SETTINGS.items() if setting in settings]
    if tables and not any(setting in SETTING_VARIABLES.get(t, {}) for t in tables):
        where = " or ".join(f"[{table}] {setting}" for table in tables)
        return (
            f": {setting} has no variable; give it in the call, or as {where} in the file "
            f"{CONFIG_ENV} names"
        )
    close = suggest(rest, [k[len(PREFIX) :] for k in known])
    if close:
        return close.replace("'", f"'{PREFIX}", 1)
    return ": neither rlmetrics nor a loaded plugin has such a variable"


def variable_problems(environ: Mapping[str, str], plugins: Plugins) -> list[str]:
    """Every variable of ``environ`` nothing reads, and every value a plugin's check finds
    wrong: what ``rlmetrics config`` refuses."""
    variables = _offered(plugins)
    problems = unknown_variables(environ, frozenset(CORE_VARIABLES) | frozenset(variables))
    for name, (plugin, variable) in sorted(variables.items()):
        value = environ.get(name)
        if value is None or variable.check is None:
            continue
        try:
            wrong = variable.check(value)
        except Exception as exc:  # the plugin's bug, not the user's value: say whose
            problems.append(
                f"{name}: the check of plugin {plugin!r} raised {exc!r}, so the value is not "
                "known to be right"
            )
            continue
        if wrong is not None and not isinstance(wrong, str):  # a predicate's True or False
            problems.append(
                f"{name}: the check of plugin {plugin!r} returned {wrong!r:.40}, not what is "
                "wrong with the value (a str) or None, so the value is not known to be right"
            )
        elif wrong:
            problems.append(f"{name}={value!r}: {wrong}")
    return problems


def warn_unknown_variables(plugins: Plugins) -> None:
    """Say, once per process and name, each ``RLMETRICS_*`` variable nothing reads."""
    environ = {name: "" for name in os.environ if name.startswith(PREFIX)}
    if not environ:
        return
    for problem in unknown_variables(environ, known_variables(plugins)):
        name = problem.split(" ", 1)[0]
        warn_once(
            f"variable:{name}",
            f"rlmetrics: {problem}",
            expected=True,
        )
