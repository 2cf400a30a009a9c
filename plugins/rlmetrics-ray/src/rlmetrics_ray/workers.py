"""One run across Ray workers: what a worker needs to export as part of the driver's run.

Each process that records exports on its own; they meet in an OTel collector (or in
Prometheus) and are joined by ``rlmetrics.run.id``. :func:`runtime_env` returns the Ray
``runtime_env`` that carries the driver's run to a worker through environment variables
only, so a plain ``rlmetrics.start(exporters=["otlp"])`` in the worker exports with:

- the driver's run id, service name and run-wide resource attributes, and the worker group,
  in ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME`` (which ``rlmetrics.start()`` reads);
- the driver's exporter settings: every ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_METRIC_EXPORT_*``
  variable of the driver, or the ``otlp_endpoint`` given here, and the plugin allow/deny lists;
- its own ``process.pid`` and ``ray.node.id``: ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` names
  this distribution's resource detector (:mod:`rlmetrics_ray.resource`), which the SDK runs in
  the worker when rlmetrics builds its resource. The SDK also gives every process its own
  ``service.instance.id``, so two workers' series never collide;
- the W3C trace context of the span current where it is called (``TRACEPARENT``,
  ``TRACESTATE``): a task or actor started inside ``rlmetrics.step(n)`` parents every span of
  its own that has no other parent on that step, so its phases are children of the driver's
  step in one trace. An actor that outlives the step should take the context per call
  instead: pass ``rlmetrics.trace_carrier()`` with the call and enter
  ``rlmetrics.trace_context(carrier)`` in the method.

Environment variables only (no ``worker_process_setup_hook``), so the result works for a job
(``ray.init(runtime_env=...)``) and for one actor or task (``.options(runtime_env=...)``)
alike, and Ray merges it with the job's.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

import rlmetrics
from rlmetrics import warn_once

__all__ = [
    "CARRIED_ENV",
    "CARRIED_ENV_PREFIXES",
    "DETECTORS_ENV",
    "RESOURCE_DETECTOR",
    "RESOURCE_ENV",
    "RUN_ID_ATTR",
    "SERVICE_NAME_ENV",
    "TRACEPARENT_ENV",
    "TRACESTATE_ENV",
    "WORKER_GROUP_ATTR",
    "WORKER_PREFIX",
    "parse_resource_env",
    "runtime_env",
]

RUN_ID_ATTR = "rlmetrics.run.id"
#: Each Ray Train worker's dict reaches the backends under ``worker/<rank>`` (with
#: ``all_workers``: :mod:`rlmetrics_ray.train`).
WORKER_PREFIX = "worker"
WORKER_GROUP_ATTR = "rl.worker_group"
RESOURCE_ENV = "OTEL_RESOURCE_ATTRIBUTES"
TRACEPARENT_ENV = "TRACEPARENT"
TRACESTATE_ENV = "TRACESTATE"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
DETECTORS_ENV = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"
#: This distribution's entry point in the SDK's ``opentelemetry_resource_detector`` group.
RESOURCE_DETECTOR = "rlmetrics_ray"

#: Driver variables a worker needs to export the way the driver does.
CARRIED_ENV_PREFIXES = ("OTEL_EXPORTER_OTLP_", "OTEL_METRIC_EXPORT_", "OTEL_BSP_", "OTEL_TRACES_")
CARRIED_ENV = ("RLMETRICS_PLUGINS", "RLMETRICS_DISABLE_PLUGINS")

# Resource attributes that describe the driver's process, not the run: a worker has its own.
_PER_PROCESS_KEYS = frozenset(
    {"service.name", "service.version", "service.instance.id", "ray.node.id", WORKER_GROUP_ATTR}
)
_PER_PROCESS_PREFIXES = ("process.", "host.", "telemetry.")


def parse_resource_env(value: str) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` as the SDK reads it: ``k=v`` pairs split on commas,
    values percent-decoded; malformed pairs skipped."""
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, raw = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = urllib.parse.unquote(raw.strip())
    return out


def _format_resource_env(attributes: Mapping[str, str]) -> str:
    return ",".join(
        f"{key}={urllib.parse.quote(value, safe='')}" for key, value in attributes.items()
    )


