"""Configuration: from the Python call, a TOML file or environment variables, with one
validation for all three; and configuration mistakes, found where the configuration is given.

A misspelled option or a plugin name that matches nothing is a mistake in what the user
wrote, so it fails at once, where it was written (``Logger(...)``, ``rlmetrics.start(...)``, a
configuration file or an environment variable), with the names that would be valid. A failure
of the world — no credentials, a store gone, a path that cannot be written — is no mistake and
keeps degrading with a warning, as it always did.

Settings come from the call, else the environment, else the configuration file
(``RLMETRICS_CONFIG``), else the defaults: a call's argument left at its default takes the
configured value. The file (docs/configuration.md has every setting)::

    [telemetry]                 # rlmetrics.start()'s arguments
    service_name = "grpo"
    export_interval_s = 10

    [exporters.otlp]            # each table chooses an exporter, with its options
    endpoint = "http://collector:4317"

    [exporters.prometheus]
    port = 9465

    [logger]                    # Logger()'s arguments
    key_map = "trl"

    [backends.jsonl]            # each table chooses a backend, with its options
    path = "runs/metrics.jsonl"

and the variables ``RLMETRICS_EXPORTERS=otlp,prometheus`` / ``RLMETRICS_BACKENDS=jsonl,wandb``
(a choice replacing the file's), ``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` /
``RLMETRICS_BACKEND_<NAME>_<OPTION>`` (one option: ``RLMETRICS_BACKEND_WANDB_PROJECT=grpo``;
a TOML value, else the text), ``RLMETRICS_KEY_MAP``, ``RLMETRICS_STRICT``.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "BACKENDS_ENV",
    "BACKEND_OPTION_ENV",
    "CONFIG_ENV",
    "EXPORTERS_ENV",
    "EXPORTER_OPTION_ENV",
    "KEY_MAP_ENV",
    "LOGGER_SETTINGS",
    "TELEMETRY_SETTINGS",
    "Configured",
    "check_configured_options",
    "check_options",
    "check_plugin_names",
    "choose",
    "configured",
    "option_names",
    "read_file",
    "setting",
    "suggest",
]


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'path'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def option_names(factory: Callable[..., Any], provided: Iterable[str] = ()) -> list[str] | None:
    """The keyword options ``factory`` takes, without those rlmetrics itself passes
    (``provided``); None when it takes any keyword (``**options``) or its signature cannot be
    read, so nothing can be checked."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    skip = set(provided)
    return [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in skip
        and not p.name.startswith("_")
    ]


