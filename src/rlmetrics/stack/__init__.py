"""A local monitoring stack in one command (``rlmetrics stack``): a Prometheus configuration
that scrapes the run, the Gym servers, the vLLM engines and every Ray node through file-based
service discovery, loads the generated alert rules, and Debian's ``prometheus`` serving it on
127.0.0.1, with ``prometheus-alertmanager`` delivering its alerts where it is installed.

- :mod:`.config`: the files (configuration, targets, rules, dashboard);
- :mod:`.server`: the ``prometheus`` process;
- :mod:`.alertmanager`: alert delivery (its configuration, its process).
"""

from __future__ import annotations

__all__: list[str] = []
