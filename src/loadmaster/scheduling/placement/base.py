"""The one placer interface: where a job's learners go, given what is free. Policies decide who; placers where."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


class Placer(ABC):
    name: ClassVar[str]

    @abstractmethod
    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        """An allocation for `learners` learners of `job` that fits in `free`, or why there is none.

        Must never return a partial gang, and must never exceed `free` in any dimension. `prefer`, when a
        heterogeneity-aware policy gives it, lists GPU types best first: the placer must use the first
        type in that order on which the gang fits (types not listed are not used).
        """

    def cache_key(self, job: JobView, learners: int, snap: Snapshot) -> tuple[object, ...] | None:
        """Jobs with equal keys place identically on equal free capacity (None: never cache).

        The key is (learners, gpus, cpus, memory per learner, excluded GPU types); decide() also treats a
        key that is at least as large in every number, with at least the same exclusions, as not fitting
        once a smaller one did not.
        """
        s = job.spec
        return (learners, s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner, s.excluded_types)


_UNBOUNDED = 1 << 40


def learner_slots(job: JobView, free: FreeCapacity) -> npt.NDArray[np.int64]:
    """How many learners of `job` each node can still take, in every dimension at once."""
    s = job.spec
    slots: npt.NDArray[np.float64] | None = None
    for amount, per in ((free.gpus, s.gpus_per_learner), (free.cpus, s.cpus_per_learner),
                        (free.mem, s.mem_gb_per_learner)):
        if per > 0:
            k = np.floor_divide(amount + 1e-6, per)
            slots = k if slots is None else np.minimum(slots, k, out=slots)
    if slots is None:
        return np.full(free.gpus.shape, _UNBOUNDED, dtype=np.int64)
    return slots.astype(np.int64)


def whole_gang_nodes(job: JobView, learners: int, free: FreeCapacity, snap: Snapshot) -> npt.NDArray[np.bool_]:
    """Nodes that can take all `learners` at once (the cheap first question every placer asks)."""
    s = job.spec
    mask: npt.NDArray[np.bool_] | None = None
    for amount, per in ((free.gpus, s.gpus_per_learner), (free.cpus, s.cpus_per_learner),
                        (free.mem, s.mem_gb_per_learner)):
        if per > 0:
            ok = amount >= learners * per - 1e-6
            mask = ok if mask is None else np.logical_and(mask, ok, out=mask)
    if mask is None:
        mask = snap.cluster.all_nodes_mask.copy()
    for t, type_mask in snap.cluster.type_masks:
        if t in s.excluded_types:
            mask &= ~type_mask
    return mask


def gpu_only_slots(job: JobView, free: FreeCapacity) -> npt.NDArray[np.int64]:
    """Learners per node counting GPUs alone: tells fragmentation apart from a CPU/memory shortage."""
    g = job.spec.gpus_per_learner
    if g <= 0:
        return np.full(free.gpus.shape, _UNBOUNDED, dtype=np.int64)
    return np.floor_divide(free.gpus + 1e-6, g).astype(np.int64)


def failure_reason(job: JobView, learners: int, free: FreeCapacity, snap: Snapshot) -> WaitReason:
    """Classify a failed placement: not enough GPUs at all, the wrong shape, or CPUs/memory short."""
    need = learners * job.spec.gpus_per_learner
    if need > free.total_gpus + 1e-9:
        return WaitReason.NO_CAPACITY
    gslots = np.minimum(gpu_only_slots(job, free), learners)
    for mask in type_groups(snap, job):
        if int(gslots[mask].sum()) >= learners:
            return WaitReason.CPU_MEMORY
    return WaitReason.FRAGMENTATION


def make_allocation(job: JobView, nodes: list[int] | npt.NDArray[np.int64],
                    counts: list[int] | npt.NDArray[np.int64]) -> Allocation:
    learner_nodes: list[int] = []
    for n, c in zip(nodes, counts, strict=True):
        learner_nodes.extend([int(n)] * int(c))
    s = job.spec
    return Allocation(
        job_id=s.job_id,
        learner_nodes=tuple(learner_nodes),
        gpus_per_learner=s.gpus_per_learner,
        cpus_per_learner=s.cpus_per_learner,
        mem_gb_per_learner=s.mem_gb_per_learner,
    )


def type_groups(snap: Snapshot, job: JobView, prefer: Sequence[str] | None = None
                ) -> list[npt.NDArray[np.bool_]]:
    """Node masks, one per GPU type the job can run on: a gang never mixes GPU types (its speed would be
    the slowest's), and a type on which the job's throughput is zero (it does not fit in memory there)
    is never offered. With `prefer`, only those types, in that order."""
    cluster = snap.cluster
    spec = job.spec
    if prefer is not None and spec.gpus_per_learner > 0:
        masks = dict(cluster.type_masks)
        return [masks[t] for t in prefer if t in masks and t not in spec.excluded_types]
    if spec.gpus_per_learner == 0 or (len(cluster.gpu_types) <= 1 and not spec.excluded_types):
        return [cluster.all_nodes_mask]
    return [mask for t, mask in cluster.type_masks if t not in spec.excluded_types]