def check_options(
    what: str,
    name: str,
    factory: Callable[..., Any],
    options: Any,
    provided: Iterable[str] = (),
) -> dict[str, Any]:
    """``options`` as a dict, after checking each is an option ``factory`` takes; raises
    ``TypeError`` naming the wrong one, the closest valid one and all of them.

    ``what`` and ``name`` say whose options they are (``backend``, ``'jsonl'``); ``provided``
    are the parameters rlmetrics passes itself (the run's identity, the export interval)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"{what} {name!r}: options are a mapping of option names to values, "
            f"got a {type(options).__name__}"
        )
    valid = option_names(factory, provided)
    if valid is not None:
        for option in options:
            if option not in valid:
                raise TypeError(
                    f"{what} {name!r} has no option {option!r}{suggest(str(option), valid)}; "
                    f"its options: {', '.join(valid) or 'none'}"
                )
    return dict(options)


def check_plugin_names(names: Iterable[str] | None, source: str, known: Mapping[str, str]) -> None:
    """Raise ``ValueError`` if any of ``names`` (an allow- or deny-list from ``source``) is no
    installed plugin: ``known`` maps each normalised entry-point and distribution name to how
    it is spelled."""
    if names is None:
        return
    from .plugins import normalize

    unknown = [name for name in names if name.strip() and normalize(name.strip()) not in known]
    if unknown:
        hints = "; ".join(
            f"{name.strip()!r}{suggest(normalize(name.strip()), known)}" for name in unknown
        )
        raise ValueError(
            f"{source} names no installed plugin: {hints}. Installed (entry-point or "
            f"distribution names): {', '.join(sorted(set(known.values())))}"
        )


# -- configuration without code: a TOML file and environment variables --------------------------

#: The configuration file's path (TOML). Nothing is read without it.
CONFIG_ENV = "RLMETRICS_CONFIG"
#: The exporters and backends to use, comma-separated (replacing the file's choice).
EXPORTERS_ENV = "RLMETRICS_EXPORTERS"
BACKENDS_ENV = "RLMETRICS_BACKENDS"
#: ``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` / ``RLMETRICS_BACKEND_<NAME>_<OPTION>``: one option.
EXPORTER_OPTION_ENV = "RLMETRICS_EXPORTER_"
BACKEND_OPTION_ENV = "RLMETRICS_BACKEND_"
#: The Logger's key map (``Logger(key_map=...)``).
KEY_MAP_ENV = "RLMETRICS_KEY_MAP"

_NUMBER = (int, float)
#: The settings of the file's ``[telemetry]`` table: each a ``start()`` argument, its type.
TELEMETRY_SETTINGS: dict[str, tuple[type, ...]] = {
    "service_name": (str,),
    "service_version": (str,),
    "run_id": (str,),
    "resume": (bool,),
    "export_interval_s": _NUMBER,
    "traces": (bool,),
    "plugins": (list,),
    "disable_plugins": (list,),
    "resource": (dict,),
    "strict": (bool,),
}
#: The settings of the file's ``[logger]`` table: each a ``Logger()`` argument, its type.
LOGGER_SETTINGS: dict[str, tuple[type, ...]] = {
    "queue_size": (int,),
    "finish_timeout_s": _NUMBER,
    "exit_timeout_s": _NUMBER,
    "key_map": (str,),
    "run_id": (str,),
    "resume": (bool,),
    "max_sample_rows": (int,),
    "max_cell_bytes": (int,),
    "strict": (bool,),
}
_TABLES = ("telemetry", "logger", "exporters", "backends")


@attrs.frozen
class Configured:
    """What a configuration file and the environment say, each value with where it came from.

    ``exporters`` / ``backends`` map each name chosen to its options; None where neither chose
    any (the call's own choice, or its default, stands)."""

    telemetry: dict[str, tuple[Any, str]] = attrs.Factory(dict)
    logger: dict[str, tuple[Any, str]] = attrs.Factory(dict)
    exporters: dict[str, dict[str, tuple[Any, str]]] | None = None
    exporters_source: str | None = None
    backends: dict[str, dict[str, tuple[Any, str]]] | None = None
    backends_source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        def values(table: Mapping[str, tuple[Any, str]]) -> dict[str, Any]:
            return {k: {"value": v, "from": src} for k, (v, src) in table.items()}

        def chosen(
            table: Mapping[str, Mapping[str, tuple[Any, str]]] | None, source: str | None
        ) -> dict[str, Any] | None:
            if table is None:
                return None
            return {"from": source, "options": {n: values(o) for n, o in table.items()}}

        return {
            "telemetry": values(self.telemetry),
            "logger": values(self.logger),
            "exporters": chosen(self.exporters, self.exporters_source),
            "backends": chosen(self.backends, self.backends_source),
        }


def _read_toml(path: str) -> dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise ValueError(
                f"{CONFIG_ENV}={path}: reading TOML on Python 3.10 needs tomli: "
                "pip install 'rlmetrics[config]'"
            ) from None
    try:
        with open(path, "rb") as handle:
            return dict(tomllib.load(handle))
    except OSError as exc:
        raise ValueError(
            f"{CONFIG_ENV}={path}: cannot read the configuration file ({exc.strerror or exc})"
        ) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ValueError(f"{CONFIG_ENV}={path}: not valid TOML: {exc}") from None


def _typed(where: str, value: Any, kinds: tuple[type, ...]) -> Any:
    """``value`` if it is one of ``kinds`` (a bool is no number), else ``ValueError``."""
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        list: "a list",
        dict: "a table",
    }
    wanted = "a number" if kinds == _NUMBER else " or ".join(names[k] for k in kinds)
    raise ValueError(f"{where} must be {wanted}, got {type(value).__name__}")


