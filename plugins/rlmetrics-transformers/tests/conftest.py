"""The rlmetrics-transformers tests run real trainers on CPU, offline; the ``integrations`` tox
env installs them.

Nothing is downloaded: :mod:`transformers_support` switches the hub off before transformers is
imported and builds every model and tokenizer in the test, and no trainer reports anywhere but
to the callback under test. Test modules are named ``test_transformers_*`` and support modules
``transformers_support*`` so none collide with another folder's.
"""

from __future__ import annotations

from rlmetrics.testing import load_hypothesis_profile
from rlmetrics.testing.trainers import ignore_unless_installed, isolated, recorder, telemetry

__all__ = ["isolated", "recorder", "telemetry"]

collect_ignore_glob = ignore_unless_installed(
    "torch", "transformers", "trl", why="the tox env 'integrations' installs them"
)
if not collect_ignore_glob:
    import transformers_support  # noqa: F401  (the hub off, before transformers is imported)

load_hypothesis_profile()
