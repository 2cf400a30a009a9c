"""Lint every declared series the way a reviewer of an OpenTelemetry schema would: name syntax
and namespace, UCUM units, the unit not repeated in the name, no _total on OpenTelemetry
names (Prometheus adds it to counters), histogram buckets present and strictly increasing,
open attributes that look unbounded (ids, steps, paths, free text) or belong on the resource,
one name declared twice (also once translated to Prometheus), plugins that failed to load,
and every key map offered (its series declared and recordable, its categories known, no two
keys on one series).

One line per finding, naming the plugin and the series; exit status 1 when any is an error.
Departures a family's specification fixes (Gym's _ms and _total names) are declared by that
family (the register_check_exemptions hook) and listed as exempt with --json."""

from __future__ import annotations

import argparse
import sys

from ..check import ERROR, check_plugins
from ..plugins import load_plugins, normalize
from ..registry import default_registry
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "check"
HELP = "lint every declared series (names, units, buckets, attributes); non-zero on errors"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        metavar="NAME",
        help="check only this plugin (its entry-point or distribution name)",
    )
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    plugins = load_plugins()
    if args.plugin is not None:
        wanted = normalize(args.plugin)
        if not any(
            wanted in (normalize(info.name), normalize(info.distribution or ""))
            for info in plugins.infos
        ):
            sys.stderr.write(
                f"rlmetrics check: no plugin named {args.plugin!r} (see rlmetrics plugins)\n"
            )
            return 2
    result = check_plugins(plugins, default_registry().declared(), only=args.plugin)
    if args.json:
        print_json(result.as_dict())
    else:
        for finding in result.findings:
            sys.stdout.write(finding.line() + "\n")
        sys.stdout.write(
            f"{len(result.checked)} series checked: {result.errors} errors, "
            f"{result.warnings} warnings, {len(result.exempt)} exempt; "
            f"{len(result.key_maps)} key maps checked\n"
        )
    return 1 if any(f.severity == ERROR for f in result.findings) else 0
