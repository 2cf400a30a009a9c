"""The Ray Train tests need Ray Train and torch (a TorchTrainer); the ``integrations`` tox env
installs them, and the SDK envs and the ``ray`` env leave this folder out."""

from __future__ import annotations

from rlmetrics.testing.trainers import ignore_unless_installed

# "ray", not "ray.train": finding a submodule imports its package, and Ray must not be imported
# before the test module has set its loopback environment.
collect_ignore_glob = ignore_unless_installed(
    "ray", "torch", why="the tox env 'integrations' installs Ray Train and torch"
)
