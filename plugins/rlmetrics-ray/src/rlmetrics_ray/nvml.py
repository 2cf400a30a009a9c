"""This machine's GPUs through NVML, for a process that has no Ray cluster to ask.

``nvidia-ml-py`` (the ``pynvml`` module, the ``rlmetrics-ray[nvml]`` extra) reads each GPU's
utilisation and memory. Only the GPUs this process may use are read: ``CUDA_VISIBLE_DEVICES``
is applied as CUDA applies it (indices, ``GPU-`` UUIDs or unique prefixes of them, up to the
first entry that names no device; set but empty means none). A ``MIG-`` instance is not
reported: NVML gives no utilisation for it.

No NVML (the package missing, no driver, no GPU) is not an error: the reader says so in one
INFO line and reports no GPU from then on.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .gpu_readings import GpuReading

__all__ = [
    "DRIVER_PROC",
    "VISIBLE_DEVICES_ENV",
    "LocalGpus",
    "NvmlGpus",
    "no_nvidia_driver",
    "visible_indices",
]

VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"

logger = logging.getLogger("rlmetrics")

#: What the monitor calls for this machine's GPUs.
LocalGpus = Callable[[], Sequence[GpuReading]]

#: Where Linux shows the NVIDIA kernel driver once it is loaded (in containers too: procfs is
#: the kernel's). NVML needs that driver.
DRIVER_PROC = "/proc/driver/nvidia"


def no_nvidia_driver() -> bool:
    """Whether this machine certainly has no NVIDIA driver, so NVML could read nothing.

    A look at :data:`DRIVER_PROC`, where importing ``pynvml`` and starting NVML to find out
    would cost the caller tens of milliseconds of CPU. Outside Linux it cannot tell (False):
    NVML is then tried, on the monitor's thread."""
    return sys.platform.startswith("linux") and not os.path.exists(DRIVER_PROC)


def visible_indices(setting: str | None, devices: Sequence[tuple[int, str]]) -> list[int]:
    """The NVML indices of the ``devices`` (``(index, uuid)`` of every GPU) that a process with
    ``CUDA_VISIBLE_DEVICES=setting`` sees, in the order it sees them.

    None (unset) sees every GPU. Otherwise each comma-separated entry is an index or a UUID
    (``GPU-…``, or a prefix of one naming a single GPU); CUDA ignores the entries from the
    first one that names no GPU (or names one twice) on. Indices are NVML's (PCI bus order):
    CUDA numbers GPUs the same way with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as multi-GPU
    launchers set it.
    """
    if setting is None:
        return [index for index, _uuid in devices]
    by_index = {index for index, _uuid in devices}
    seen: list[int] = []
    for entry in (part.strip() for part in setting.split(",")):
        index: int | None = None
        if entry.isdigit():
            index = int(entry) if int(entry) in by_index else None
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in devices if uuid.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index in seen:
            break
        seen.append(index)
    return seen


class NvmlGpus:
    """Reads the visible GPUs; call it (on the monitor's thread) for one reading of each.

    :param nvml: the ``pynvml`` module (default: imported on first use).
    :param environ: where ``CUDA_VISIBLE_DEVICES`` is read (default: this process's).
    """

    def __init__(self, nvml: Any = None, environ: Mapping[str, str] | None = None) -> None:
        self._nvml = nvml
        self._environ = os.environ if environ is None else environ
        self._initialised = False
        self._unavailable: str | None = None
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            reference = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _after_fork(reference))

    def _after_fork_in_child(self) -> None:
        # The parent's monitor thread may have held the lock at the fork (importing pynvml
        # or starting NVML takes a while): the child's stop() waited on it for ever. NVML's
        # handles are the parent's too, so the child starts it again if it reads GPUs.
        self._lock = threading.Lock()
        self._initialised = False

    @property
    def unavailable(self) -> str | None:
        """Why no GPU is read (said once, at INFO), or None while NVML works."""
        return self._unavailable

    def __call__(self) -> tuple[GpuReading, ...]:
        with self._lock:
            if self._unavailable is not None or not self._initialise():
                return ()
            nvml = self._nvml
            try:
                count = int(nvml.nvmlDeviceGetCount())
                handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
            except Exception:
                self._give_up("NVML could not list the GPUs")
                return ()
            if not handles:
                self._give_up("NVML found no GPU")
                return ()
            setting = self._environ.get(VISIBLE_DEVICES_ENV)
            visible = visible_indices(setting, list(enumerate(uuids)))
            return tuple(
                reading
                for index in sorted(visible)
                if (reading := self._read(index, handles[index])) is not None
            )

    def _initialise(self) -> bool:
        if self._initialised:
            return True
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")  # nvidia-ml-py's module
            except ImportError:
                self._give_up("nvidia-ml-py is not installed (pip install 'rlmetrics-ray[nvml]')")
                return False
        try:
            self._nvml.nvmlInit()
        except Exception:
            self._give_up("NVML could not start (no NVIDIA driver on this machine)")
            return False
        self._initialised = True
        return True

    def _read(self, index: int, handle: Any) -> GpuReading | None:
        """One GPU; None (a gap for it alone) when NVML fails on it."""
        nvml = self._nvml
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            used, total = float(memory.used), float(memory.total)
        except Exception:
            return None
        utilization: float | None
        try:
            utilization = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            utilization = None  # some devices report none; memory still counts
        model: str | None
        try:
            model = _text(nvml.nvmlDeviceGetName(handle)) or None
        except Exception:
            model = None
        return GpuReading(
            index=str(index),
            model=model,
            utilization_pct=utilization,
            used_bytes=used,
            limit_bytes=total,
        )

    def _give_up(self, reason: str) -> None:
        self._unavailable = reason
        logger.info("rlmetrics-ray: %s; no hw.gpu.* series from this process", reason)

    def close(self) -> None:
        """Release NVML (a later call starts it again)."""
        with self._lock:
            if self._initialised:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
            self._initialised = False


def _after_fork(reference: weakref.ref[NvmlGpus]) -> None:
    gpus = reference()
    if gpus is not None:
        gpus._after_fork_in_child()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
