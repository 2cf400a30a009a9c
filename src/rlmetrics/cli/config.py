"""Show the configuration given without code — the file RLMETRICS_CONFIG names and the
RLMETRICS_* / OTEL_* variables — every setting's value beside where it comes from, checked as
rlmetrics.start() and Logger() check it: an unknown table, setting, exporter, backend, option,
key map or plugin name, a value of the wrong type, a variable that does nothing or an
OpenTelemetry SDK variable start() refuses is one line naming its source, and exit status 2.
Run it before a long job. The settings a call passes in code win over these
(docs/configuration.md). An option variable of an exporter or backend nothing here chooses is
checked and shown apart: the call may choose it (``start(exporters=["prometheus"])`` with
``RLMETRICS_EXPORTER_PROMETHEUS_PORT``), which this command cannot see."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from ..configuration import (
    BACKEND_OPTION_ENV,
    CALL,
    DEFAULT,
    EXPORTER_OPTION_ENV,
    ConfigurationError,
    Configured,
    check_plugin_names,
    configured,
    from_source,
    in_any_case,
    resolve,
)
from ..identity import RESUME_ID_SOURCES, launcher_run_id
from ..plugins import check_overrides, installed_names, load_plugins
from ..variables import variable_problems
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "check", "run"]

NAME = "config"
HELP = "show and check the configuration from RLMETRICS_CONFIG and the RLMETRICS_* variables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_format_options(parser)


#: An exporter's or backend's options a call's choice takes: ``{kind: {name: {option: (value,
#: variable)}}}``.
IfChosen = dict[str, dict[str, dict[str, tuple[Any, str]]]]


def check() -> tuple[Configured, dict[str, dict[str, tuple[Any, str]]], IfChosen]:
    """What is configured, each ``start()`` / ``Logger()`` setting as ``(value, source)``
    when a call gives none of them, and the option variables of exporters and backends only a
    call can choose; raises what ``start()`` or ``Logger()`` would."""
    from ..backends import available_backends
    from ..exporters import available_exporters
    from ..keymaps import available_key_maps, resolve_key_map
    from ..logger import SETTING_DEFAULTS as LOGGER_DEFAULTS
    from ..logger import _with_the_runs_identity
    from ..telemetry import SETTING_DEFAULTS as TELEMETRY_DEFAULTS
    from ..telemetry import check_naming
    from ..tracing import naming as _naming

    plugins = load_plugins(quiet=True)
    exporters = available_exporters(plugins)
    backends = available_backends(plugins)
    # Names, options and their types, each checked where it is read (configured() raises),
    # as for a call that chose every exporter and backend: an option variable of one that
    # nothing here chooses configures what the call chooses, and only the call is refused.
    found = configured(
        exporter_names=exporters,
        backend_names=backends,
        exporters_chosen=exporters,
        backends_chosen=backends,
    )
    found, if_chosen = _chosen_by_the_call_only(found, exporters, backends)
    settings = {
        "telemetry": resolve(found.telemetry, {}, TELEMETRY_DEFAULTS),
        # A Logger made before start() takes the file's [telemetry] run_id and resume where
        # [logger] gives none: show the id its rows will carry.
        "logger": resolve(
            _with_the_runs_identity(found.logger, found.telemetry), {}, LOGGER_DEFAULTS
        ),
    }
    telemetry, logger = settings["telemetry"], settings["logger"]
    for table in (telemetry, logger):
        if table["run_id"] == (None, DEFAULT) and (launched := launcher_run_id()) is not None:
            table["run_id"] = launched  # what start() and Logger() name the run by
    for name in ("plugins", "disable_plugins"):
        names, source = telemetry[name]
        if names is not None and source not in (CALL, DEFAULT):
            check_plugin_names(names, source, installed_names())
    check_overrides()
    telemetry["naming"] = in_any_case(telemetry["naming"], _naming.names)
    check_naming(*telemetry["naming"])
    logger["key_map"] = in_any_case(logger["key_map"], lambda: available_key_maps(plugins))
    key_map, source = logger["key_map"]
    if key_map is not None:
        try:
            resolve_key_map(key_map)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{exc}{from_source(source)}") from None
    # torchrun's id names no run to continue (a relaunch makes a new one), as in start().
    unnamed = telemetry["run_id"][1] in (DEFAULT, "TORCHELASTIC_RUN_ID")
    if telemetry["resume"][0] and unnamed:
        raise ConfigurationError(
            f"resume = true continues the run its id names, and no run_id is configured "
            f"(nor {RESUME_ID_SOURCES}){from_source(telemetry['resume'][1])}"
        )
    # The variables the Prometheus exporter reads itself when the configuration gives no
    # value: checked even where no configuration names the exporter, since the code may
    # (the quickstart's start(exporters=["prometheus"])), and start() then refuses them.
    from ..exporters.prometheus import port_from_env
    from ..health import stall_after_s
    from ..telemetry import TelemetryError

    options = (found.exporters or {}).get("prometheus") or {}
    try:
        if "port" not in options:
            port_from_env()
        if "stall_after_s" not in options:
            stall_after_s()
    except TelemetryError as exc:
        raise ConfigurationError(str(exc)) from None
    # The SDK's own variables, which start() checks where the exporters read them.
    from .._providers import check_sdk_variables

    check_sdk_variables()
    # The RLMETRICS_* variables nothing reads (start() says them), and plugins' wrong values.
    problems = variable_problems(os.environ, plugins)
    if problems:
        raise ConfigurationError("\n".join(problems))
    return found, settings, if_chosen


def _chosen_by_the_call_only(
    found: Configured, exporters: Mapping[str, Any], backends: Mapping[str, Any]
) -> tuple[Configured, IfChosen]:
    """``found`` (read as if the call chose every name) without each exporter and backend
    that only option variables name and nothing here chooses — ``configured()`` refuses it
    when the call's choice lacks it —, and those by kind."""
    if_chosen: IfChosen = {"exporters": {}, "backends": {}}
    for kind, prefix, names in (
        ("exporters", EXPORTER_OPTION_ENV, exporters),
        ("backends", BACKEND_OPTION_ENV, backends),
    ):
        table = getattr(found, kind)
        for name, options in list((table or {}).items()):
            if not any(source.startswith(prefix) for _, source in options.values()):
                continue
            chosen = {
                "exporters_chosen": exporters,
                "backends_chosen": backends,
                f"{kind}_chosen": [n for n in names if n != name],
            }
            try:
                configured(exporter_names=exporters, backend_names=backends, **chosen)
            except ConfigurationError:
                if_chosen[kind][name] = table.pop(name)
        if table == {} and getattr(found, f"{kind}_source") is None:
            nothing: dict[str, Any] = {kind: None}
            found = attrs.evolve(found, **nothing)
    return found, if_chosen


