"""PROPORTIONAL: CPUs and memory in proportion to GPUs, the baseline Synergy (Mohan et al., OSDI'22) compares
against and what most GPU schedulers do.

A learner with g GPUs on a server with G GPUs, C CPUs and M GB gets exactly C x g / G CPUs and M x g / G GB,
whatever it requested: this is the GPU-proportional share of Synergy's baseline (its simulator gives each
job the server's CPUs and memory times the fraction of the server's GPUs it holds). A request larger than
the share is not a hard minimum here; a job that must get its request should use pack or spread. Learners
without GPUs have no share and get their request (placed by PACK).

Where a gang is spread over servers of different shapes, every learner gets the smallest of their
shares (an Allocation carries one amount per learner). Learners are placed by PACK's rule on the GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    Placer,
    demand_slots,
    failure_reason,
    make_allocation,
    pack_by_slots,
    type_groups,
)
from loadmaster.scheduling.placement.pack import PackPlacer
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


def per_gpu_share(cluster: Cluster) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """CPUs and GB of memory per GPU of each node (0 on nodes without GPUs)."""
    gpus = cluster.gpu_capacity.astype(np.float64)
    has = gpus > 0
    safe = np.where(has, gpus, 1.0)
    return (np.where(has, cluster.cpu_capacity / safe, 0.0), np.where(has, cluster.mem_capacity / safe, 0.0))


def groups_in_order(snap: Snapshot, job: JobView, prefer: Sequence[str] | None
                    ) -> list[list[npt.NDArray[np.bool_]]]:
    """The type groups to try in turn: each preferred type alone, in order, or all usable types together
    (a gang never mixes types; without a preference the best placement over all of them wins)."""
    groups = type_groups(snap, job, prefer)
    return [[mask] for mask in groups] if prefer is not None else [groups]


def place_fixed(job: JobView, learners: int, free: FreeCapacity, snap: Snapshot, prefer: Sequence[str] | None,
                cpus: float, mem_gb: float) -> Allocation | WaitReason:
    """PACK with every learner given `cpus` and `mem_gb`. An elastic job that grows keeps the amounts its
    running learners have: one Allocation carries one amount per learner."""
    g = job.spec.gpus_per_learner
    slots = demand_slots(free.gpus, free.cpus, free.mem, g, cpus, mem_gb)
    for within in groups_in_order(snap, job, prefer):
        found = pack_by_slots(slots, learners, free, within, g)
        if found is not None:
            return make_allocation(job, *found, cpus=cpus, mem_gb=mem_gb)
    return failure_reason(job, learners, free, snap)


class ProportionalPlacer(Placer):
    name = "proportional"

    def __init__(self) -> None:
        self._pack = PackPlacer()

    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        g = job.spec.gpus_per_learner
        if g == 0:
            return self._pack.place(job, learners, free, snap, prefer)
        if job.allocation is not None:
            a = job.allocation
            return place_fixed(job, learners, free, snap, prefer, a.cpus_per_learner, a.mem_gb_per_learner)
        cpu_per_gpu, mem_per_gpu = per_gpu_share(snap.cluster)
        share_c, share_m = cpu_per_gpu * g, mem_per_gpu * g
        slots = demand_slots(free.gpus, free.cpus, free.mem, g, share_c, share_m)
        for within in groups_in_order(snap, job, prefer):
            found = pack_by_slots(slots, learners, free, within, g)
            if found is not None:
                nodes = found[0]
                return make_allocation(job, *found, cpus=float(share_c[nodes].min()),
                                       mem_gb=float(share_m[nodes].min()))
        return failure_reason(job, learners, free, snap)

    def cache_key(self, job: JobView, learners: int, snap: Snapshot) -> tuple[object, ...] | None:
        """The placement depends on the GPUs alone (shares come from the servers), not on the request.
        Learners without GPUs are placed by their request: PACK's key (a different length, so decide()
        never compares the two kinds)."""
        s = job.spec
        if s.gpus_per_learner == 0:
            return super().cache_key(job, learners, snap)
        return (learners, s.gpus_per_learner, s.excluded_types)
