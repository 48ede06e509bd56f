"""Tentative free capacity during one decide() call: the Statement that commits a gang whole or not at all."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.snapshot import Snapshot

# What save() returns and restore() takes: the three free arrays, the GPU total and the cached maximum.
SavedCapacity = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], float,
                      float | None]


class FreeCapacity:
    """Mutable copies of the snapshot's free arrays. take() and give() move whole allocations only."""

    __slots__ = ("_max_gpus", "_owned", "_snap", "buckets", "cpus", "gpus", "mem", "total_gpus", "version")

    def __init__(self, snap: Snapshot) -> None:
        # The snapshot's arrays until the first change (copy on write): under overload many decisions
        # only find that nothing fits, and change nothing.
        self.gpus: npt.NDArray[np.float64] = snap.free_gpus
        self.cpus: npt.NDArray[np.float64] = snap.free_cpus
        self.mem: npt.NDArray[np.float64] = snap.free_mem
        self._owned = False
        self._snap = snap
        # Free-GPU count -> servers with that many free, in server order: the snapshot's, where its shell keeps
        # them, while nothing in this decision has changed the free arrays yet (_own() drops them: None).
        self.buckets: Mapping[float, list[int]] | None = snap.free_buckets
        # The snapshot's sum: a shell that keeps it (FreeLedger) gave it, else it is summed once per snapshot.
        self.total_gpus = snap.free_gpu_total
        # Bumped whenever capacity grows, so cached "does not fit" answers can be dropped.
        self.version = 0
        self._max_gpus: float | None = None

    def _own(self) -> None:
        """Copy the snapshot's arrays before the first change (they are the snapshot's, never written)."""
        self.gpus = self.gpus.copy()
        self.cpus = self.cpus.copy()
        self.mem = self.mem.copy()
        self._owned = True
        self.buckets = None  # they describe the snapshot's arrays, no longer these

    @property
    def max_node_gpus(self) -> float:
        """The most free GPUs on any one node (a learner needing more fits nowhere)."""
        if self._max_gpus is None:
            if not self._owned:  # still the snapshot's arrays: its answer (a shell may have kept it)
                self._max_gpus = self._snap.max_free_gpus
            else:
                self._max_gpus = float(self.gpus.max()) if self.gpus.size else 0.0
        return self._max_gpus

    def _apply(self, alloc: Allocation, sign: float) -> None:
        if not self._owned:
            self._own()
        self._max_gpus = None
        for node, count in alloc.per_node().items():
            self.gpus[node] += sign * count * alloc.gpus_per_learner
            self.cpus[node] += sign * count * alloc.cpus_per_learner
            self.mem[node] += sign * count * alloc.mem_gb_per_learner
        self.total_gpus += sign * alloc.gpus

    def take(self, alloc: Allocation) -> None:
        """Hold an allocation's resources, or raise ValueError (and change nothing) if they are not free."""
        # Only the allocation's nodes change, so only they are checked: a whole-array check per take cost
        # more than the take itself on a big cluster, and decide() takes and gives back victims often.
        gpus, cpus, mem = self.gpus, self.cpus, self.mem
        g, c, m = alloc.gpus_per_learner, alloc.cpus_per_learner, alloc.mem_gb_per_learner
        per_node = alloc.per_node()
        for node, count in per_node.items():
            if (gpus[node] - count * g < -1e-9 or cpus[node] - count * c < -1e-6
                    or mem[node] - count * m < -1e-6):
                raise ValueError(f"allocation for {alloc.job_id} exceeds free capacity")
        if not self._owned:
            self._own()
            gpus, cpus, mem = self.gpus, self.cpus, self.mem
        self._max_gpus = None
        for node, count in per_node.items():
            gpus[node] -= count * g
            cpus[node] -= count * c
            mem[node] -= count * m
        self.total_gpus -= alloc.gpus

    def give(self, alloc: Allocation, grow: bool = True) -> None:
        """Return an allocation's resources. grow=False for a tentative release that may be undone."""
        self._apply(alloc, 1.0)
        if grow:
            self.version += 1

    def save(self) -> SavedCapacity:
        """The state to restore() after tentative releases that came to nothing (cheaper than taking
        every released allocation back one by one)."""
        return self.gpus.copy(), self.cpus.copy(), self.mem.copy(), self.total_gpus, self._max_gpus

    def restore(self, saved: SavedCapacity) -> None:
        """Back to a state save() returned. The version is kept: capacity is what it was then, not more."""
        gpus, cpus, mem, self.total_gpus, self._max_gpus = saved
        if not self._owned:
            self._own()
        self.gpus[:] = gpus
        self.cpus[:] = cpus
        self.mem[:] = mem
