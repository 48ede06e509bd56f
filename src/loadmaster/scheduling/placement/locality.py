"""LOCALITY: one server, else one rack, else anywhere, relaxed the longer a job has waited.

Delay scheduling (Zaharia et al., EuroSys'10): a job that cannot get a local slot waits a bounded time
for one, first for node locality, then for rack locality, before it takes any slot. Philly (Jeon et al.,
USENIX ATC'19) schedules gangs the same way: a job holds out for GPUs on one server, then in one rack,
and the constraint is relaxed as it keeps waiting; the wait it pays shows up as fragmentation delay.

Levels: 0 = the whole gang on one server, 1 = inside one rack, 2 = anywhere (one GPU type always). A job
that has waited `w` seconds (since it was last queued) may take level 0 while w < node_wait_s, level <= 1
while w < rack_wait_s, anything after that. A gang that could never fit at a level even on an empty
cluster (more learners than a server or a rack holds) starts at the first level it can reach. While the
only placement that exists is less local than the job may take, the answer is WaitReason.LOCALITY_WAIT
(decide() does not preempt for it). Within a level it packs tightly, with PACK's helpers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    Placer,
    any_of,
    best_spanning,
    demand_slots,
    failure_reason,
    learner_slots,
    make_allocation,
    tightest_node,
    type_groups,
    whole_gang_nodes,
)
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot

NODE, RACK, ANY = 0, 1, 2
# Waiting times are differences of clock readings: a wake-up planned for exactly a threshold must count
# as having reached it despite rounding.
_EPS_S = 1e-6

# Default thresholds: wait at most about what spreading would cost a one-hour job of the generic family
# (core/profiles.py: cross-server slowdown 0.15, cross-rack 0.40; one hour is the shortest run in Philly's
# multi-GPU sample, docs/workloads.md). Longer jobs lose more by spreading, so for them the wait is cheap;
# a job shorter than that loses at most about as much by waiting as it would by running spread.
DEFAULT_NODE_WAIT_S = 0.15 * 3600.0  # 540 s
DEFAULT_RACK_WAIT_S = 0.40 * 3600.0  # 1,440 s


class LocalityPlacer(Placer):
    name = "locality"
    time_dependent_key = True  # the wait a job has done decides how local it must be

    def __init__(self, node_wait_s: float = DEFAULT_NODE_WAIT_S, rack_wait_s: float = DEFAULT_RACK_WAIT_S) -> None:
        if not (0 <= node_wait_s <= rack_wait_s):
            raise ValueError(f"need 0 <= node_wait_s <= rack_wait_s, got {node_wait_s} and {rack_wait_s}")
        self.node_wait_s = node_wait_s
        self.rack_wait_s = rack_wait_s

    # -- how local a job must still be --------------------------------------------------------------------
    def time_level(self, job: JobView, clock: float) -> int:
        """The least local level the job's waiting time allows (NODE, RACK or ANY)."""
        waited = clock - job.queued_since + _EPS_S
        if waited < self.node_wait_s:
            return NODE
        if waited < self.rack_wait_s:
            return RACK
        return ANY

    def best_level(self, job: JobView, learners: int, snap: Snapshot,
                   groups: Sequence[npt.NDArray[np.bool_]]) -> int:
        """The most local level the gang could reach on the empty cluster, within `groups` (GPU types)."""
        c = snap.cluster
        s = job.spec
        cap = demand_slots(c.gpu_capacity.astype(np.float64), c.cpu_capacity, c.mem_capacity, s.gpus_per_learner,
                           s.cpus_per_learner, s.mem_gb_per_learner)
        if groups and bool(((cap >= learners) & any_of(groups)).any()):
            return NODE
        capped = np.minimum(cap, learners).astype(np.float64)
        for group in groups:
            per_rack = np.bincount(c.rack_ids[group], weights=capped[group], minlength=len(c.racks))
            if bool((per_rack >= learners).any()):
                return RACK
        return ANY

    def allowed_level(self, job: JobView, learners: int, snap: Snapshot,
                      groups: Sequence[npt.NDArray[np.bool_]]) -> int:
        by_time = self.time_level(job, snap.clock)
        return by_time if by_time == ANY else max(by_time, self.best_level(job, learners, snap, groups))

    # -- placement ------------------------------------------------------------------------------------------
    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        groups = type_groups(snap, job, prefer)
        # With a type preference the type is chosen first (the first listed on which the gang fits at all),
        # and locality applies on that type; without one, all usable types compete at each level.
        candidates = [[mask] for mask in groups] if prefer is not None else [groups]
        for within in candidates:
            found = self._most_local(job, learners, free, snap, within)
            if found is None:
                continue
            level, alloc = found
            # level <= max(time level, best level), the best level computed only when it matters.
            if level <= self.time_level(job, snap.clock) or level <= self.best_level(job, learners, snap, within):
                return alloc
            return WaitReason.LOCALITY_WAIT
        return failure_reason(job, learners, free, snap)

    def _most_local(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
                    groups: Sequence[npt.NDArray[np.bool_]]) -> tuple[int, Allocation] | None:
        """The most local placement on the free capacity (level, allocation), packed tightly inside its level."""
        if not groups:
            return None
        whole = whole_gang_nodes(job, learners, free, snap) & any_of(groups)
        node = tightest_node(whole, free)
        if node is not None:
            return NODE, make_allocation(job, [node], [learners])
        slots = learner_slots(job, free)
        g = job.spec.gpus_per_learner
        found = best_spanning(self._racks_with_room(snap, groups, slots, learners), slots, learners, free, g)
        if found is not None:
            return RACK, make_allocation(job, *found)
        found = best_spanning(groups, slots, learners, free, g)
        return None if found is None else (ANY, make_allocation(job, *found))

    @staticmethod
    def _racks_with_room(snap: Snapshot, groups: Sequence[npt.NDArray[np.bool_]], slots: npt.NDArray[np.int64],
                         learners: int) -> Iterator[npt.NDArray[np.bool_]]:
        """Masks of (GPU type, rack) pairs with room for the whole gang; only those are searched."""
        rack_ids = snap.cluster.rack_ids
        capped = np.minimum(slots, learners).astype(np.float64)
        for group in groups:
            per_rack = np.bincount(rack_ids[group], weights=capped[group], minlength=len(snap.cluster.racks))
            for r in np.flatnonzero(per_rack >= learners):
                yield group & (rack_ids == r)

    # -- hooks for decide() and the shells ----------------------------------------------------------------
    def cache_key(self, job: JobView, learners: int, snap: Snapshot) -> tuple[object, ...] | None:
        """The request's key plus how strict the job still is (2 - its time level), so jobs of one shape
        that have waited different times are not confused. A larger, stricter shape inherits a smaller
        one's LOCALITY_WAIT from decide()'s memo even if it fits nowhere at all: it does not fit at its
        level either way, only the reason may be the less precise of two fragmentation-class reasons."""
        s = job.spec
        return (learners, s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner,
                ANY - self.time_level(job, snap.clock), s.excluded_types)

    def next_change_s(self, job: JobView, snap: Snapshot) -> float | None:
        """The next threshold at which the job's allowed level relaxes (None once nothing is left to relax)."""
        level = self.allowed_level(job, job.spec.learners, snap, type_groups(snap, job))
        if level >= ANY:
            return None
        at = job.queued_since + (self.node_wait_s if level == NODE else self.rack_wait_s)
        return at if math.isfinite(at) else None


class StrictLocalityPlacer(LocalityPlacer):
    """Locality that is never relaxed: every gang waits for the most local placement it could ever get."""

    name = "locality-strict"

    def __init__(self) -> None:
        super().__init__(math.inf, math.inf)
