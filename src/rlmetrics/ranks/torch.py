"""The collectives of a torch.distributed process group, for :class:`RankMerger`.

torch is imported here, when a merger is built, never by ``import rlmetrics``. Only calls
every backend has (``all_gather_single``, once ``all_gather_into_tensor``, and
``all_gather_object``): the same code runs on
gloo (CPU) and NCCL (the packed row goes to the current CUDA device there). A rank that dies
ends a collective with the process group's own timeout (``init_process_group(timeout=)``).

:meth:`TorchCollective.own_group` opens the merger's own gloo group over the same ranks, with
the same timeout: the merger's thread gathers there, never interleaved with the trainer's
collectives on its groups, and on CPU even when the trainer's group is NCCL's. The merger
destroys that group when its Logger finishes (:meth:`TorchCollective.close`); the groups it
was given are the trainer's.
"""

from __future__ import annotations

import contextlib
from array import array
from collections import Counter
from datetime import timedelta
from typing import Any

from .joining import join

__all__ = ["DEFAULT_JOIN_TIMEOUT_S", "TorchCollective"]

#: How long a rank waits, as its merger is bound, for every other rank to bind theirs (at
#: most half the group's timeout: see :meth:`TorchCollective.join`). Generous: a rank that
#: comes later (rank 0 preparing data first, with no barrier after) merges no more in the run,
#: while a Logger built on rank 0 only costs this wait once, at its start.
DEFAULT_JOIN_TIMEOUT_S = 300.0
#: Mergers joined in this process, by the ranks of their group: each joining's store key.
_JOINED: Counter[tuple[int, ...]] = Counter()


class TorchCollective:
    """``all_gather`` of one float64 row per rank, on ``group`` (None: the default group)."""

    def __init__(self, group: Any = None, join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "rlmetrics.ranks.torch_distributed() merges over a torch.distributed process "
                "group: call torch.distributed.init_process_group() first (or pass group=)"
            )
        self._torch = torch
        self._dist = dist
        self.group = group
        #: The rank within ``group`` (the exchange's), and in the whole world (what the raw
        #: file and its rows name: unique among the processes, whatever the group).
        self.rank = dist.get_rank(group)
        self.global_rank = dist.get_rank()
        self.world_size = dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        # NCCL moves CUDA tensors only; gloo and the others, CPU ones.
        self._device = (
            torch.device("cuda", torch.cuda.current_device())
            if backend == "nccl"
            else torch.device("cpu")
        )
        #: Whether own_group() opened this group (then close() destroys it).
        self.owned = False
        self._width = -1
        self._output: Any = None
        #: The gathered rows on the host: ``self._output`` itself on CPU (a tensor over this
        #: array's memory, so the rows are read back without a tensor call per value).
        self._host = array("d")
        self._host_view: Any = None
        # torch 2.13 renamed all_gather_into_tensor (which warns there); one call either way.
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.join_timeout_s = join_timeout_s

    def join(self) -> None:
        """Wait for every rank of the group to bind its merger, through the default group's
        store, before any collective is made for it: at most ``join_timeout_s`` and at most
        half the group's timeout, so that ranks that never bind one (their Logger built under
        ``if rank == 0:``), waiting meanwhile in the trainer's next collective on the group,
        do not time out there. Raises :class:`~.joining.RanksNotJoined` on every rank when
        some rank did not come in time (the late ones too, whenever they come)."""
        from torch.distributed import distributed_c10d

        dist = self._dist
        ranks = tuple(dist.get_process_group_ranks(self.group)) if self.group is not None else ()
        ranks = () if len(ranks) == dist.get_world_size() else ranks
        _JOINED[ranks] += 1
        key = f"rlmetrics/ranks/join/{','.join(map(str, ranks)) or 'world'}/{_JOINED[ranks]}"
        patience = min(timedelta(seconds=self.join_timeout_s), self.timeout() / 2)
        join(distributed_c10d._get_default_store(), key, self.world_size, patience)

    def timeout(self) -> timedelta:
        """How long a collective of this group waits for a rank (its backend's option;
        torch's default for the backend when the backend does not say)."""
        from torch.distributed import distributed_c10d

        pg = self.group if self.group is not None else distributed_c10d._get_default_group()
        for device in (self._device, self._torch.device("cpu")):
            try:
                found = pg._get_backend(device).options._timeout
            except Exception:
                continue
            if isinstance(found, timedelta):
                return found
        default: timedelta = distributed_c10d.default_pg_timeout
        return default

    def own_group(self) -> TorchCollective:
        """A gloo group of the merger's own over this group's ranks, with its timeout: a
        collective call (every rank's Logger binds its merger as it is built). Only the
        group's ranks take part when it is not the whole world."""
        dist = self._dist
        ranks = dist.get_process_group_ranks(self.group) if self.group is not None else None
        whole = ranks is None or len(ranks) == dist.get_world_size()
        group = dist.new_group(
            ranks=None if whole else ranks,
            backend="gloo",
            timeout=self.timeout(),
            use_local_synchronization=not whole,
        )
        own = TorchCollective(group, self.join_timeout_s)
        own.owned = True
        return own

    def close(self) -> None:
        """Destroy this group when :meth:`own_group` opened it (a local call; its gloo
        threads end now, not at the interpreter's exit). One destroyed already, by the
        trainer's ``destroy_process_group()``, is left."""
        if not self.owned:
            return
        self.owned = False
        # ValueError "Invalid process group specified": destroyed already.
        with contextlib.suppress(ValueError):
            self._dist.destroy_process_group(self.group)

    def all_gather(self, row: list[float]) -> list[list[float]]:
        torch = self._torch
        width = len(row)
        if width != self._width:  # the buffers are kept while the table stands
            self._width = width
            self._host = array("d", bytes(8 * width * self.world_size))
            self._host_view = torch.frombuffer(self._host, dtype=torch.float64)
            on_cpu = self._device.type == "cpu"
            self._output = (
                self._host_view
                if on_cpu
                else torch.empty_like(self._host_view, device=self._device)
            )
        # array -> tensor shares the memory: cheaper than torch.tensor(list) per value.
        tensor = (
            torch.frombuffer(array("d", row), dtype=torch.float64)
            if row
            else (torch.empty(0, dtype=torch.float64))
        )
        if self._output is not self._host_view:
            tensor = tensor.to(self._device)
        self._gather(self._output, tensor, group=self.group)
        if self._output is not self._host_view:
            self._host_view.copy_(self._output)
        flat = self._host.tolist()
        return [flat[i * width : (i + 1) * width] for i in range(self.world_size)]

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj, group=self.group)
        return out
