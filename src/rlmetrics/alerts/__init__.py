"""Prometheus alerting rules generated from the declared series (``rlmetrics alerts``).

- :mod:`.model`: a rule, its examples, and what a builder is given (names, thresholds), which
  plugins offer through the ``register_alert_rules`` hook;
- :mod:`.rules`: every plugin's rules as a rules file and as ``promtool`` unit tests;
- :mod:`.builtin`: the rules on the core's own series (stall, endpoint down, exporter and
  backend failures).
"""

from __future__ import annotations

__all__: list[str] = []
