"""``rlmetrics``: the command line. One module per command, each with ``add_arguments`` and
``run``; every listing has ``--json``.

rlmetrics demo        a simulated GRPO run end to end: JSONL, Prometheus endpoint, report
rlmetrics report      a run's JSONL summarised (goodput, setup, trends, vLLM, checkpoints)
rlmetrics query       a run's state as JSON for an agent or a script (exit 1 on a finding)
rlmetrics mcp         the same answers as MCP tools over stdio, read-only
rlmetrics check       every declared series linted; non-zero exit on errors
rlmetrics dashboard   the Grafana dashboard (docs/grafana/rlmetrics.json is its output)
rlmetrics alerts      the Prometheus alerting rules (stall, endpoint down, lost rows…)
rlmetrics stack       a local Prometheus scraping the run, Gym, vLLM and Ray, with the rules
rlmetrics config      the configuration from RLMETRICS_CONFIG and the variables, checked
rlmetrics plugins     every entry point, its status, hooks and declared series
rlmetrics metrics     every declared series (docs/metrics.md is its ``--markdown``)
rlmetrics docs        the metric tables marked in docs pages, regenerated
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .._version import __version__
from . import (
    alerts,
    check,
    config,
    dashboard,
    demo,
    docs,
    mcp,
    metrics,
    plugins,
    query,
    report,
    stack,
)

__all__ = ["COMMANDS", "main"]

#: The subcommands, in the order ``--help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (
    demo,
    report,
    query,
    mcp,
    check,
    dashboard,
    alerts,
    stack,
    config,
    plugins,
    metrics,
    docs,
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="rlmetrics",
        description="Telemetry for RL post-training loops: run the demo, report on a run, "
        "lint and list the series the installed plugins declare.",
    )
    top.add_argument("--version", action="version", version=f"rlmetrics {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return top


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's arguments. An argument the command does not take is said by the
    command (its usage, its name) with the nearest option it has, not by the top parser,
    which knows none of the command's options."""
    top = parser()
    args, extra = top.parse_known_args(argv)
    if extra:
        commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        command: argparse.ArgumentParser = commands.choices[args.command]
        options = [o for action in command._actions for o in action.option_strings]
        near = [
            match
            for given in extra
            if given.startswith("--")
            for match in difflib.get_close_matches(
                given.split("=", 1)[0], options, n=1, cutoff=0.75
            )
        ]
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        status: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``rlmetrics plugins --json | head -1``): what it wanted was
        # written. Point stdout at /dev/null so the interpreter's final flush stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return status


if __name__ == "__main__":
    raise SystemExit(main())