def read_file(path: str) -> Configured:
    """The configuration file at ``path``: ``[telemetry]`` and ``[logger]`` settings (a
    ``start()`` / ``Logger()`` argument each), and ``[exporters.<name>]`` /
    ``[backends.<name>]`` tables, each choosing that exporter or backend with its options.
    An unknown table or setting, or a value of the wrong type, raises ``ValueError`` naming it
    and what is valid."""
    document = _read_toml(path)
    where = os.path.basename(path)
    for table in document:
        if table not in _TABLES:
            raise ValueError(
                f"{path}: no table [{table}]{suggest(table, _TABLES)}; the tables: "
                f"{', '.join(f'[{t}]' for t in _TABLES)}"
            )
    settings: dict[str, dict[str, tuple[Any, str]]] = {}
    for table, known in (("telemetry", TELEMETRY_SETTINGS), ("logger", LOGGER_SETTINGS)):
        given = document.get(table, {})
        if not isinstance(given, dict):
            raise ValueError(f"{path}: [{table}] must be a table")
        found: dict[str, tuple[Any, str]] = {}
        for key, value in given.items():
            if key not in known:
                raise ValueError(
                    f"{path}: [{table}] has no setting {key!r}{suggest(key, known)}; its "
                    f"settings: {', '.join(known)}"
                )
            source = f"{where} [{table}] {key}"
            found[key] = (_typed(source, value, known[key]), source)
        settings[table] = found
    chosen: dict[str, dict[str, dict[str, tuple[Any, str]]] | None] = {}
    for table in ("exporters", "backends"):
        given = document.get(table)
        if given is None:
            chosen[table] = None
            continue
        if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
            raise ValueError(
                f"{path}: [{table}] holds one table per {table[:-1]}, "
                f"[{table}.<name>], with its options"
            )
        chosen[table] = {
            name: {k: (v, f"{where} [{table}.{name}] {k}") for k, v in options.items()}
            for name, options in given.items()
        }
    return Configured(
        settings["telemetry"],
        settings["logger"],
        chosen["exporters"],
        f"{where} [exporters]" if chosen["exporters"] is not None else None,
        chosen["backends"],
        f"{where} [backends]" if chosen["backends"] is not None else None,
    )


def _env_value(text: str) -> Any:
    """An option's value from the environment: a TOML value (``5``, ``0.5``, ``true``,
    ``"x"``, ``[1, 2]``) when it reads as one, else the text itself (a path, a host)."""
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]

        return tomllib.loads(f"v = {text}")["v"]
    except Exception:
        return text


def _spelled(name: str) -> str:
    """How a plugin's name is spelled in a variable: upper case, ``_`` for the rest."""
    return re.sub(r"[^A-Z0-9]+", "_", name.upper())


def _option_variables(
    prefix: str, what: str, names: Iterable[str]
) -> dict[str, dict[str, tuple[Any, str]]]:
    """``{name: {option: (value, variable)}}`` from every ``<prefix><NAME>_<OPTION>``
    variable; a variable that names no available ``what`` raises ``ValueError``."""
    by_spelling = sorted(((_spelled(n), n) for n in names), key=lambda p: -len(p[0]))
    found: dict[str, dict[str, tuple[Any, str]]] = {}
    for variable, text in sorted(os.environ.items()):
        if not variable.startswith(prefix):
            continue
        rest = variable[len(prefix) :]
        for spelling, name in by_spelling:
            if rest.startswith(spelling + "_") and len(rest) > len(spelling) + 1:
                option = rest[len(spelling) + 1 :].lower()
                found.setdefault(name, {})[option] = (_env_value(text), variable)
                break
        else:
            raise ValueError(
                f"{variable} names no {what}: {prefix}<NAME>_<OPTION> takes one of "
                f"{', '.join(_spelled(n) for n in sorted(names)) or 'none'} as NAME"
            )
    return found


