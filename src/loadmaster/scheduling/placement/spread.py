"""SPREAD: one learner per server where possible, on the emptiest servers (DLaaS's SPREAD).

Spreading lowers interference between learners and the blast radius of a server failure, at the cost
of cross-server traffic and fragmentation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    Placer,
    failure_reason,
    learner_slots,
    make_allocation,
    type_groups,
)
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


class SpreadPlacer(Placer):
    name = "spread"

    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        slots_all = learner_slots(job, free)
        groups = type_groups(snap, job, prefer)
        if prefer is None:
            groups.sort(key=lambda m: -float(free.gpus[m].sum()))  # the type with most room first
        for mask in groups:
            slots = np.where(mask, slots_all, 0)
            if int(np.minimum(slots, learners).sum()) < learners:
                continue
            # Round-robin over the emptiest nodes: each pass puts at most one learner per node.
            by_room = np.lexsort((np.arange(slots.size), -free.gpus))
            order: list[int] = by_room[slots[by_room] > 0].tolist()
            if learners <= len(order):
                # One pass is enough: one learner on each of the first `learners` nodes.
                return make_allocation(job, order[:learners], [1] * learners)
            room: list[int] = slots.tolist()
            counts = dict.fromkeys(order, 0)
            remaining = learners
            while remaining:
                for n in order:
                    if remaining and counts[n] < room[n]:
                        counts[n] += 1
                        remaining -= 1
            chosen = [n for n in order if counts[n]]
            return make_allocation(job, chosen, [counts[n] for n in chosen])
        return failure_reason(job, learners, free, snap)
