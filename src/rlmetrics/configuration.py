"""Configuration: from the Python call, a TOML file or environment variables, with one
validation for all three; and configuration mistakes, found where the configuration is given.

A misspelled option or a plugin name that matches nothing is a mistake in what the user
wrote, so it fails at once, where it was written (``Logger(...)``, ``rlmetrics.start(...)``, a
configuration file or an environment variable), with the names that would be valid. A failure
of the world — no credentials, a store gone, a path that cannot be written — is no mistake and
keeps degrading with a warning, as it always did.

Settings come from the call, else the environment, else the configuration file
(``RLMETRICS_CONFIG``), else the defaults: a call's argument left out (None, "not given")
takes the configured value, one the call gives wins even when it equals the default
(:func:`resolve`). Every mistake is a :class:`ConfigurationError` naming the wrong value's
source. The file (docs/configuration.md has every setting)::

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
a TOML value, else the text), ``RLMETRICS_KEY_MAP``, ``RLMETRICS_STRICT``,
``RLMETRICS_UNKNOWN_KEYS``, ``RLMETRICS_NAMING``.
"""

from __future__ import annotations

import difflib
import inspect
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from ._warn import describe_value

__all__ = [
    "ANYTHING",
    "BACKENDS_ENV",
    "BACKEND_OPTION_ENV",
    "CONFIG_ENV",
    "EXPORTERS_ENV",
    "EXPORTER_OPTION_ENV",
    "FILE_PATH",
    "FLAG",
    "INTEGER",
    "KEY_MAP_ENV",
    "LOGGER_SETTINGS",
    "MAX_CONFIG_BYTES",
    "NON_NEGATIVE_INTEGER",
    "NON_NEGATIVE_NUMBER",
    "NUMBER",
    "PATH",
    "PORT",
    "POSITIVE_INTEGER",
    "RESOURCE",
    "POSITIVE_NUMBER",
    "TELEMETRY_SETTINGS",
    "SETTING_VARIABLES",
    "TABLE",
    "TEXT",
    "TEXT_LIST",
    "UNKNOWN_KEYS",
    "UNKNOWN_KEYS_ENV",
    "UNKNOWN_KEYS_MODES",
    "ConfigurationError",
    "Configured",
    "Option",
    "check_call",
    "check_configured_options",
    "check_names",
    "check_options",
    "check_plugin_names",
    "check_setting",
    "check_variable",
    "choose",
    "source_of",
    "configured",
    "declare_options",
    "in_any_case",
    "is_attribute_value",
    "declared_options",
    "from_source",
    "named_choice",
    "one_of",
    "option_names",
    "read_file",
    "resolve",
    "setting",
    "suggest",
]


class ConfigurationError(ValueError, TypeError):
    """A configuration mistake: an unknown name, option or setting, or a value of the wrong
    type, from the call, an environment variable or the configuration file. The message is the
    whole story: what is wrong, where it came from and what would be valid.

    It is a ``ValueError`` and a ``TypeError`` both, the two exceptions these mistakes raised
    before it existed, so code catching either still catches it."""


def from_source(source: str | None) -> str:
    """`` (from RLMETRICS_BACKEND_JSONL_PTH)`` naming where a value came from, or nothing
    for the call's own."""
    return f" (from {source})" if source else ""


# -- declared options: what each exporter's and backend's options must be --------------------


def _finite_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


#: How much of a refused text value a message shows.
_SHOWN_TEXT = 40


