"""SYNERGY: CPU- and memory-aware placement (Mohan et al., "Looking Beyond GPUs for DNN Scheduling on
Multi-Tenant Clusters", OSDI'22), after its greedy Synergy-TUNE.

Each learner asks for what its model family benefits from (core/profiles.py: CPUs and GB per GPU x its
GPUs) instead of a GPU-proportional share: image models get more CPUs than proportional, language models
fewer. The multi-dimensional demand is packed onto servers; when it fits nowhere, the demand is lowered
toward the proportional share, as Synergy-TUNE does. Synergy-TUNE's steps (its simulator,
msr-fiddle/synergy, simulator/resources/cluster.py `_tune`) are, in order: the job's demand on one server
(the one with the fewest free GPUs that fits it), the demand spread over servers, the demand switched to
the GPU-proportional share (one server, then spread), and last, shrinking jobs on a server that hold more
than their proportional share back to it. This placer follows the first four in that order, with two
differences:

- The lowered demand is per dimension min(want, proportional share): a job never asks for more than it
  benefits from (Synergy switches all dimensions to the share once any exceeds it). Between the two, a
  learner gets as much of its want as the server can spare (below).
- A placer cannot shrink running jobs, so the last step is replaced by a reservation that makes it
  unnecessary: a server never gives a learner CPUs or memory above its proportional share out of what
  the server's other free GPUs would need for theirs (`reserve`, a fraction of that share, default 1).
  So every free GPU keeps its proportional share of CPUs and memory, a job placed later can always get
  min(want, share), and no GPU is stranded because CPUs ran out. More than the share comes only from
  what jobs below their share (language models) leave over.

Learners without GPUs are placed by PACK at their request. An elastic job that grows keeps the CPUs and
memory per learner of its running learners. Requests are not honoured as minimums (Synergy's demand
comes from profiling, not from the user); use pack or spread where requests must hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation
from loadmaster.core.profiles import family_of
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    Placer,
    any_of,
    best_spanning,
    demand_slots,
    failure_reason,
    make_allocation,
    pack_by_slots,
)
from loadmaster.scheduling.placement.pack import PackPlacer
from loadmaster.scheduling.placement.proportional import groups_in_order, per_gpu_share, place_fixed
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot

Array = npt.NDArray[np.float64]
_WANTED_LIMIT = 4096


class _Demand:
    """One job's per-learner demand on every node: its want, its floor, and what each node can spare."""

    def __init__(self, job: JobView, free: FreeCapacity, reserve: float, wanted: tuple[float, float],
                 per_gpu: tuple[Array, Array]) -> None:
        """`wanted`: the family's CPUs and GB for the learner's GPUs; `per_gpu`: per_gpu_share(cluster)."""
        g = job.spec.gpus_per_learner
        self.want = wanted
        self.g = g
        self.floor: list[Array] = []  # min(want, proportional share) per node
        self.spare: list[Array] = []  # what each node holds beyond the reserve for its free GPUs
        self.keep: list[Array] = []  # reserve kept per learner's own GPUs (its share x `reserve`)
        for want, per, amount in zip(self.want, per_gpu, (free.cpus, free.mem), strict=True):
            share = per * g
            self.floor.append(np.minimum(want, share))
            self.spare.append(amount - reserve * per * free.gpus)
            self.keep.append(reserve * share)
        self.slots_floor = demand_slots(free.gpus, free.cpus, free.mem, g, self.floor[0], self.floor[1])
        self.slots_want = self.slots_floor.copy()
        for want, spare, keep in zip(self.want, self.spare, self.keep, strict=True):
            # k learners at their want leave the node's reserve intact iff k x (want - keep) <= spare.
            extra = want - keep
            positive = extra > 0
            cap = np.floor_divide(np.maximum(spare, 0.0) + 1e-6, np.where(positive, extra, 1.0))
            np.minimum(self.slots_want, np.where(positive, cap, self.slots_want).astype(np.int64),
                       out=self.slots_want)

    def grant_alone(self, learners: int) -> tuple[Array, Array]:
        """CPUs and memory per learner if the whole gang went to each node alone (see grant())."""
        out = []
        for want, floor, spare, keep in zip(self.want, self.floor, self.spare, self.keep, strict=True):
            surplus = spare - learners * (floor - keep)
            out.append(floor + np.minimum(np.maximum(surplus / learners, 0.0), want - floor))
        return out[0], out[1]

    def grant(self, nodes: list[int], counts: list[int]) -> tuple[float, float]:
        """CPUs and memory per learner for `counts[i]` learners on `nodes[i]`: on each node the floor plus
        an equal part of what the node can spare beyond its reserve, up to the want; the gang gets the
        smallest over its nodes (one amount per learner)."""
        out = []
        for want, floor, spare, keep in zip(self.want, self.floor, self.spare, self.keep, strict=True):
            best = want
            for n, k in zip(nodes, counts, strict=True):
                # Left over after k learners at the floor, less the reserve of the node's other free GPUs.
                surplus = float(spare[n]) - k * (float(floor[n]) - float(keep[n]))
                best = min(best, float(floor[n]) + min(max(surplus / k, 0.0), want - float(floor[n])))
            out.append(best)
        return out[0], out[1]