def runtime_env(
    worker_group: str | None = None,
    *,
    base: Mapping[str, Any] | None = None,
    otlp_endpoint: str | None = None,
    run_id: str | None = None,
    service_name: str | None = None,
    trace: bool = True,
) -> dict[str, Any]:
    """A Ray ``runtime_env`` that makes a worker's ``rlmetrics.start()`` part of this run.

    :param worker_group: the ``rl.worker_group`` resource attribute of the workers.
    :param base: a runtime_env to extend (``pip``, ``working_dir``, ``env_vars``...); its
        variables are kept unless this sets the same one, and its resource attributes are
        kept unless the run's override them.
    :param otlp_endpoint: the collector the workers export to (``http://host:4317``), when
        the driver's environment does not already say it; Ray workers on other machines
        cannot reach a driver's ``localhost``.
    :param run_id / service_name: default to the running telemetry's.
    :param trace: carry the current span's trace context (``TRACEPARENT``), so the worker's
        spans are its children; a base's own ``TRACEPARENT`` is kept when there is none.

    Raises RuntimeError when there is no run to carry (telemetry not started and no
    ``run_id``), and ValueError for an empty worker group.
    """
    handle = rlmetrics.current()
    if run_id is None and handle is None:
        raise RuntimeError(
            "rlmetrics_ray.runtime_env() carries the driver's run to its workers: call "
            "rlmetrics.start() on the driver first, or pass run_id="
        )
    if worker_group is not None and (not isinstance(worker_group, str) or not worker_group):
        raise ValueError(f"worker_group must be a non-empty string, got {worker_group!r}")
    driver_resource: Mapping[str, Any] = handle.resource if handle is not None else {}

    merged: dict[str, Any] = dict(base or {})
    base_vars = {str(k): str(v) for k, v in dict(merged.get("env_vars") or {}).items()}
    env_vars = dict(base_vars)
    for name, value in os.environ.items():
        if name.startswith(CARRIED_ENV_PREFIXES) or name in CARRIED_ENV:
            env_vars[name] = value
    if otlp_endpoint is not None:
        insecure = str(not otlp_endpoint.startswith("https://")).lower()
        for signal in ("METRICS", "TRACES"):
            env_vars[f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"] = otlp_endpoint
            env_vars[f"OTEL_EXPORTER_OTLP_{signal}_INSECURE"] = insecure
    if trace:
        carried = rlmetrics.trace_env()
        if carried:  # a base's own context gives way to the current span's, whole
            env_vars.pop(TRACESTATE_ENV, None)
            env_vars.update(carried)

    resource = parse_resource_env(base_vars.get(RESOURCE_ENV, ""))
    resource.update(_run_attributes(driver_resource))
    resource[RUN_ID_ATTR] = run_id if run_id is not None else str(driver_resource[RUN_ID_ATTR])
    if worker_group is not None:
        resource[WORKER_GROUP_ATTR] = worker_group
    env_vars[RESOURCE_ENV] = _format_resource_env(resource)

    service = service_name if service_name is not None else driver_resource.get("service.name")
    if service:
        env_vars[SERVICE_NAME_ENV] = str(service)

    detectors = [
        part.strip()
        for part in env_vars.get(DETECTORS_ENV, os.environ.get(DETECTORS_ENV, "")).split(",")
        if part.strip()
    ]
    if RESOURCE_DETECTOR not in detectors:
        detectors.append(RESOURCE_DETECTOR)
    env_vars[DETECTORS_ENV] = ",".join(detectors)

    merged["env_vars"] = env_vars
    return merged


def _run_attributes(resource: Mapping[str, Any]) -> dict[str, str]:
    """The driver's resource attributes that hold for the whole run, as strings."""
    out: dict[str, str] = {}
    for key, value in resource.items():
        if key in _PER_PROCESS_KEYS or key.startswith(_PER_PROCESS_PREFIXES):
            continue
        if "," in key or "=" in key or isinstance(value, (list, tuple, bytes)):
            warn_once(
                "ray:runtime_env:resource",
                "rlmetrics-ray: a resource attribute of the driver cannot travel in "
                "OTEL_RESOURCE_ATTRIBUTES (a key with ',' or '=', or a sequence value); "
                "the workers do not get it",
            )
            continue
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out
