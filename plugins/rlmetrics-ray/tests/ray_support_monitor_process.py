"""One process of a run on this host with the monitor, for test_ray_election.py (run as a
subprocess; argv: the ``ray.nodes()`` entries as JSON, the run id, the lock directory).

It starts telemetry with an in-memory reader and, until it is killed, prints one JSON line
per collection: its pid, how many ``rl.host.memory.used`` points that collection exported,
and its monitor's cycle count and election state."""

from __future__ import annotations

import json
import os
import sys
import time

from rlmetrics_ray import active_monitor, configure
from rlmetrics_ray.host_memory import USED

from rlmetrics.testing import in_memory_telemetry, points

INTERVAL_S = 0.5


def main() -> None:
    nodes, run_id, lock_dir = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    configure(nodes=lambda: nodes, interval_s=INTERVAL_S, lock_dir=lock_dir)
    with in_memory_telemetry(run_id=run_id) as (_handle, reader):
        monitor = active_monitor()
        assert monitor is not None
        while True:
            used = [p for p in points(reader) if p.name == USED]
            line = {
                "pid": os.getpid(),
                "used": len(used),
                "cycles": monitor.cycles,
                "elected": monitor.elected,
            }
            print(json.dumps(line), flush=True)
            time.sleep(0.1)


if __name__ == "__main__":
    main()
