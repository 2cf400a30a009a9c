"""``rlmetrics``: the command line. One module per command, each with ``add_arguments`` and
``run``; every listing has ``--json``.

rlmetrics plugins     every entry point, its status, hooks and declared series
rlmetrics metrics     every declared series (docs/metrics.md is its ``--markdown``)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from .._version import __version__
from . import metrics, plugins

__all__ = ["COMMANDS", "main"]

#: The subcommands, in the order ``--help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (plugins, metrics)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="rlmetrics",
        description="Telemetry for RL post-training loops: inspect the installed plugins and "
        "the series they declare.",
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