@attrs.frozen
class Option:
    """What one option of an exporter or backend (or one setting) must be: ``accepts`` says
    whether a value is one, ``what`` says it for a message (``a number``). None is always
    accepted: it means the option's default."""

    what: str
    accepts: Callable[[Any], bool]
    #: Environment variables the factory reads for this option when it is not given (the
    #: standard ``OTEL_*`` ones): set, they win over the configuration file's value.
    variables: tuple[str, ...] = ()
    #: Variables the plugin's library reads itself whatever the option says (``WANDB_MODE``)
    #: and refuses when wrong: a set one is checked as the option's value would be, where the
    #: options are, so it is refused naming it instead of the backend being skipped at start.
    checked_variables: tuple[str, ...] = ()

    def read_from(self, *variables: str) -> Option:
        """This option, read by its factory from ``variables`` when not given."""
        return attrs.evolve(self, variables=variables)

    def checks(self, *variables: str) -> Option:
        """This option, whose library also reads ``variables`` (values of this kind, as text:
        a name) and refuses a wrong one."""
        return attrs.evolve(self, checked_variables=variables)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not one (``must be a number, got str``), else None."""
        if value is None:
            return None
        try:
            if self.accepts(value):
                return None
        except Exception:
            pass
        kind = type(value).__name__
        if isinstance(value, str):
            # The text refused (a mode in capitals, a quoted number), cut when long: a text
            # option takes any text, so a refused one is no secret a token option would hold.
            shown = f" {value[:_SHOWN_TEXT]!r}" + ("..." if len(value) > _SHOWN_TEXT else "")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            shown = ""
        elif isinstance(value, int) and value.bit_length() > 128:
            shown = f" of {value.bit_length()} bits"  # repr() raises past 4,300 digits
        else:
            shown = f" {value!r}"
        return f"must be {self.what}, got {kind}{shown}"


def one_of(*choices: str) -> Option:
    """An option that is one of ``choices`` (a tracker's modes: a misspelt one is refused where
    it is read, naming its source, not by the tracker at start)."""
    allowed = frozenset(choices)
    return Option(
        "one of " + ", ".join(repr(c) for c in choices),
        lambda v: isinstance(v, str) and v in allowed,
    )


TEXT = Option("a string", lambda v: isinstance(v, str))
PATH = Option("a path (a string)", lambda v: isinstance(v, (str, os.PathLike)))
#: A file rlmetrics itself writes: a blank one is no file (the JSONL backend was skipped with
#: "cannot append to ."), where a tracker's directory option may leave "" to its library.
FILE_PATH = Option(
    PATH.what, lambda v: isinstance(v, os.PathLike) or (isinstance(v, str) and bool(v.strip()))
)
FLAG = Option("true or false", lambda v: isinstance(v, bool))
NUMBER = Option("a number", _finite_number)
POSITIVE_NUMBER = Option("a positive number", lambda v: _finite_number(v) and v > 0)
NON_NEGATIVE_NUMBER = Option("a number of 0 or more", lambda v: _finite_number(v) and v >= 0)
INTEGER = Option("an integer", lambda v: type(v) is int)
POSITIVE_INTEGER = Option("a positive integer", lambda v: type(v) is int and v > 0)
#: The SDK's limits (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``...): 0 is a limit too.
NON_NEGATIVE_INTEGER = Option("an integer of 0 or more", lambda v: type(v) is int and v >= 0)
PORT = Option(
    "a port number (0-65535; 0 picks a free one)", lambda v: type(v) is int and 0 <= v <= 65535
)
TEXT_LIST = Option(
    "a list of strings",
    lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
)
TABLE = Option("a table", lambda v: isinstance(v, Mapping))
_ATTRIBUTE_PRIMITIVES = (str, bool, int, float)


def is_attribute_value(value: Any) -> bool:
    """Whether ``value`` is one of OpenTelemetry's attribute types: a primitive, or a list
    (or tuple) of primitives of one type."""
    if isinstance(value, _ATTRIBUTE_PRIMITIVES):
        return True
    if not isinstance(value, (list, tuple)):
        return False
    return (
        all(isinstance(v, _ATTRIBUTE_PRIMITIVES) for v in value) and len(set(map(type, value))) <= 1
    )


class _Attributes(Option):
    """A table of resource attributes, whose refusal names the attribute that is none."""

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, Mapping):
            return super().problem(value)
        for key, each in value.items():
            if not is_attribute_value(each):
                what = "None" if each is None else describe_value(each)
                return (
                    f"must be {self.what}: resource attribute {key!r} is {what}; give text, a "
                    "bool, a number or a list of one of those, or leave it out"
                )
        return None


#: ``[telemetry] resource``: refused where the file is read (naming it, and by ``rlmetrics
#: config`` too), not only when ``start()`` builds the resource.
RESOURCE = _Attributes("a table of resource attributes", lambda v: isinstance(v, Mapping))
#: ``redact``: true or false, or a list of key names or glob patterns (rlmetrics.redaction).
# What rlmetrics.redaction.redaction() takes, checked where the setting is read so a refused
# one names its source: an empty list (nothing more, or nothing at all?) and an empty name
# are refused there too.
REDACT = Option(
    "true, false or a non-empty list of key names (glob patterns allowed, none empty)",
    lambda v: (
        isinstance(v, bool)
        or (isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v))
    ),
)
ANYTHING = Option("anything", lambda v: True)

_DECLARED = "rlmetrics_options"


#: A factory :func:`declare_options` decorates keeps its own type.
_Factory = TypeVar("_Factory", bound=Callable[..., Any])


def declare_options(**options: Option) -> Callable[[_Factory], _Factory]:
    """Declare what each option of an exporter or backend factory must be, checked where a
    configuration is read (the call, a variable, the file), the wrong one's source named::

        @declare_options(endpoint=TEXT, timeout_s=POSITIVE_NUMBER)
        def make_exporter(export_interval_s=None, endpoint=None, timeout_s=None): ...

    A factory that takes ``**options`` (a tracker's, which imports the tracker only when a
    Logger asks for it) takes exactly the ones it declares: declare every one, so a misspelt
    name is refused too. One that declares none has its names unchecked.

    A declaration the factory cannot honour raises ``TypeError`` where it is written (a
    plugin's import): a value that is no :class:`Option`, a name the factory does not take."""
    for name, kind in options.items():
        if not isinstance(kind, Option):
            raise TypeError(
                f"declare_options: option {name!r} is declared with an Option (TEXT, PATH, "
                "FLAG, NUMBER, POSITIVE_NUMBER, NON_NEGATIVE_NUMBER, INTEGER, POSITIVE_INTEGER, "
                "PORT, TEXT_LIST, TABLE, ANYTHING, one_of(...) or Option(what, accepts)), got "
                f"{type(kind).__name__} {kind!r:.60}"
            )

    def declare(factory: _Factory) -> _Factory:
        try:
            parameters = list(inspect.signature(factory).parameters.values())
        except (TypeError, ValueError):  # unreadable: checked where it is used, as before
            parameters = []
        if parameters and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            takes = [p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL]
            for name in options:
                if name not in takes:
                    raise TypeError(
                        f"declare_options on {getattr(factory, '__qualname__', factory)}: "
                        f"{name!r} is no option of {getattr(factory, '__name__', factory)}"
                        f"{suggest(name, takes)}; it takes: {', '.join(takes)}"
                    )
        setattr(factory, _DECLARED, dict(options))
        return factory

    return declare


def declared_options(factory: Any) -> dict[str, Option]:
    """The options ``factory`` declared (:func:`declare_options`), else none."""
    declared = getattr(factory, _DECLARED, None)
    return dict(declared) if isinstance(declared, Mapping) else {}


def suggest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """`` (did you mean 'path'?)`` for the closest of ``choices``, or nothing (``cutoff``:
    difflib's, higher for names that share long prefixes, as series names do)."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""


def option_names(factory: Callable[..., Any], provided: Iterable[str] = ()) -> list[str] | None:
    """The keyword options ``factory`` takes, without those rlmetrics itself passes
    (``provided``). A factory taking any keyword (``**options``) takes the ones it declared
    (:func:`declare_options`); None when it declared none or its signature cannot be read, so
    nothing can be checked."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    skip = set(provided)
    names = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in skip
        and not p.name.startswith("_")
    ]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        declared = [name for name in declared_options(factory) if name not in skip]
        if not declared:
            return None
        names += [name for name in declared if name not in names]
    return names


