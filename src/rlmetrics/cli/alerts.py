"""Write the Prometheus alerting rules generated from the declared series of every installed
plugin: the run stalled (no step for N times its median step interval), an rlmetrics endpoint
down, an exporter failing, a backend dropping or failing rows, and each installed family's own
(vLLM engine restarts, host and GPU memory near their limit, Gym health verdicts flagged, event
loop lag). Load the file with Prometheus' rule_files (rlmetrics stack does); what each alert
means and what to do is in docs/operations.md.

--tests DIR writes DIR/rules.yml and DIR/tests.yml: every rule's own examples, firing and
quiet (at the default thresholds), for `promtool test rules DIR/tests.yml`.

Nothing is written when something is wrong: a threshold no rule has (--set stall.factr=5) is a
mistake in the command (exit status 2), a plugin whose rules could not be built is named
(exit status 1); a rules file without that plugin's rules, or without the threshold asked
for, would look complete and not be."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._yaml import render_yaml
from ..alerts.model import AlertSettings, duration, parse_seconds
from ..alerts.recording import recording_rules_yaml
from ..alerts.rules import collect_rules, promtool_tests, rule_groups, rules_yaml
from ..registry import default_registry
from ..report.destinations import NotWritten, file_problem, folder_problem, write_all
from ._output import add_format_options, print_json, print_table

__all__ = ["HELP", "NAME", "add_arguments", "parse_duration", "run", "settings_from"]

NAME = "alerts"
HELP = "write the Prometheus alerting rules (stall, endpoint down, exporter/backend failures…)"


def parse_duration(text: str) -> float:
    """A duration option (``30s``, ``5m``, ``7d`` or seconds) as seconds."""
    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _setting(text: str) -> tuple[str, float]:
    name, equals, value = text.partition("=")
    try:
        if not equals:
            raise ValueError
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a threshold as NAME=NUMBER (see rlmetrics alerts --list)"
        ) from None


def add_settings(parser: argparse.ArgumentParser) -> None:
    """``--for`` and ``--set``, shared with ``rlmetrics stack``."""
    parser.add_argument(
        "--for",
        dest="for_s",
        type=parse_duration,
        metavar="DURATION",
        help="replace every rule's own `for:` (e.g. 5s, for a demo or a test)",
    )
    parser.add_argument(
        "--set",
        dest="thresholds",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a threshold (repeatable; `rlmetrics alerts --list` shows them with their defaults)",
    )


def settings_from(args: argparse.Namespace) -> AlertSettings:
    """The alert settings ``--set`` and ``--for`` gave; ``ValueError`` names a threshold out
    of its range (:func:`~rlmetrics.alerts.model.threshold_problem`)."""
    return AlertSettings(thresholds=dict(args.thresholds), for_s=args.for_s)


def _destination_problem(
    args: argparse.Namespace, files: list[tuple[str, Path, str]]
) -> str | None:
    """The first place of ``files`` (``(option, path, text)``) nothing can be written."""
    if args.tests is not None and (problem := folder_problem(args.tests)) is not None:
        return f"--tests {problem}"
    for option, path, _text in files:
        if (problem := file_problem(path, create_folders=True)) is not None:
            return f"{option} {problem}"
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write the rules here, not to stdout"
    )
    parser.add_argument(
        "--tests",
        type=Path,
        metavar="DIR",
        help="also write DIR/rules.yml and DIR/tests.yml for `promtool test rules`",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the alerts and thresholds instead"
    )
    parser.add_argument(
        "--recording-rules",
        type=Path,
        metavar="FILE",
        help="also write the recording rules that merge ranks at query time, one per declared "
        "series and its reduction, for runs where every rank exports (docs/ranks.md)",
    )
    add_settings(parser)
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except ValueError as exc:  # a threshold out of its range: the command's mistake
        sys.stderr.write(f"rlmetrics alerts: --set {exc}\n")
        return 2
    rules, problems, context = collect_rules(settings)
    for problem in problems:
        sys.stderr.write(f"rlmetrics alerts: {problem.builder}: {problem.reason}\n")
    # A threshold no rule asked for is the command's mistake (exit 2, as every command's usage
    # errors); a builder that failed is a plugin's (exit 1). Either way, nothing is written.
    status = 2 if set(settings.thresholds) - set(context.thresholds) else 1 if problems else 0
    if args.list or args.json:
        thresholds = sorted(context.thresholds.values(), key=lambda t: t.name)
        if args.json:
            print_json(
                {
                    "alerts": [
                        {
                            "name": r.name,
                            "group": r.group,
                            "severity": r.severity,
                            "for": duration(r.for_s),
                            "expr": r.expr,
                            "summary": r.summary,
                            "runbook": r.runbook,
                            "reads": list(r.reads),
                        }
                        for r in rules
                    ],
                    "thresholds": [
                        {
                            "name": t.name,
                            "default": t.default,
                            "value": t.value,
                            "description": t.description,
                        }
                        for t in thresholds
                    ],
                    "problems": [{"builder": p.builder, "reason": p.reason} for p in problems],
                }
            )
        else:
            print_table(
                ["alert", "group", "severity", "for", "summary"],
                [[r.name, r.group, r.severity, duration(r.for_s), r.summary] for r in rules],
            )
            sys.stdout.write("\n")
            print_table(
                ["threshold", "value", "default", "meaning"],
                [[t.name, f"{t.value:g}", f"{t.default:g}", t.description] for t in thresholds],
            )
        return status
    if problems:
        sys.stderr.write("rlmetrics alerts: nothing written\n")
        return status
    # Every file is rendered and every place checked before one is written: a place nothing
    # can be written (a folder named for a file, a path under a file, a folder that cannot
    # be created) leaves no rules file behind that looks like the whole result.
    text = rules_yaml(rules)
    files: list[tuple[str, Path, str]] = []
    if args.recording_rules is not None:
        specs = [item.spec for item in default_registry().declared()]
        files.append(("--recording-rules", args.recording_rules, recording_rules_yaml(specs)))
    if args.output is not None:
        files.append(("-o", args.output, text))
    if args.tests is not None:
        # The examples are written for the default thresholds and `for:` durations.
        tested = collect_rules()[0] if (args.thresholds or args.for_s is not None) else rules
        rules_text = render_yaml(rule_groups(tested, annotations=False))
        files.append(("--tests", args.tests / "rules.yml", rules_text))
        files.append(("--tests", args.tests / "tests.yml", promtool_tests(tested, "rules.yml")))
    refused = _destination_problem(args, files)
    if refused is None:
        try:
            folders = [] if args.tests is None else [args.tests]
            write_all([(path, body) for _option, path, body in files], folders)
        except NotWritten as exc:
            refused = str(exc)
    if refused is not None:
        sys.stderr.write(f"rlmetrics alerts: {refused}; nothing written\n")
        return 2
    if args.recording_rules is not None:
        sys.stderr.write(f"recording rules written to {args.recording_rules}\n")
    if args.output is not None:
        sys.stderr.write(f"{len(rules)} alerting rules written to {args.output}\n")
    else:
        sys.stdout.write(text)
    if args.tests is not None:
        sys.stderr.write(f"promtool tests written: promtool test rules {args.tests}/tests.yml\n")
    return 0
