"""The torch.distributed merge tests need torch; the ``integrations`` tox env installs it, and
the SDK envs leave this folder out (the reduction math is tested in the core, without it)."""

from __future__ import annotations

from rlmetrics.testing.trainers import ignore_unless_installed

collect_ignore_glob = ignore_unless_installed(
    "torch", why="the tox env 'integrations' installs torch (CPU)"
)