class SynergyPlacer(Placer):
    name = "synergy"

    def __init__(self, reserve: float = 1.0) -> None:
        if not 0 <= reserve <= 1:
            raise ValueError(f"reserve must be in [0, 1], got {reserve}")
        self.reserve = reserve
        self._pack = PackPlacer()
        # (model, GPUs per learner) -> the family's CPUs and GB wanted: cache_key() runs for every queued
        # job in every decision, and finding a model's family is a scan of name prefixes.
        self._wanted: dict[tuple[str, int], tuple[float, float]] = {}
        self._share: tuple[Cluster, tuple[Array, Array]] | None = None  # per_gpu_share of the last cluster

    def _wants(self, model: str, g: int) -> tuple[float, float]:
        wanted = self._wanted.get((model, g))
        if wanted is None:
            if len(self._wanted) >= _WANTED_LIMIT:
                self._wanted.clear()  # model names come from users on a live platform: keep it bounded
            profile = family_of(model)
            wanted = self._wanted[(model, g)] = (profile.cpus_wanted(g), profile.mem_wanted(g))
        return wanted

    def _per_gpu_share(self, cluster: Cluster) -> tuple[Array, Array]:
        share = self._share
        if share is None or share[0] is not cluster:
            share = self._share = (cluster, per_gpu_share(cluster))
        return share[1]

    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        if job.spec.gpus_per_learner == 0:
            return self._pack.place(job, learners, free, snap, prefer)
        if job.allocation is not None:
            a = job.allocation
            return place_fixed(job, learners, free, snap, prefer, a.cpus_per_learner, a.mem_gb_per_learner)
        demand = _Demand(job, free, self.reserve, self._wants(job.spec.model, job.spec.gpus_per_learner),
                         self._per_gpu_share(snap.cluster))
        for within in groups_in_order(snap, job, prefer):
            found = self._tune(demand, learners, free, within)
            if found is not None:
                cpus, mem = demand.grant(*found)
                return make_allocation(job, *found, cpus=cpus, mem_gb=mem)
        return failure_reason(job, learners, free, snap)

    def _tune(self, d: _Demand, learners: int, free: FreeCapacity, groups: Sequence[npt.NDArray[np.bool_]]
              ) -> tuple[list[int], list[int]] | None:
        """Synergy-TUNE's order: the want on one server, the want spread, the lowered demand on one server,
        the lowered demand spread."""
        if not groups:
            return None
        allowed = any_of(groups)
        fits = (d.slots_want >= learners) & allowed
        if fits.any():
            # Best fit: the fewest free GPUs, then the least CPU to spare (keeps roomy servers for big asks).
            idx = np.flatnonzero(fits)
            order = np.lexsort((idx, d.spare[0][idx], free.gpus[idx]))
            return [int(idx[order[0]])], [learners]
        found = best_spanning(groups, d.slots_want, learners, free, d.g)
        if found is not None:
            return found
        fits = (d.slots_floor >= learners) & allowed
        if fits.any():
            # One server below the want: the one that can give the most, then the tightest.
            idx = np.flatnonzero(fits)
            cpus, mem = d.grant_alone(learners)
            order = np.lexsort((idx, free.gpus[idx], -mem[idx], -cpus[idx]))
            return [int(idx[order[0]])], [learners]
        return pack_by_slots(d.slots_floor, learners, free, groups, d.g)

    def cache_key(self, job: JobView, learners: int, snap: Snapshot) -> tuple[object, ...] | None:
        """Placement depends on the model family's want and the GPUs, not on the request. The extra 1 makes
        the key longer than PACK's (used for learners without GPUs), so decide() never compares the two."""
        s = job.spec
        g = s.gpus_per_learner
        if g == 0:
            return super().cache_key(job, learners, snap)
        wanted = self._wants(s.model, g)
        return (learners, g, wanted[0], wanted[1], 1, s.excluded_types)
