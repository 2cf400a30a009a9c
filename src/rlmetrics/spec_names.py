"""Names NeMo-RL's metrics specification fixes for the core's own families, declared as
exemptions from ``rlmetrics check`` (an entry point of the ``rlmetrics`` distribution).

``rl.efficiency.seconds``, ``rl.efficiency.pct`` and ``rl.sft_v2.valid_tokens_per_second`` spell
their unit in the name; dashboards and alerts in the field already query them by these names,
so renaming them would break every one of those.
"""

from __future__ import annotations

from collections.abc import Callable

from . import hookimpl
from .check import Exemption

__all__ = ["EXEMPTIONS", "register_check_exemptions"]

_SPEC = "NeMo-RL's metrics specification fixes this name"

EXEMPTIONS: tuple[Exemption, ...] = (
    Exemption(
        "unit-in-name",
        {"rl.efficiency.seconds", "rl.efficiency.pct", "rl.sft_v2.valid_tokens_per_second"},
        _SPEC,
    ),
)


@hookimpl
def register_check_exemptions(register: Callable[[Exemption], None]) -> None:
    for exemption in EXEMPTIONS:
        register(exemption)
