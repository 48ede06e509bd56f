"""PACK: best fit on the fewest servers, keeping large holes open for large gangs (DLaaS's PACK)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    GAVE_UP,
    Placer,
    best_spanning,
    failure_reason,
    learner_slots,
    make_allocation,
    spanning_by_buckets,
    tightest_by_buckets,
    tightest_node,
    type_groups,
    whole_gang_nodes,
)
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


class PackPlacer(Placer):
    name = "pack"

    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        if prefer is not None:
            for mask in type_groups(snap, job, prefer):
                alloc = self._within(job, learners, free, snap, mask)
                if alloc is not None:
                    return alloc
            return failure_reason(job, learners, free, snap)
        alloc = self._within(job, learners, free, snap, None)
        return alloc if alloc is not None else failure_reason(job, learners, free, snap)

    def _within(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
                mask: npt.NDArray[np.bool_] | None) -> Allocation | None:
        """Best placement on the nodes of `mask` (None: any type, the best over all types)."""
        buckets = free.buckets
        node = GAVE_UP if buckets is None else tightest_by_buckets(buckets, job, learners, free, mask)
        if node == GAVE_UP:
            whole = whole_gang_nodes(job, learners, free, snap)
            if mask is not None:
                whole &= mask
            node = tightest_node(whole, free)
        if node is not None:
            return make_allocation(job, [node], [learners])
        groups = [mask] if mask is not None else type_groups(snap, job)
        s = job.spec
        if (buckets is not None and len(groups) == 1 and groups[0] is snap.cluster.all_nodes_mask
                and s.gpus_per_learner > 0 and not (s.cpus_per_learner or s.mem_gb_per_learner)):
            # Every server, GPUs alone, the free arrays as the buckets describe them: from the buckets.
            found = spanning_by_buckets(buckets, learners, s.gpus_per_learner)
        else:
            found = best_spanning(groups, learner_slots(job, free), learners, free, s.gpus_per_learner)
        return None if found is None else make_allocation(job, *found)