def run(args: argparse.Namespace) -> int:
    try:
        found, settings, if_chosen = check()
    except (TypeError, ValueError) as exc:
        sys.stderr.writelines(f"rlmetrics config: {line}\n" for line in str(exc).splitlines())
        return 2
    document = found.as_dict()
    for table in ("telemetry", "logger"):
        document[table] = {
            name: {"value": value, "from": source}
            for name, (value, source) in settings[table].items()
        }
    document["if_the_call_chooses"] = {
        kind: {
            name: {key: {"value": v, "from": src} for key, (v, src) in options.items()}
            for name, options in names.items()
        }
        for kind, names in if_chosen.items()
    }
    if args.json:
        print_json(document)
        return 0
    sys.stdout.write(_text(document))
    return 0


def _text(document: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for table in ("telemetry", "logger"):
        for key, setting in document[table].items():
            lines.append(f"{table}.{key} = {setting['value']!r}  ({setting['from']})")
    for kind in ("exporters", "backends"):
        chosen = document[kind]
        if chosen is None:
            lines.append(f"{kind}: none configured (the call's, or the default)")
        else:
            lines.append(f"{kind}: {', '.join(chosen['options']) or 'none'}  ({chosen['from']})")
            for name, options in chosen["options"].items():
                for key, setting in options.items():
                    lines.append(f"  {name}.{key} = {setting['value']!r}  ({setting['from']})")
        call = "start()" if kind == "exporters" else "Logger()"
        for name, options in document["if_the_call_chooses"][kind].items():
            for key, setting in options.items():
                lines.append(
                    f"  {name}.{key} = {setting['value']!r}  ({setting['from']}; only where "
                    f"the call chooses {kind[:-1]} {name!r}, which {call} otherwise refuses)"
                )
    return "\n".join(lines) + "\n"
