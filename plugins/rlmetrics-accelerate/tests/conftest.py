"""The rlmetrics-accelerate tests run a real Accelerator on CPU; the ``integrations`` tox env
installs it. Test modules are named ``test_accelerate_*`` so none collide with another folder's.
"""

from __future__ import annotations

from rlmetrics.testing import load_hypothesis_profile
from rlmetrics.testing.trainers import ignore_unless_installed, isolated, recorder, telemetry

__all__ = ["isolated", "recorder", "telemetry"]

collect_ignore_glob = ignore_unless_installed(
    "accelerate", "torch", why="the tox env 'integrations' installs them"
)

load_hypothesis_profile()
