"""rlmetrics mcp [--root DIR]

An MCP server on stdio whose tools answer about the runs under DIR (default: the current
folder), read-only: ``list_runs``, ``run_state`` (what ``rlmetrics query`` prints) and
``run_field``. Give it to an agent as a stdio server: ``{"command": "rlmetrics", "args":
["mcp", "--root", "/path/to/runs"]}``. Needs ``pip install 'rlmetrics[mcp]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "mcp"
HELP = "an MCP server (stdio) answering about the runs in a folder, read-only"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="the folder of the runs (default: here)"
    )


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        sys.stderr.write("rlmetrics mcp: needs the MCP SDK: pip install 'rlmetrics[mcp]'\n")
        return 2
    if not args.root.is_dir():
        sys.stderr.write(f"rlmetrics mcp: {args.root} is not a folder\n")
        return 2
    from ..mcp_server import serve

    serve(args.root)
    return 0
