"""The Grafana dashboard generated from the declared series (``rlmetrics dashboard``).

- :mod:`.promql`: the Prometheus names the exporter gives declared series, and the run filter;
- :mod:`.model`: rows, panels, queries and variables, which plugins offer through the
  ``register_dashboard_rows`` hook;
- :mod:`.grafana`: the rows laid out as Grafana JSON;
- :mod:`.builtin`: the rows of the core's own families.
"""

from __future__ import annotations

__all__: list[str] = []
