"""List every plugin: the entry points of the ``rlmetrics`` group (built-ins included) and
the plugins registered from code, with what became of each — loaded (with its hooks and the
series it declares), failed or disabled (with the reason) — and every backend, exporter,
demo part or key map a plugin offers under a name another plugin's offer won (shadowed)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..hooks import collect_offers
from ..keymaps import available_key_maps
from ..plugins import FAILED, LOADED, PluginInfo, load_plugins
from ._output import add_format_options, print_json, print_table

__all__ = ["HELP", "NAME", "add_arguments", "print_failures", "run"]

NAME = "plugins"
HELP = "list plugins, their status, hooks and declared series"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="after the table, each failed plugin's whole reason and its traceback",
    )
    add_format_options(parser)


def _detail(info: PluginInfo) -> str:
    if info.status != LOADED:
        return info.summary or ""
    parts = []
    if info.hooks:
        parts.append("hooks: " + ", ".join(info.hooks))
    declared = []
    if info.series:
        declared.append(f"{len(info.series)} series")
    if info.keys:  # keys it makes known (declare_keys): its whole effect, for some plugins
        declared.append(f"{len(info.keys)} known key pattern{'s' if len(info.keys) > 1 else ''}")
    if declared:
        parts.append("declares " + " and ".join(declared))
    return "; ".join(parts) or "no hooks, no series"


def run(args: argparse.Namespace) -> int:
    plugins = load_plugins(quiet=True)  # the table says what failed; --verbose says why
    # What each plugin offers by name, so an offer another plugin's won is listed (shadowed).
    for what, hook in (
        ("backend", plugins.hooks.register_backends),
        ("exporter", plugins.hooks.register_exporters),
        ("demo part", plugins.hooks.register_demo_parts),
    ):
        collect_offers(what, hook, plugins)
    available_key_maps(plugins)  # a key map named like another plugin's is offered by name too
    infos = sorted(plugins.infos, key=lambda i: (i.name, i.distribution or ""))
    if args.json:
        print_json([info.as_dict() for info in infos])
        return 0
    print_table(
        ("NAME", "STATUS", "DISTRIBUTION", "DETAIL"),
        [
            (
                info.name,
                info.status,
                f"{info.distribution} {info.version}" if info.distribution else "(in process)",
                _detail(info),
            )
            for info in infos
        ],
    )
    print_failures(infos, args.verbose)
    return 0


def print_failures(infos: Sequence[PluginInfo], verbose: bool) -> None:
    """Under a listing: how to see why plugins failed, or (``verbose``) each one's whole
    reason and traceback, once."""
    failed = [info for info in infos if info.status == FAILED]
    if not failed:
        return
    if not verbose:
        sys.stdout.write(
            f"\n{len(failed)} plugin(s) failed to load; --verbose shows each reason in full "
            "and its traceback\n"
        )
        return
    for info in failed:
        origin = f"{info.distribution} {info.version}" if info.distribution else "in process"
        sys.stdout.write(f"\n{info.name} ({origin}): {info.reason}\n")
        if info.traceback:
            sys.stdout.write(info.traceback.rstrip() + "\n")
