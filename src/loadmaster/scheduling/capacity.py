"""Tentative free capacity during one decide() call: the Statement that commits a gang whole or not at all."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.snapshot import Snapshot


class FreeCapacity:
    """Mutable copies of the snapshot's free arrays. take() and give() move whole allocations only."""

    __slots__ = ("_max_gpus", "cpus", "gpus", "mem", "total_gpus", "version")

    def __init__(self, snap: Snapshot) -> None:
        self.gpus: npt.NDArray[np.float64] = snap.free_gpus.copy()
        self.cpus: npt.NDArray[np.float64] = snap.free_cpus.copy()
        self.mem: npt.NDArray[np.float64] = snap.free_mem.copy()
        self.total_gpus = float(self.gpus.sum())
        # Bumped whenever capacity grows, so cached "does not fit" answers can be dropped.
        self.version = 0
        self._max_gpus: float | None = None

    @property
    def max_node_gpus(self) -> float:
        """The most free GPUs on any one node (a learner needing more fits nowhere)."""
        if self._max_gpus is None:
            self._max_gpus = float(self.gpus.max()) if self.gpus.size else 0.0
        return self._max_gpus

    def _apply(self, alloc: Allocation, sign: float) -> None:
        self._max_gpus = None
        for node, count in alloc.per_node().items():
            self.gpus[node] += sign * count * alloc.gpus_per_learner
            self.cpus[node] += sign * count * alloc.cpus_per_learner
            self.mem[node] += sign * count * alloc.mem_gb_per_learner
        self.total_gpus += sign * alloc.gpus

    def take(self, alloc: Allocation) -> None:
        self._apply(alloc, -1.0)
        if (self.gpus < -1e-9).any() or (self.cpus < -1e-6).any() or (self.mem < -1e-6).any():
            self._apply(alloc, 1.0)
            raise ValueError(f"allocation for {alloc.job_id} exceeds free capacity")

    def give(self, alloc: Allocation, grow: bool = True) -> None:
        """Return an allocation's resources. grow=False for a tentative release that may be undone."""
        self._apply(alloc, 1.0)
        if grow:
            self.version += 1