def check_options(
    what: str,
    name: str,
    factory: Callable[..., Any],
    options: Any,
    provided: Iterable[str] = (),
    sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``options`` as a dict, after checking each is an option ``factory`` takes, of the type
    it declared (:func:`declare_options`); raises :class:`ConfigurationError` naming the wrong
    one, where it came from (``sources``: option to variable or file setting; none for the
    call's own), the closest valid one and all of them.

    ``what`` and ``name`` say whose options they are (``backend``, ``'jsonl'``); ``provided``
    are the parameters rlmetrics passes itself (the run's identity, the export interval)."""
    declared = declared_options(factory)
    for option, declared_kind in declared.items():
        for variable in declared_kind.checked_variables:
            text = os.environ.get(variable, "").strip()
            problem = declared_kind.problem(text) if text else None
            if problem is not None:
                source = from_source(f"{variable}={text!r}")
                raise ConfigurationError(f"{what} {name!r} option {option!r} {problem}{source}")
    if options is None:
        return {}
    sources = sources or {}
    valid = option_names(factory, provided)
    if not isinstance(options, Mapping):
        how = ""
        if valid and len(valid) == 1:  # the one option it takes: that value for it
            how = f"; give {{{name!r}: {{{valid[0]!r}: {options!r:.60}}}}}"
        elif valid:
            how = (
                f"; its options: {', '.join(valid)}, each given as {{{name!r}: {{option: value}}}}"
            )
        raise ConfigurationError(
            f"{what} {name!r}: options are a mapping of option names to values, "
            f"got a {type(options).__name__}{how}"
        )
    for option, value in options.items():
        source = from_source(sources.get(option))
        if valid is not None and option not in valid:
            raise ConfigurationError(
                f"{what} {name!r} has no option {option!r}{suggest(str(option), valid)}; "
                f"its options: {', '.join(valid) or 'none'}{source}"
            )
        kind = declared.get(option)
        problem = None if kind is None else kind.problem(value)
        if problem is not None:
            raise ConfigurationError(f"{what} {name!r} option {option!r} {problem}{source}")
    return dict(options)


def check_names(
    kind: str, names: Iterable[str], offered: Mapping[str, Any], source: str | None, hint: str
) -> None:
    """Raise :class:`ConfigurationError` if any of ``names`` (exporters, backends chosen by
    ``source``; None for the call) is none a plugin offers, with the closest and ``hint``."""
    unknown = [name for name in names if name not in offered]
    if unknown:
        close = (
            _missing_distribution(str(unknown[0]))
            or _run_together(str(unknown[0]), offered, source)
            or suggest(str(unknown[0]), offered)
        )
        raise ConfigurationError(
            f"unknown {kind}(s) {unknown}{close}{from_source(source)}; available: "
            f"{sorted(offered)}. {hint}"
        )


def _missing_distribution(name: str) -> str:
    """How to install ``name`` when it is an extra of rlmetrics that stands for a plugin
    distribution not installed (``wandb`` is ``rlmetrics-wandb``); else nothing."""
    import importlib.metadata

    try:
        requirements = importlib.metadata.metadata("rlmetrics").get_all("Requires-Dist") or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    for requirement in requirements:
        found = re.match(
            r"(rlmetrics-[\w.-]+)[^;]*;\s*extra\s*==\s*['\"]([\w.-]+)['\"]", requirement
        )
        if found is None or found.group(2) != name:
            continue
        distribution = found.group(1)
        try:
            importlib.metadata.distribution(distribution)
            return ""  # installed: its plugin failed or is disabled (`rlmetrics plugins`)
        except importlib.metadata.PackageNotFoundError:
            return (
                f" (its distribution {distribution} is not installed: pip install "
                f"'rlmetrics[{name}]', from a clone pip install '.[{name}]' ./plugins/"
                f"{distribution})"
            )
    return ""


def _run_together(name: str, offered: Mapping[str, Any], source: str | None) -> str:
    """How to write ``name`` when it is several offered names in one (``"jsonl console"``,
    or ``"otlp,prometheus"`` given to the call as the variable takes it): comma-separated in a
    choosing variable, one name each in the call; else nothing."""
    parts = [part for part in re.split(r"[\s;,]+", name) if part]
    if len(parts) < 2 or not all(part in offered for part in parts):
        return ""
    if source is None:
        return f" (one name each: {parts!r})"
    if source.startswith("RLMETRICS_"):  # a choosing variable, not the file's tables
        return f" (names are comma-separated: {','.join(parts)!r})"
    return ""


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
        raise ConfigurationError(
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
#: What the Logger does with a key nothing knows (``Logger(unknown_keys=...)``).
UNKNOWN_KEYS_ENV = "RLMETRICS_UNKNOWN_KEYS"
#: ``unknown_keys``' values (rlmetrics.known_keys).
UNKNOWN_KEYS_MODES = ("ignore", "warn", "error")
UNKNOWN_KEYS = one_of(*UNKNOWN_KEYS_MODES)

#: The settings of the file's ``[telemetry]`` table: each a ``start()`` argument, what it is.
TELEMETRY_SETTINGS: dict[str, Option] = {
    "service_name": TEXT,
    "service_version": TEXT,
    "run_id": TEXT,
    "resume": FLAG,
    "export_interval_s": POSITIVE_NUMBER,
    "traces": FLAG,
    "plugins": TEXT_LIST,
    "disable_plugins": TEXT_LIST,
    "resource": RESOURCE,
    "strict": FLAG,
    "naming": TEXT,
}
#: The settings of the file's ``[logger]`` table: each a ``Logger()`` argument, what it is.
LOGGER_SETTINGS: dict[str, Option] = {
    "queue_size": POSITIVE_INTEGER,
    "finish_timeout_s": NON_NEGATIVE_NUMBER,
    "exit_timeout_s": NON_NEGATIVE_NUMBER,
    "key_map": TEXT,
    "run_id": TEXT,
    "resume": FLAG,
    "max_sample_rows": POSITIVE_INTEGER,
    "max_cell_bytes": POSITIVE_INTEGER,
    "strict": FLAG,
    "redact": REDACT,
    "unknown_keys": UNKNOWN_KEYS,
}
#: The configuration file is read only when it is a regular file of at most this many bytes
#: (a device or a FIFO would be read forever).
MAX_CONFIG_BYTES = 1 << 20
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
            raise ConfigurationError(
                f"{CONFIG_ENV}={path}: reading TOML on Python 3.10 needs tomli: "
                "pip install 'rlmetrics[config]'"
            ) from None
    text = _read_regular_file(path)
    try:
        return dict(tomllib.loads(text))
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ConfigurationError(f"{CONFIG_ENV}={path}: not valid TOML: {exc}") from None


def _read_regular_file(path: str) -> str:
    """The text of ``path`` if it is a regular file of at most :data:`MAX_CONFIG_BYTES`.

    Opened without blocking and checked on the open descriptor, so a FIFO (whose open would
    wait for a writer) or a device (``/dev/zero``, read forever) is refused, not read."""
    problem = None
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        # A relative path is read from the working directory of the call, which a script may
        # have left by then (Hydra's job.chdir): say where it was looked for.
        why = f"{exc.strerror or exc}"
        if not os.path.isabs(path):
            why = (
                f"at {os.path.abspath(path)}: {why}; a relative path is read from the "
                "working directory"
            )
        raise ConfigurationError(
            f"{CONFIG_ENV}={path}: cannot read the configuration file ({why})"
        ) from None
    data = b""
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            problem = "is not a regular file (a configuration file is a TOML file)"
        else:
            with os.fdopen(os.dup(descriptor), "rb") as handle:
                data = handle.read(MAX_CONFIG_BYTES + 1)
            if len(data) > MAX_CONFIG_BYTES:
                problem = f"is larger than {MAX_CONFIG_BYTES} bytes, the most rlmetrics reads"
    except OSError as exc:
        problem = f": cannot read the configuration file ({exc.strerror or exc})"
    finally:
        os.close(descriptor)
    if problem is not None:
        raise ConfigurationError(f"{CONFIG_ENV}={path} {problem}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{CONFIG_ENV}={path}: not valid TOML: {exc}") from None


def check_variable(name: str, kind: Option, parse: Callable[[str], Any], unit: str = "") -> None:
    """Refuse, naming it, a set variable of the OpenTelemetry SDK's whose text ``parse`` does
    not make a value of ``kind`` (``unit``: what its number counts). The SDK raises a bare
    ValueError out of ``start()`` for some (a negative interval) and logs a traceback and
    uses its default for others (``abc``): either way the run is not what the variable
    says, and nothing names it."""
    text = os.environ.get(name, "").strip()
    if not text:
        return
    try:
        value = parse(text)
    except ValueError:
        value = text
    if kind.problem(value) is not None:
        raise ConfigurationError(
            f"{name}={text!r} must be {kind.what}{f' of {unit}' if unit else ''}; unset it for "
            "the SDK's default"
        )


def check_setting(source: str, value: Any, kind: Option) -> Any:
    """``value`` if it is a ``kind``, else :class:`ConfigurationError` naming ``source``."""
    problem = kind.problem(value)
    if problem is not None:
        raise ConfigurationError(f"{source} {problem}")
    return value


def check_call(function: str, given: Mapping[str, Any], kinds: Mapping[str, Option]) -> None:
    """Refuse a call's argument (``given``: name to value, None for not given) as the file
    would refuse it (its ``kinds``): a :class:`ConfigurationError` naming ``function`` and the
    argument, before anything starts, where the value would otherwise fail later or not at
    all (``queue_size=0``, an unbounded queue)."""
    for name, value in given.items():
        kind = kinds.get(name)
        if kind is not None:
            check_setting(f"{function}: {name}", value, kind)


def named_choice(kind: str, function: str, given: Any) -> dict[str, Any] | None:
    """A call's choice of exporters or backends as ``{name: options}``: a mapping of names to
    options, one name, or names (each with its default options); None when not given.
    Anything else is a :class:`ConfigurationError` saying what it takes."""
    if given is None:
        return None
    if isinstance(given, Mapping):
        return {str(name): options for name, options in given.items()}
    if isinstance(given, str):
        return {given: {}}
    names = list(given) if isinstance(given, Iterable) else None
    if names is None or not all(isinstance(name, str) for name in names):
        raise ConfigurationError(
            f"{function}({kind}s=...) takes a mapping of {kind} names to options, a name or "
            f"names; got {describe_value(given)}"
        )
    return {name: {} for name in names}


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
            raise ConfigurationError(
                f"{path}: no table [{table}]{suggest(table, _TABLES)}; the tables: "
                f"{', '.join(f'[{t}]' for t in _TABLES)}"
            )
    settings: dict[str, dict[str, tuple[Any, str]]] = {}
    for table, known in (("telemetry", TELEMETRY_SETTINGS), ("logger", LOGGER_SETTINGS)):
        given = document.get(table, {})
        if not isinstance(given, dict):
            raise ConfigurationError(f"{path}: [{table}] must be a table")
        found: dict[str, tuple[Any, str]] = {}
        for key, value in given.items():
            if key not in known:
                goes = _where_it_goes(table, key, value) or suggest(key, known)
                raise ConfigurationError(
                    f"{path}: [{table}] has no setting {key!r}{goes}; its "
                    f"settings: {', '.join(known)}"
                )
            source = f"{where} [{table}] {key}"
            found[key] = (check_setting(source, value, known[key]), source)
        settings[table] = found
    chosen: dict[str, dict[str, dict[str, tuple[Any, str]]] | None] = {}
    for table in ("exporters", "backends"):
        given = document.get(table)
        if given is None:
            chosen[table] = None
            continue
        if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
            raise ConfigurationError(
                f"{path}: [{table}] holds one table per {table[:-1]}: {_as_tables(table, given)}"
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


#: ``start()`` arguments that set an exporter's option: in the file, that option.
_OPTION_ARGUMENTS = {
    "otlp_endpoint": ("otlp", "endpoint"),
    "prometheus_host": ("prometheus", "host"),
    "prometheus_port": ("prometheus", "port"),
}


def _as_tables(table: str, value: Any) -> str:
    """How the file chooses ``table``'s entries (``exporters``) that ``value`` lists, as a
    call would (``["otlp", "prometheus"]``): a table each."""
    names = list(value) if isinstance(value, (list, dict)) else []
    shown = " and ".join(f"[{table}.{n}]" for n in names if isinstance(n, str))
    return f"{shown or f'[{table}.<name>]'}, holding its options (an empty one: the defaults)"


def _where_it_goes(table: str, key: str, value: Any) -> str:
    """Where the file takes ``key``, a ``start()`` or ``Logger()`` argument written under
    ``[table]`` that the file spells elsewhere; nothing for a key no call takes."""
    if key in ("exporters", "backends"):
        one = "an exporter" if key == "exporters" else "a backend"
        return f": {one} is chosen by a table of its own: {_as_tables(key, value)}"
    if key in _OPTION_ARGUMENTS:
        exporter, option = _OPTION_ARGUMENTS[key]
        return f": it is [exporters.{exporter}] {option}"
    other, settings = (
        ("logger", LOGGER_SETTINGS) if table == "telemetry" else ("telemetry", TELEMETRY_SETTINGS)
    )
    return f": it is a [{other}] setting" if key in settings else ""


def _env_value(text: str) -> Any:
    """An option's value from the environment: a TOML value (``5``, ``0.5``, ``true``,
    ``"x"``, ``[1, 2]``) when it reads as one, else the text itself (a path, a host) without
    the blanks around it (an env file's trailing blank made a file ``m.jsonl `` that no one
    finds by its name; quoted TOML text keeps them)."""
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]

        return tomllib.loads(f"v = {text}")["v"]
    except Exception:
        return text.strip()


def _spelled(name: str) -> str:
    """How a plugin's name is spelled in a variable: upper case, ``_`` for the rest."""
    return re.sub(r"[^A-Z0-9]+", "_", name.upper())


def _option_variables(
    prefix: str, what: str, names: Iterable[str]
) -> dict[str, dict[str, tuple[Any, str]]]:
    """``{name: {option: (value, variable)}}`` from every ``<prefix><NAME>_<OPTION>``
    variable; a variable that names no available ``what`` raises :class:`ConfigurationError`."""
    names = list(names)
    by_spelling = sorted(((_spelled(n), n) for n in names), key=lambda p: -len(p[0]))
    found: dict[str, dict[str, tuple[Any, str]]] = {}
    for variable, text in sorted(os.environ.items()):
        # An empty one is unset, as OpenTelemetry reads its own variables and as an empty
        # RLMETRICS_EXPORTERS is: a launcher's env table often lists every variable.
        if not variable.startswith(prefix) or not text.strip():
            continue
        rest = variable[len(prefix) :]
        for spelling, name in by_spelling:
            if rest.startswith(spelling + "_") and len(rest) > len(spelling) + 1:
                option = rest[len(spelling) + 1 :].lower()
                found.setdefault(name, {})[option] = (_env_value(text), variable)
                break
        else:
            raise ConfigurationError(
                f"{variable} names no {what}{_meant_variable(prefix, rest, by_spelling)}: "
                f"{prefix}<NAME>_<OPTION> takes one of "
                f"{', '.join(_spelled(n) for n in sorted(names)) or 'none'} as NAME"
            )
    return found


def _meant_variable(prefix: str, rest: str, spellings: Iterable[tuple[str, str]]) -> str:
    """`` (did you mean RLMETRICS_BACKEND_JSONL_PATH?)`` for an option variable whose NAME
    part (``JSON`` of ``JSON_PATH``, cut at any ``_``) is close to an offered name's."""
    offered = [spelling for spelling, _ in spellings]
    parts = rest.split("_")
    for cut in range(len(parts) - 1, 0, -1):  # the longest NAME first (OTLP_FILE)
        close = difflib.get_close_matches("_".join(parts[:cut]), offered, n=1, cutoff=0.75)
        if close:
            return f" (did you mean {prefix}{close[0]}_{'_'.join(parts[cut:])}?)"
    return ""


def _chosen_by_env(variable: str) -> list[str] | None:
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


#: Settings an environment variable of its own gives (over the file, under the call):
#: ``{table: {setting: variable}}``. ``RLMETRICS_STRICT`` and ``OTEL_TRACES_EXPORTER`` are read
#: as on/off; ``OTEL_METRIC_EXPORT_INTERVAL`` (ms) only over a file's ``export_interval_s``
#: (without one, the SDK reads it itself).
SETTING_VARIABLES: dict[str, dict[str, str]] = {
    "telemetry": {
        "service_name": "OTEL_SERVICE_NAME",
        "plugins": "RLMETRICS_PLUGINS",
        "disable_plugins": "RLMETRICS_DISABLE_PLUGINS",
        "export_interval_s": "OTEL_METRIC_EXPORT_INTERVAL",
        "traces": "OTEL_TRACES_EXPORTER",
        "strict": "RLMETRICS_STRICT",
        "naming": "RLMETRICS_NAMING",
    },
    "logger": {
        "key_map": KEY_MAP_ENV,
        "strict": "RLMETRICS_STRICT",
        "unknown_keys": UNKNOWN_KEYS_ENV,
    },
}
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})


_SETTING_VARIABLE_NAMES = frozenset(
    v for table in SETTING_VARIABLES.values() for v in table.values()
)


def in_any_case(setting: tuple[Any, str], choices: Callable[[], Iterable[str]]) -> tuple[Any, str]:
    """``setting`` (``(value, source)``) with its value spelled as the one of ``choices`` it
    names whatever its case, when an environment variable gave it: OpenTelemetry reads its
    enum variables so, and ``RLMETRICS_UNKNOWN_KEYS=WARN`` was read as warn while
    ``RLMETRICS_NAMING=RL_PROPOSAL`` was refused. ``choices`` (the names plugins register) is
    asked only then. A value from the call or the file, or one that names no choice or
    several, is kept as given (and refused where it is checked)."""
    value, source = setting
    if source not in _SETTING_VARIABLE_NAMES or not isinstance(value, str):
        return setting
    known = list(choices())
    if value in known:
        return setting
    named = [choice for choice in known if choice.casefold() == value.casefold()]
    return (named[0], source) if len(named) == 1 else setting


def _setting_from_env(name: str, variable: str, file: Mapping[str, Any]) -> Any:
    """The value ``variable`` gives setting ``name``, or None where it gives none."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    if name == "strict":
        if text.lower() in _ON | _OFF:
            return text.lower() in _ON
        raise ConfigurationError(
            f"{variable}={text!r} is neither on (1, true, yes, on) nor off (0, false, no, off)"
        )
    if name == "traces":
        return text.lower() != "none"
    if name == "unknown_keys":
        if text.lower() in UNKNOWN_KEYS_MODES:
            return text.lower()
        raise ConfigurationError(
            f"{variable}={text!r} is not one of {', '.join(map(repr, UNKNOWN_KEYS_MODES))}"
            f"{suggest(text.lower(), UNKNOWN_KEYS_MODES)}"
        )
    if name in ("plugins", "disable_plugins"):
        return [part.strip() for part in text.split(",") if part.strip()]
    if name == "export_interval_s":
        if name not in file:
            return None
        try:
            milliseconds = float(text)
        except ValueError:
            milliseconds = -1.0
        if not (math.isfinite(milliseconds) and milliseconds > 0):
            raise ConfigurationError(
                f"{variable}={text!r} must be a positive number of milliseconds"
            )
        return milliseconds / 1000.0
    return text


def configured(
    exporter_names: Iterable[str] | Mapping[str, Any] | None = None,
    backend_names: Iterable[str] | Mapping[str, Any] | None = None,
    exporters_chosen: Iterable[str] = (),
    backends_chosen: Iterable[str] = (),
) -> Configured:
    """What the configuration file (``RLMETRICS_CONFIG``) and the environment say, the
    environment winning: ``RLMETRICS_EXPORTERS`` / ``RLMETRICS_BACKENDS`` replace the file's
    choice, ``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` / ``RLMETRICS_BACKEND_<NAME>_<OPTION>`` one
    option each, :data:`SETTING_VARIABLES` a setting each. ``exporter_names`` and
    ``backend_names`` are the ones available, which a choice and an option variable must
    name; given as ``{name: (plugin, factory)}``, each chosen one's options are checked
    against its factory too (:func:`check_options`). Without them, that kind's variables are
    not read (the file's choice is given as it is). ``exporters_chosen`` and
    ``backends_chosen`` are the names the call chose: an option variable of one of them
    configures it (a call's choice is one as much as ``RLMETRICS_EXPORTERS`` is)."""
    # ``~`` as a shell would take it: a container's ENV or a launcher's env table does not.
    path = os.path.expanduser(os.environ.get(CONFIG_ENV, "").strip())
    base = read_file(path) if path else Configured()
    tables: dict[str, dict[str, tuple[Any, str]]] = {
        "telemetry": dict(base.telemetry),
        "logger": dict(base.logger),
    }
    for table, variables in SETTING_VARIABLES.items():
        for name, variable in variables.items():
            value = _setting_from_env(name, variable, tables[table])
            if value is not None:
                tables[table][name] = (value, variable)
    exporters, exporters_source = _with_environment(
        "exporter",
        EXPORTERS_ENV,
        EXPORTER_OPTION_ENV,
        exporter_names,
        base.exporters,
        base.exporters_source,
        ("export_interval_s",),
        None,
        frozenset(exporters_chosen),
    )
    backends, backends_source = _with_environment(
        "backend",
        BACKENDS_ENV,
        BACKEND_OPTION_ENV,
        backend_names,
        base.backends,
        base.backends_source,
        ("identity",),
        "jsonl",
        frozenset(backends_chosen),
    )
    return Configured(
        tables["telemetry"],
        tables["logger"],
        exporters,
        exporters_source,
        backends,
        backends_source,
    )


def _with_environment(
    kind: str,
    chooser: str,
    prefix: str,
    names: Iterable[str] | Mapping[str, Any] | None,
    table: dict[str, dict[str, tuple[Any, str]]] | None,
    source: str | None,
    provided: Iterable[str],
    default: str | None,
    call_chose: frozenset[str] = frozenset(),
) -> tuple[dict[str, dict[str, tuple[Any, str]]] | None, str | None]:
    """The file's choice of ``kind`` with the environment's over it, every name and option
    checked where it was read (``default``: the one used when nothing chose any, which an
    option variable may configure alone; ``call_chose``: the names the call chose, whose
    option variables configure them whatever the file and ``chooser`` chose)."""
    if names is None:
        return table, source
    factories = dict(names) if isinstance(names, Mapping) else {n: None for n in names}
    hint = f"A{'n' if kind[0] in 'aeiou' else ''} {kind} comes from a plugin (`rlmetrics plugins`)"
    if table is not None:
        check_names(kind, table, factories, source, hint)
    chosen = _chosen_by_env(chooser)
    if chosen is not None:
        check_names(kind, chosen, factories, chooser, hint)
        table = {name: dict((table or {}).get(name, {})) for name in chosen}
        source = chooser
    options = _option_variables(prefix, kind, factories)
    for name, given in options.items():
        _as_text_where_taken(factories.get(name), given)
        _check(kind, name, factories.get(name), given, provided)  # the misspelling first
        if table is None and name == default:
            table, source = {name: {}}, next(iter(given.values()))[1]
        if name in call_chose and (table is None or name not in table):
            table = {} if table is None else table
            table[name] = {}
        if table is None or name not in table:
            variable = next(iter(given.values()))[1]
            raise ConfigurationError(
                f"{variable} configures {kind} {name!r}, which is not chosen: name it in "
                f"{chooser} or in the call's {kind}s= (or give it a [{kind}s.{name}] table in "
                "the configuration file)"
            )
        table[name].update(given)
    for name, found in (table or {}).items():
        _check(kind, name, factories.get(name), found, provided)
        _yield_to_variables(factories.get(name), found, prefix)
        _under_home(factories.get(name), found)
    return table, source


def _as_text_where_taken(factory: Any, given: dict[str, tuple[Any, str]]) -> None:
    """A path option's variable that reads as TOML (``123``, ``2024-01-01``, ``true``) is its
    text: ``RLMETRICS_BACKEND_JSONL_PATH=123`` is the file ``123`` (a path needs no quotes,
    and any text is one). Other text options keep the check (an endpoint of ``4317`` is a
    port left without its host, a mistake)."""
    if isinstance(factory, tuple) and len(factory) == 2:
        factory = factory[1]
    kinds = declared_options(factory)
    for option, (value, variable) in list(given.items()):
        kind, text = kinds.get(option), os.environ.get(variable)
        if kind is None or kind.what != PATH.what or text is None or isinstance(value, str):
            continue
        if kind.problem(value) is not None:
            given[option] = (text.strip(), variable)


def _under_home(factory: Any, found: dict[str, tuple[Any, str]]) -> None:
    """A path option the file or a variable gives with a leading ``~`` (``~/runs``) under the
    home folder, as a shell would have put it: nothing expands it there (TOML, a container's
    ``ENV``), and the run wrote into a folder named ``~`` in the working directory."""
    if isinstance(factory, tuple) and len(factory) == 2:
        factory = factory[1]
    for option, kind in declared_options(factory).items():
        value, source = found.get(option, (None, ""))
        if kind.what == PATH.what and isinstance(value, str) and value.startswith("~"):
            found[option] = (os.path.expanduser(value), source)


def _yield_to_variables(factory: Any, found: dict[str, tuple[Any, str]], prefix: str) -> None:
    """Drop each option the configuration file gives whose factory reads a variable that is
    set (``OTEL_EXPORTER_OTLP_ENDPOINT`` over ``[exporters.otlp] endpoint``): the environment
    wins over the file."""
    if isinstance(factory, tuple) and len(factory) == 2:
        factory = factory[1]
    for option, kind in declared_options(factory).items():
        from_file = option in found and not found[option][1].startswith(prefix)
        if from_file and any(os.environ.get(v, "").strip() for v in kind.variables):
            del found[option]


def _check(
    kind: str,
    name: str,
    factory: Any,
    found: Mapping[str, tuple[Any, str]],
    provided: Iterable[str],
) -> None:
    """:func:`check_options` of configured options ``{option: (value, source)}``."""
    plugin_and_factory = factory
    if isinstance(plugin_and_factory, tuple) and len(plugin_and_factory) == 2:
        factory = plugin_and_factory[1]
    if not callable(factory):
        return
    check_options(
        kind,
        name,
        factory,
        {option: value for option, (value, _src) in found.items()},
        provided,
        {option: src for option, (_value, src) in found.items()},
    )


def setting(settings: Mapping[str, tuple[Any, str]], name: str, given: Any, default: Any) -> Any:
    """A call's argument ``given`` when it gave one (anything but None, the "not given" of
    every argument configuration can give), else the configured value, else ``default``."""
    if given is not None:
        return given
    if name in settings:
        return settings[name][0]
    return default


#: Where a resolved setting came from when neither a variable nor the file gave it.
CALL = "the call"
DEFAULT = "default"


def resolve(
    settings: Mapping[str, tuple[Any, str]], given: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, tuple[Any, str]]:
    """Each setting of ``defaults`` as ``(value, source)``: the call's (``given``, None
    meaning not given), else the configured one (``settings``: the environment's over the
    file's, each with its source), else the default."""
    resolved: dict[str, tuple[Any, str]] = {}
    for name, default in defaults.items():
        value = given.get(name)
        if value is not None:
            resolved[name] = (value, CALL)
        elif name in settings:
            resolved[name] = settings[name]
        else:
            resolved[name] = (default, DEFAULT)
    return resolved


def source_of(settings: Mapping[str, tuple[Any, str]], name: str, given: Any) -> str | None:
    """Where the value :func:`setting` chose came from: None for the call's or the default."""
    if given is not None or name not in settings:
        return None
    return settings[name][1]


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
    return check_options(what, name, factory, options, provided, sources)
