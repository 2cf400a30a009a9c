"""``rlmetrics report``: a run's JSONL, summarised honestly and, optionally, drawn.

- :mod:`.summary`: :class:`~.summary.RunReport` from the rows (pure; ``--json`` is its dict);
- :mod:`.text`: the report as text;
- :mod:`.plot`: one PNG via matplotlib (the ``rlmetrics[report]`` extra).
"""

from __future__ import annotations

__all__: list[str] = []
