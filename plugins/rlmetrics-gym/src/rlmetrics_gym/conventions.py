"""The names NeMo Gym's metrics specification fixes, declared as exemptions from
``rlmetrics check`` (the ``register_check_exemptions`` hook).

Gym's own conventions: "durations in milliseconds with a ``_ms`` suffix, counters with a
``_total`` suffix", plus ``gym.driver.output_write_bytes``. In Prometheus a ``_ms`` histogram is
exposed as ``*_milliseconds_bucket`` (rlmetrics' exporter says the unit once) and a ``*_total``
counter keeps its name. Server memory
points carry the *sampled* server tree's root ``process.pid`` (not the emitting process's), as
the specification prescribes. The exemptions are derived from what this distribution declares,
so a new Gym series that follows the conventions needs no edit here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import rlmetrics
from rlmetrics import MetricSpec
from rlmetrics.check import Exemption

__all__ = ["exemptions", "register_check_exemptions"]

_SPEC = "the NeMo Gym metrics specification fixes this name"
_PACKAGE = __name__.rpartition(".")[0]


def _gym_specs() -> list[MetricSpec]:
    return [
        item.spec
        for item in rlmetrics.default_registry().declared()
        if item.owner == _PACKAGE or item.owner.startswith(_PACKAGE + ".")
    ]


def exemptions(specs: Iterable[MetricSpec]) -> list[Exemption]:
    """The exemptions Gym's conventions call for among ``specs``."""
    specs = list(specs)
    unit_in_name = {
        s.name
        for s in specs
        if (s.unit == "ms" and s.name.endswith("_ms")) or s.name == "gym.driver.output_write_bytes"
    }
    totals = {s.name for s in specs if s.kind.monotonic and s.name.endswith("_total")}
    pid = {s.name for s in specs if any(key == "process.pid" for key, _ in s.attributes)}
    found = []
    if unit_in_name:
        found.append(Exemption("unit-in-name", unit_in_name, f"{_SPEC} (durations in _ms)"))
    if totals:
        found.append(Exemption("total-suffix", totals, f"{_SPEC} (counters in _total)"))
    if pid:
        found.append(
            Exemption(
                "unbounded-attribute",
                pid,
                f"{_SPEC}: process.pid is the sampled server tree's root, one per server",
                attribute="process.pid",
            )
        )
    return found


@rlmetrics.hookimpl
def register_check_exemptions(register: Callable[[Exemption], None]) -> None:
    for exemption in exemptions(_gym_specs()):
        register(exemption)