def _chosen_by_env(variable: str) -> list[str] | None:
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def configured(
    exporter_names: Iterable[str] | None = None, backend_names: Iterable[str] | None = None
) -> Configured:
    """What the configuration file (``RLMETRICS_CONFIG``) and the environment say, the
    environment winning: ``RLMETRICS_EXPORTERS`` / ``RLMETRICS_BACKENDS`` replace the file's
    choice, ``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` / ``RLMETRICS_BACKEND_<NAME>_<OPTION>`` one
    option each, ``RLMETRICS_KEY_MAP`` the Logger's key map. ``exporter_names`` and
    ``backend_names`` are the ones available, which an option variable must name; without
    them, that kind's variables are not read (the file's choice is given as it is)."""
    path = os.environ.get(CONFIG_ENV, "").strip()
    base = read_file(path) if path else Configured()
    logger_settings = dict(base.logger)
    key_map = os.environ.get(KEY_MAP_ENV, "").strip()
    if key_map:
        logger_settings["key_map"] = (key_map, KEY_MAP_ENV)
    exporters, exporters_source = _with_environment(
        "exporter",
        EXPORTERS_ENV,
        EXPORTER_OPTION_ENV,
        exporter_names,
        base.exporters,
        base.exporters_source,
    )
    backends, backends_source = _with_environment(
        "backend",
        BACKENDS_ENV,
        BACKEND_OPTION_ENV,
        backend_names,
        base.backends,
        base.backends_source,
    )
    return Configured(
        dict(base.telemetry),
        logger_settings,
        exporters,
        exporters_source,
        backends,
        backends_source,
    )


def _with_environment(
    kind: str,
    chooser: str,
    prefix: str,
    names: Iterable[str] | None,
    table: dict[str, dict[str, tuple[Any, str]]] | None,
    source: str | None,
) -> tuple[dict[str, dict[str, tuple[Any, str]]] | None, str | None]:
    """The file's choice of ``kind`` with the environment's over it."""
    if names is None:
        return table, source
    chosen = _chosen_by_env(chooser)
    options = _option_variables(prefix, kind, names)
    if chosen is not None:
        table = {name: dict((table or {}).get(name, {})) for name in chosen}
        source = chooser
    for name, given in options.items():
        if table is None or name not in table:
            variable = next(iter(given.values()))[1]
            raise ValueError(
                f"{variable} configures {kind} {name!r}, which is not chosen: name it in "
                f"{chooser} (or give it a [{kind}s.{name}] table in the configuration file)"
            )
        table[name].update(given)
    return table, source


def setting(settings: Mapping[str, tuple[Any, str]], name: str, given: Any, default: Any) -> Any:
    """A call's argument ``given``, or the configured value when the call left it at its
    ``default``."""
    if (given is default or given == default) and name in settings:
        return settings[name][0]
    return given


def choose(
    kind: str,
    given: Mapping[str, Mapping[str, Any] | None] | None,
    table: Mapping[str, Mapping[str, tuple[Any, str]]] | None,
) -> tuple[dict[str, dict[str, Any]] | None, dict[str, dict[str, str]]]:
    """The ``{name: options}`` a call uses, and where each configured option came from: the
    call's own choice when it made one (``given``), with the configured options of those
    names under its own; else the configuration's choice."""
    sources: dict[str, dict[str, str]] = {}
    if given is None:
        if table is None:
            return None, sources
        given = {name: {} for name in table}
    chosen: dict[str, dict[str, Any]] = {}
    for name, options in given.items():
        configured_options = (table or {}).get(name, {})
        sources[name] = {k: src for k, (_v, src) in configured_options.items()}
        merged = {k: v for k, (v, _src) in configured_options.items()}
        if isinstance(options, Mapping):
            merged.update(options)
            for key in options:
                sources[name].pop(key, None)
        elif options is not None:
            merged = options  # type: ignore[assignment]  # check_options says what is wrong
        chosen[name] = merged
    return chosen, sources


def check_configured_options(
    what: str,
    name: str,
    factory: Callable[..., Any],
    options: Any,
    sources: Mapping[str, str],
    provided: Iterable[str] = (),
) -> dict[str, Any]:
    """:func:`check_options`, naming the variable or file setting a wrong option came from."""
    try:
        return check_options(what, name, factory, options, provided)
    except TypeError as exc:
        wrong = [src for option, src in sources.items() if repr(option) in str(exc)]
        if wrong:
            raise TypeError(f"{exc} (from {wrong[0]})") from None
        raise
