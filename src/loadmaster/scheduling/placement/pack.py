"""PACK: best fit on the fewest servers, keeping large holes open for large gangs (DLaaS's PACK)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    Placer,
    failure_reason,
    learner_slots,
    make_allocation,
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
        whole = whole_gang_nodes(job, learners, free, snap)
        if mask is not None:
            whole &= mask
        if whole.any():
            # One server takes the whole gang: the tightest one (fewest free GPUs left), lowest index on ties.
            node = int(np.argmin(np.where(whole, free.gpus, np.inf)))
            return make_allocation(job, [node], [learners])
        slots_all = learner_slots(job, free)
        best: tuple[int, float, list[int], list[int]] | None = None
        for group in [mask] if mask is not None else type_groups(snap, job):
            slots = np.where(group, slots_all, 0)
            if int(np.minimum(slots, learners).sum()) < learners:
                continue
            nodes, counts = _fewest_servers(slots, learners)
            leftover = float(free.gpus[nodes].sum()) - learners * job.spec.gpus_per_learner
            key = (len(nodes), leftover)
            if best is None or key < (best[0], best[1]):
                best = (len(nodes), leftover, nodes, counts)
        return None if best is None else make_allocation(job, best[2], best[3])


def _fewest_servers(slots: np.ndarray, learners: int) -> tuple[list[int], list[int]]:
    """Several nodes, as few as possible: fullest-capacity first, then the tightest node for the rest."""
    order = np.argsort(-slots, kind="stable")
    nodes: list[int] = []
    counts: list[int] = []
    remaining = learners
    for n in order:
        take = int(min(slots[n], remaining))
        if take <= 0:
            break
        nodes.append(int(n))
        counts.append(take)
        remaining -= take
        if remaining == 0:
            break
    # The last node only needs `counts[-1]` slots: swap in the tightest node that has that many.
    last_need = counts[-1]
    used = set(nodes[:-1])
    candidates = [int(n) for n in np.flatnonzero(slots >= last_need) if int(n) not in used]
    if candidates:
        nodes[-1] = min(candidates, key=lambda n: (int(slots[n]), n))
    return nodes, counts
