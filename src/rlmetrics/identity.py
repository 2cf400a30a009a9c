"""Which run a row belongs to, and whether this process continues it.

One id names a run everywhere: the OpenTelemetry resource's ``rlmetrics.run.id``, every JSONL
row, the W&B run id, the MLflow run's ``rlmetrics.run.id`` tag, the TensorBoard log folder. A
job restarted from a checkpoint passes the same id with ``resume=True`` and every backend
continues its run instead of starting another (see docs/trackers.md, "Run identity and
resume").
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import attrs

__all__ = [
    "RESUME_ID_SOURCES",
    "RUN_ID_ATTR",
    "RunIdentity",
    "launcher_run_id",
    "new_run_id",
    "tracker_init_kwargs",
    "with_tracker_setting",
]

#: The resource attribute (and MLflow tag) that carries the run id.
RUN_ID_ATTR = "rlmetrics.run.id"


def new_run_id() -> str:
    """The id of a run nobody named here: the one its launcher gives (:func:`launcher_run_id`),
    else 12 hex digits of a random UUID."""
    given = launcher_run_id()
    return given[0] if given is not None else uuid.uuid4().hex[:12]


#: Where a resumed process finds the id of the run it continues when none is given: what
#: refusing ``resume=True`` without one names (torchrun's rendezvous id is not among them).
RESUME_ID_SOURCES = "SLURM_JOB_ID, or rlmetrics.run.id in OTEL_RESOURCE_ATTRIBUTES"


def launcher_run_id(*, resumable: bool = False) -> tuple[str, str] | None:
    """The run id what launched this process gives every process of the run, with the
    variable it is in: the ``rlmetrics.run.id`` of ``OTEL_RESOURCE_ATTRIBUTES`` (what
    ``rlmetrics.start()`` would take: a Ray worker's ``runtime_env`` carries the driver's
    there, so a Logger built before the worker's telemetry names the same run), else
    ``SLURM_JOB_ID`` (a requeued job keeps it), else torchrun's rendezvous id
    ``TORCHELASTIC_RUN_ID`` (every rank of the job has the same, so ranks that each start
    telemetry export one run; torchrun says ``none`` when the job gave none, which names no
    run). None when there is none.

    ``resumable`` leaves torchrun's id out: a relaunched ``torchrun --standalone`` makes a new
    one, so it names no run a restarted job could continue (:data:`RESUME_ID_SOURCES`).

    Raises :class:`~rlmetrics.configuration.ConfigurationError` when
    ``OTEL_RESOURCE_ATTRIBUTES`` gives ``rlmetrics.run.id`` an empty value (``=$RUN_ID`` with
    the variable unset): the SDK would name the run ``''``."""
    from_resource = _resource_env_run_id()
    if from_resource is not None:
        return from_resource, "OTEL_RESOURCE_ATTRIBUTES"
    variables = ("SLURM_JOB_ID",) if resumable else ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
    for variable in variables:
        value = os.environ.get(variable)
        if value and value != "none":
            return value, variable
    return None


def _resource_env_run_id() -> str | None:
    """The run id ``OTEL_RESOURCE_ATTRIBUTES`` names, read as the SDK's detector reads it
    (items split at commas, the value stripped and URL-decoded, a key's last item winning)."""
    found: str | None = None
    for item in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, has_value, value = item.partition("=")
        if has_value and key.strip() == RUN_ID_ATTR:
            found = unquote(value.strip())
    if found is not None and not found.strip():
        from .configuration import ConfigurationError

        raise ConfigurationError(
            f"OTEL_RESOURCE_ATTRIBUTES gives {RUN_ID_ATTR} an empty value ({found!r}): give "
            f"the run's id ({RUN_ID_ATTR}=<id>) or leave the attribute out"
        )
    return found


def _check_id(_instance: object, _attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"a run id is a non-empty string, got {value!r}")


@attrs.frozen
class RunIdentity:
    """A run's id, and whether this process continues a run that already wrote to the
    backends (``resume``). The Logger hands it to every backend factory that names an
    ``identity`` parameter.

    ``given`` says whether someone chose the id (the caller's ``run_id``, the running
    telemetry's) rather than :func:`new_run_id` here; it is not part of the identity (two
    identities of one id are equal either way). With many ranks, a rank whose id was not
    given takes rank 0's, so every rank's rows name one run (docs/ranks.md)."""

    run_id: str = attrs.field(validator=_check_id)
    resume: bool = attrs.field(default=False, converter=bool)
    given: bool = attrs.field(default=True, converter=bool, eq=False)

    def tracker_id(self, refused: str, max_length: int = 64) -> str:
        """The run id as a tracker that refuses the characters ``refused`` (and control
        characters) and ids over ``max_length`` takes it: the id itself when it is fine, else
        the id with each refused character as ``-``, cut, plus ``-`` and 8 hex digits of a hash
        of the real id (so two ids never share one). The same id always maps the same way, so a
        resumed run finds its tracker run again."""
        run_id = self.run_id
        if len(run_id) <= max_length and not any(
            ch in refused or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in run_id
        ):
            return run_id
        cleaned = "".join(
            "-" if ch in refused or ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in run_id
        )
        digest = hashlib.blake2b(run_id.encode("utf-8", "surrogatepass"), digest_size=4)
        return f"{cleaned[: max_length - 9]}-{digest.hexdigest()}"


def tracker_init_kwargs(
    named: Mapping[str, Any],
    identity: RunIdentity | None,
    refused: str,
    overrides: Mapping[str, Any] | None,
    folder: str,
) -> dict[str, Any]:
    """The keyword arguments of a tracker's ``init`` (``wandb.init``, ``swanlab.init``): the
    ``named`` ones that are set, the run id as ``id`` (:meth:`RunIdentity.tracker_id` with the
    characters the tracker ``refused``) and ``resume="allow"`` for a resumed run, then the
    user's ``overrides`` (their ``init_kwargs``), which win. The folder under the key
    ``folder`` is created: trackers fall back to another place when it is missing."""
    kwargs = {key: value for key, value in named.items() if value is not None}
    if identity is not None:
        kwargs["id"] = identity.tracker_id(refused)
        if identity.resume:
            kwargs["resume"] = "allow"
    kwargs.update(overrides or {})
    if kwargs.get(folder) is not None:
        Path(kwargs[folder]).mkdir(parents=True, exist_ok=True)
    return kwargs


def with_tracker_setting(settings: Any, name: str, value: Any) -> Any:
    """A tracker's ``settings`` argument (the user's from ``init_kwargs``: none, a dict, or the
    tracker's own pydantic settings, ``wandb.Settings``, ``swanlab.Settings``) with ``name``
    set to ``value``, unless the user's set it (``init_kwargs`` win over what the backend
    chooses). The user's object is not changed."""
    if settings is None:
        return {name: value}
    if isinstance(settings, Mapping):
        return {name: value, **settings}
    if name in getattr(settings, "model_fields_set", ()):
        return settings
    return settings.model_copy(update={name: value})
