"""The host-memory dashboard row: every Ray host's memory, by ``host.name``.

One point per host per cycle, so ``max by (host_name)`` reads a host without double counting;
``rl.worker_groups`` is a descriptor to pick hosts with, never a key to sum on (the value is the
whole host's memory, shared by every group on it).
"""

from __future__ import annotations

from collections.abc import Callable

import rlmetrics
from rlmetrics.dashboard.model import Panel, Query, Row, Variable
from rlmetrics.dashboard.promql import Names, for_run

__all__ = ["host_memory_row", "register_dashboard_rows"]

_USED, _TOTAL = "rl.host.memory.used", "rl.host.memory.total"


def host_memory_row(names: Names) -> Row:
    host = names.label("host.name")
    used = for_run(f'{names.gauge(_USED)}{{{host}=~"$host"}}')
    total = for_run(f'{names.gauge(_TOTAL)}{{{host}=~"$host"}}')
    return Row(
        "Host memory",
        [
            Panel(
                "Memory in use by host",
                [
                    Query(f"max by ({host}) ({used})", f"{{{{{host}}}}} used"),
                    Query(f"max by ({host}) ({total})", f"{{{{{host}}}}} total"),
                ],
                reads=[_USED, _TOTAL],
                description="From each host's raylet; the object store, the raylet and the "
                "driver are in the number. A gap is a failed scrape, not a zero.",
                unit="bytes",
                width=16,
            ),
            Panel(
                "Memory in use (% of total)",
                [Query(f"100 * max by ({host}) ({used}) / max by ({host}) ({total})",
                       f"{{{{{host}}}}}")],
                reads=[_USED, _TOTAL],
                type="gauge",
                unit="percent",
                thresholds=[(70, "orange"), (90, "red")],
                width=8,
            ),
        ],
        order=60,
        variables=[Variable("host", host, names.gauge(_USED), "Host")],
    )


@rlmetrics.hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row]], None]) -> None:
    register(host_memory_row)
