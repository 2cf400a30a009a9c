"""Show the configuration given without code — the file RLMETRICS_CONFIG names and the
RLMETRICS_* variables — and where each value comes from, checked as rlmetrics.start() and
Logger() check it: an unknown table, setting, exporter, backend or option, a value of the wrong
type or a variable that does nothing is one line and exit status 2. Run it before a long job.
The settings a call passes in code win over these (docs/configuration.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from ..configuration import check_configured_options, choose, configured
from ..plugins import load_plugins
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "config"
HELP = "show and check the configuration from RLMETRICS_CONFIG and the RLMETRICS_* variables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    from ..backends import available_backends
    from ..exporters import available_exporters

    plugins = load_plugins(quiet=True)
    exporters = available_exporters(plugins)
    backends = available_backends(plugins)
    try:
        found = configured(exporter_names=exporters, backend_names=backends)
        for kind, table, offered, provided in (
            ("exporter", found.exporters, exporters, ("export_interval_s",)),
            ("backend", found.backends, backends, ("identity",)),
        ):
            chosen, sources = choose(kind, None, table)
            unknown = sorted(set(chosen or ()) - set(offered))
            if unknown:
                raise ValueError(f"unknown {kind}(s) {unknown}; available: {sorted(offered)}")
            for name, options in (chosen or {}).items():
                check_configured_options(
                    kind, name, offered[name][1], options, sources[name], provided
                )
    except (TypeError, ValueError) as exc:
        sys.stderr.write(f"rlmetrics config: {exc}\n")
        return 2
    document = found.as_dict()
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
            continue
        lines.append(f"{kind}: {', '.join(chosen['options']) or 'none'}  ({chosen['from']})")
        for name, options in chosen["options"].items():
            for key, setting in options.items():
                lines.append(f"  {name}.{key} = {setting['value']!r}  ({setting['from']})")
    if not lines:
        lines.append("nothing is configured without code (RLMETRICS_CONFIG, RLMETRICS_*)")
    return "\n".join(lines) + "\n"
