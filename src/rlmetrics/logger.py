"""Logger: the one object a training loop talks to.

Each logged dict is flattened, written by every configured backend first, then handed to the
plugins: to a typed hook where the routing table (:mod:`rlmetrics.routing`) recognises it, and
always to ``log_metrics``. Every backend and every
plugin runs in its own guard, so one failing tracker never costs the others a step, and
nothing raises into the training loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ._warn import warn_once
from .backends import Backend, available_backends
from .events import (
    SETUP_TIMING_PREFIX,
    TRAIN_PREFIXES,
    WALL_TIME_KEY,
    EfficiencySummary,
    RolloutEvent,
)
from .hooks import Hooks
from .plugins import hooks
from .routing import routes_for

__all__ = ["TRAIN_PREFIXES", "Logger", "flatten"]

_MAX_DEPTH = 32


def flatten(metrics: Mapping[Any, Any], sep: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a/b": 1}``; keys become strings; never raises on odd keys."""
    flat: dict[str, Any] = {}

    def walk(node: Mapping[Any, Any], path: str, depth: int) -> None:
        for key, value in list(node.items()):
            try:
                name = key if isinstance(key, str) else str(key)
            except Exception:
                name = f"<{type(key).__name__}>"
            full = f"{path}{sep}{name}" if path else name
            if isinstance(value, Mapping) and depth < _MAX_DEPTH:
                walk(value, full, depth + 1)
            else:
                flat[full] = value

    walk(metrics, "", 0)
    return flat


class Logger:
    """Fan a training loop's metrics out to backends and to the telemetry plugins.

    ``backends`` maps a backend name to its config (``{"jsonl": {"path": "m.jsonl"}}``); None
    means the JSONL backend with its default path. An unknown name is a configuration mistake
    and raises here; a backend that fails to start (no credentials, store gone) is skipped
    with a warning and the others run.
    """

    def __init__(self, backends: Mapping[str, Mapping[str, Any] | None] | None = None) -> None:
        config = {"jsonl": {}} if backends is None else dict(backends)
        factories = available_backends()
        unknown = sorted(set(config) - set(factories))
        if unknown:
            raise ValueError(
                f"unknown backend(s) {unknown}; available: {sorted(factories)}. A backend comes "
                "from a plugin's register_backends hook: install its distribution (for example "
                "rlmetrics-wandb) or check RLMETRICS_PLUGINS / RLMETRICS_DISABLE_PLUGINS"
            )
        self.backends: dict[str, Backend] = {}
        for name, options in config.items():
            owner, factory = factories[name]
            try:
                self.backends[name] = factory(**(options or {}))
            except Exception:
                warn_once(
                    f"backend-start:{name}",
                    f"rlmetrics: backend {name!r} (from plugin {owner!r}) failed to start and is "
                    "skipped; the other backends and telemetry still get every step",
                )
        self._lock = threading.Lock()
        self._samples: dict[str, int] = {}
        self._finished = False

    # -- the training loop's calls --------------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str = "") -> None:
        """Log one dict under ``prefix``. Never raises."""
        try:
            flat = flatten(metrics)
            prefix = prefix or ""
            routes = [route for route in routes_for(prefix) if route.wants(flat)]
            if any(route.wall_clock for route in routes):
                flat.setdefault(WALL_TIME_KEY, time.time())

            def deliver(plugins: Hooks) -> None:
                for route in routes:
                    route.deliver(plugins, route.parse(prefix, flat), step)

            self._log(flat, step, prefix, deliver)
        except Exception:
            warn_once("logger:log_metrics", "rlmetrics: Logger.log_metrics failed; step dropped")

    def log_setup_timing(self, timings: Mapping[str, Any]) -> None:
        """Startup phase durations (``<phase>_time_s``), logged once at step 0."""
        self.log_metrics(timings, step=0, prefix=SETUP_TIMING_PREFIX)

    def log_efficiency_summary(self, summary: EfficiencySummary, step: int = 0) -> None:
        """One step's efficiency accounting, typed; backends get its ``efficiency/*`` dict."""
        try:
            self._log(
                summary.to_metrics(),
                step,
                "",
                lambda plugins: plugins.on_efficiency_summary(summary, step),
            )
        except Exception:
            warn_once("logger:efficiency", "rlmetrics: Logger.log_efficiency_summary failed")

    def log_rollout_checkpoint(self, event: RolloutEvent) -> None:
        """One rollout-checkpoint event; backends get it under its prefix with its wall time.

        The backends' step is the stream's own sample index, not the trainer step.
        """
        try:
            self._log(
                event.to_metrics(),
                self._next_sample(event.prefix),
                event.prefix,
                lambda plugins: plugins.on_rollout_checkpoint(event),
            )
        except Exception:
            warn_once("logger:rollout", "rlmetrics: Logger.log_rollout_checkpoint failed")

    def finish(self) -> None:
        """Flush and close every backend, once."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            for name, backend in self.backends.items():
                try:
                    backend.finish()
                except Exception:
                    warn_once(
                        f"backend:{name}:finish", f"rlmetrics: backend {name!r} failed to finish"
                    )

    def __enter__(self) -> Logger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()

    # -- internals ------------------------------------------------------------------------

    def _next_sample(self, prefix: str) -> int:
        with self._lock:
            self._samples[prefix] = self._samples.get(prefix, -1) + 1
            return self._samples[prefix]

    def _log(
        self,
        flat: Mapping[str, Any],
        step: int,
        prefix: str,
        typed: Callable[[Hooks], None],
    ) -> None:
        """Backends first, then the typed hook this dict stands for, then ``log_metrics``."""
        self._to_backends(flat, step, prefix)
        plugins = hooks()
        typed(plugins)
        plugins.log_metrics(flat, step, prefix)

    def _to_backends(self, flat: Mapping[str, Any], step: int, prefix: str) -> None:
        # One lock for all backends: a sampler thread and the training loop may both log,
        # and no backend should have to be thread-safe for that.
        with self._lock:
            if self._finished:
                return
            for name, backend in self.backends.items():
                try:
                    backend.log_metrics(flat, step, prefix)
                except Exception:
                    warn_once(
                        f"backend:{name}:log",
                        f"rlmetrics: backend {name!r} failed to log a step; the other backends "
                        "and telemetry still got it",
                    )

