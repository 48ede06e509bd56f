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
    Span,
    allocation_of,
    best_of,
    best_spanning,
    bucket_ranges,
    bucket_slots,
    failure_reason,
    learner_slots,
    make_allocation,
    preferred_groups,
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
            for mask, span in preferred_groups(snap, job, prefer):
                alloc = self._within(job, learners, free, snap, mask, span)
                if alloc is not None:
                    return alloc
            return failure_reason(job, learners, free, snap)
        alloc = self._within(job, learners, free, snap, None, None)
        return alloc if alloc is not None else failure_reason(job, learners, free, snap)

    def _within(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
                mask: npt.NDArray[np.bool_] | None, span: Span) -> Allocation | None:
        """Best placement on the nodes of `mask` (None: any type, the best over all types); `span`: the mask's
        servers when consecutive (preferred_groups)."""
        buckets = free.buckets
        node = GAVE_UP if buckets is None else tightest_by_buckets(buckets, job, learners, free, mask, span)
        if node == GAVE_UP:
            whole = whole_gang_nodes(job, learners, free, snap)
            if mask is not None:
                whole &= mask
            node = tightest_node(whole, free)
        if node is not None:
            return allocation_of(job, (node,) * learners)
        if learners == 1:
            # Spread over several servers, one learner is still one server, and none of the mask's takes it. Most
            # Philly-like jobs are one learner: under a type preference each type the gang does not fit on was
            # searched again server by server (~50,000 searches at 117k jobs under las-het).
            return None
        groups = [mask] if mask is not None else type_groups(snap, job)
        s = job.spec
        g = s.gpus_per_learner
        ranges = (None if buckets is None or g <= 0 or s.cpus_per_learner or s.mem_gb_per_learner
                  else [span] if span is not None else bucket_ranges(groups, snap))
        if ranges is not None:
            # GPUs alone, groups of consecutive servers, the free arrays as the buckets describe them: each
            # group's servers counted from the buckets.
            assert buckets is not None
            found = best_of((spanning_by_buckets(bucket_slots(buckets, g, a, b), learners) for a, b in ranges),
                            learners, free, g)
        else:
            found = best_spanning(groups, learner_slots(job, free), learners, free, g)
        return None if found is None else make_allocation(job, *found)
