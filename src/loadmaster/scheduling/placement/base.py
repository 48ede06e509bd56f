"""The one placer interface: where a job's learners go, given what is free. Policies decide who; placers where."""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.plan import CPU_MEMORY, FRAGMENTATION, NO_CAPACITY, WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


class Placer(ABC):
    name: ClassVar[str]
    # True if cache_key() changes with time alone (a placer that relaxes constraints as jobs wait): a
    # Session then cannot keep jobs in classes between decisions and ranks the whole queue each time.
    time_dependent_key: ClassVar[bool] = False

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

    def next_change_s(self, job: JobView, snap: Snapshot) -> float | None:
        """When this placer's answer for a waiting `job` may change with time alone (no event), or None.

        Placers that relax a constraint the longer a job waits (locality) return the next threshold, so
        that a shell which decides only on events (the simulator) can wake up then.
        """
        return None


_UNBOUNDED = 1 << 40


Demand = float | npt.NDArray[np.float64]  # per learner: one amount, or one per node


def demand_slots(free_gpus: npt.NDArray[np.float64], free_cpus: npt.NDArray[np.float64],
                 free_mem: npt.NDArray[np.float64], gpus: float, cpus: Demand, mem: Demand) -> npt.NDArray[np.int64]:
    """How many learners needing `gpus`, `cpus` and `mem` each node can take out of the free amounts, in
    every dimension at once. `cpus` and `mem` may be per-node arrays (CPU-aware placers give different
    amounts per server); a zero amount never limits."""
    slots: npt.NDArray[np.float64] | None = None
    for amount, per in ((free_gpus, gpus), (free_cpus, cpus), (free_mem, mem)):
        if isinstance(per, np.ndarray):
            positive = per > 0
            k = np.where(positive, np.floor_divide(amount + 1e-6, np.where(positive, per, 1.0)), _UNBOUNDED)
        elif per > 0:
            k = np.floor_divide(amount + 1e-6, per)
        else:
            continue
        slots = k if slots is None else np.minimum(slots, k, out=slots)
    if slots is None:
        return np.full(free_gpus.shape, _UNBOUNDED, dtype=np.int64)
    return slots.astype(np.int64)


def learner_slots(job: JobView, free: FreeCapacity) -> npt.NDArray[np.int64]:
    """How many learners of `job`, at its request, each node can still take, in every dimension at once."""
    s = job.spec
    return demand_slots(free.gpus, free.cpus, free.mem, s.gpus_per_learner, s.cpus_per_learner,
                        s.mem_gb_per_learner)


def whole_gang_nodes(job: JobView, learners: int, free: FreeCapacity, snap: Snapshot) -> npt.NDArray[np.bool_]:
    """Nodes that can take all `learners` at once (the cheap first question every placer asks)."""
    s = job.spec
    # Asked for nearly every job placed: one expression per dimension, with as few NumPy calls as possible.
    mask: npt.NDArray[np.bool_] | None = None
    g, c, m = s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner
    if g > 0:
        mask = free.gpus >= learners * g - 1e-6
    if c > 0:
        ok = free.cpus >= learners * c - 1e-6
        mask = ok if mask is None else np.logical_and(mask, ok, out=mask)
    if m > 0:
        ok = free.mem >= learners * m - 1e-6
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
    g = job.spec.gpus_per_learner
    if learners * g > free.total_gpus + 1e-9:
        return NO_CAPACITY
    groups = type_groups(snap, job)
    buckets = free.buckets
    ranges = None if buckets is None or g <= 0 else bucket_ranges(groups, snap)
    if ranges is not None:
        # Groups of consecutive servers: the learners they take counting GPUs alone, from the free-GPU buckets.
        assert buckets is not None
        if any(bucket_room(bucket_slots(buckets, g, a, b), learners) >= learners for a, b in ranges):
            return CPU_MEMORY
        return FRAGMENTATION
    gslots = np.minimum(gpu_only_slots(job, free), learners)
    for mask in groups:
        if int(gslots[mask].sum()) >= learners:
            return CPU_MEMORY
    return FRAGMENTATION


def make_allocation(job: JobView, nodes: list[int] | npt.NDArray[np.int64],
                    counts: list[int] | npt.NDArray[np.int64], cpus: float | None = None,
                    mem_gb: float | None = None) -> Allocation:
    """An allocation of `counts[i]` learners on `nodes[i]`; each learner gets `cpus` and `mem_gb`
    (default: the job's request)."""
    if len(nodes) == 1:  # the common case: the whole gang on one server
        return allocation_of(job, (int(nodes[0]),) * int(counts[0]), cpus, mem_gb)
    spread: list[int] = []
    for n, c in zip(nodes, counts, strict=True):
        spread.extend([int(n)] * int(c))
    return allocation_of(job, tuple(spread), cpus, mem_gb)


def allocation_of(job: JobView, learner_nodes: tuple[int, ...], cpus: float | None = None,
                  mem_gb: float | None = None) -> Allocation:
    """The allocation of one learner on each of `learner_nodes` (a placer that has them at hand, e.g. best
    fit's whole gang on one server, `(node,) * learners`: most placements, without make_allocation's lists)."""
    s = job.spec
    # Positional (job_id, learner_nodes, gpus, cpus, memory per learner): one per placement, keywords cost more.
    return Allocation(s.job_id, learner_nodes, s.gpus_per_learner, s.cpus_per_learner if cpus is None else cpus,
                      s.mem_gb_per_learner if mem_gb is None else mem_gb)


def tightest_node(whole: npt.NDArray[np.bool_], free: FreeCapacity) -> int | None:
    """Of the nodes in `whole` (each can take the whole gang), the one with the fewest free GPUs, lowest
    index on ties: best fit keeps large holes open for large gangs."""
    # One pass instead of any() then argmin(): a node outside `whole` keys as infinity.
    key = np.where(whole, free.gpus, np.inf)
    node = int(key.argmin())
    return None if key[node] == np.inf else node


# How many servers tightest_by_buckets() may turn down (short of CPUs or memory, outside the mask) before
# it leaves the search to the array scan, which costs the same however many servers it turns down.
_BUCKET_VISITS = 64
GAVE_UP = -1


def tightest_by_buckets(buckets: Mapping[float, list[int]], job: JobView, learners: int, free: FreeCapacity,
                        mask: npt.NDArray[np.bool_] | None, span: tuple[int, int] | None = None) -> int | None:
    """tightest_node(whole_gang_nodes(...) & mask) from free-GPU buckets (FreeCapacity.buckets): the
    buckets in rising free-GPU count, each in server order, so the first server that takes the whole gang
    is the one the scan would pick (fewest free GPUs, lowest index on ties) without a pass over every
    server. None if no server takes it; GAVE_UP after turning down many servers, or for a job the buckets
    do not describe (no GPUs, excluded GPU types): the caller scans the arrays then.

    `span`, (first, end) when `mask` is that run of consecutive servers (Cluster.mask_ranges), takes the
    mask's place: each bucket is cut to those servers by bisection, so other types' servers are never
    looked at (on Philly, a 24gb job's walk would otherwise turn down hundreds of 12gb servers and give up).
    """
    s = job.spec
    g, c, m = s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner
    if g <= 0 or s.excluded_types:
        return GAVE_UP
    # The same bounds as whole_gang_nodes, so a server passes here exactly when it passes there.
    need_g = learners * g - 1e-6
    need_c = learners * c - 1e-6
    need_m = learners * m - 1e-6
    cpus, mem = free.cpus, free.mem
    if span is not None:
        mask = None
    gpus_alone = c <= 0 and m <= 0 and mask is None  # then a bucket's first server takes the whole gang
    left = _BUCKET_VISITS
    for level in buckets:  # in rising order (Snapshot.free_buckets)
        if level < need_g:
            continue
        servers = buckets[level]
        if span is not None:
            a = bisect_left(servers, span[0])
            if gpus_alone:  # the bucket's first server in the span, if any
                if a < len(servers) and servers[a] < span[1]:
                    return servers[a]
                continue
            b = bisect_left(servers, span[1], a)
            if b - a < len(servers):
                servers = servers[a:b]
        elif gpus_alone:
            if servers:
                return servers[0]
            continue
        for node in servers:
            if ((mask is None or mask[node]) and (c <= 0 or cpus[node] >= need_c)
                    and (m <= 0 or mem[node] >= need_m)):
                return node
            left -= 1
            if not left:
                return GAVE_UP
    return None


def fewest_servers(slots: npt.NDArray[np.int64], learners: int) -> tuple[list[int], list[int]]:
    """Several nodes, as few as possible: fullest-capacity first, then the tightest node for the rest.
    `slots` must hold at least `learners` in total; returns (node positions in `slots`, learners each)."""
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
    # In one pass over the array: the fewest slots among the nodes not used yet that have that many, the lowest
    # position on ties (argmin's first), as min() over (slots, position) of those nodes gives it.
    ok = slots >= counts[-1]
    ok[nodes[:-1]] = False
    candidates = np.flatnonzero(ok)
    if candidates.size:
        nodes[-1] = int(candidates[int(np.argmin(slots[candidates]))])
    return nodes, counts


def best_spanning(groups: Iterable[npt.NDArray[np.bool_]], slots_all: npt.NDArray[np.int64], learners: int,
                  free: FreeCapacity, gpus_per_learner: int) -> tuple[list[int], list[int]] | None:
    """The best multi-server placement inside any one of `groups` (node masks): fewest servers, then the
    fewest free GPUs left on them; the first group wins ties. None if no group has room for the gang.

    Each group is searched on its own nodes only, so many small groups (racks) cost little.
    """
    return best_of((_spanning_in(group, slots_all, learners) for group in groups), learners, free, gpus_per_learner)


def _spanning_in(group: npt.NDArray[np.bool_], slots_all: npt.NDArray[np.int64], learners: int
                 ) -> tuple[list[int], list[int]] | None:
    """fewest_servers() on the nodes of `group`, as node indices; None if they cannot hold the gang."""
    idx = np.flatnonzero(group)
    slots = slots_all[idx]
    if int(np.minimum(slots, learners).sum()) < learners:
        return None
    pos, counts = fewest_servers(slots, learners)
    return [int(idx[p]) for p in pos], counts


def best_of(found: Iterable[tuple[list[int], list[int]] | None], learners: int, free: FreeCapacity,
            gpus_per_learner: int) -> tuple[list[int], list[int]] | None:
    """Of one multi-server placement per group (None: none there), best_spanning's pick: fewest servers, then
    the fewest free GPUs left on them; the first wins ties."""
    best: tuple[tuple[int, float], list[int], list[int]] | None = None
    for placed in found:
        if placed is None:
            continue
        nodes, counts = placed
        key = (len(nodes), float(free.gpus[nodes].sum()) - learners * gpus_per_learner)
        if best is None or key < best[0]:
            best = (key, nodes, counts)
    return None if best is None else (best[1], best[2])


def bucket_slots(buckets: Mapping[float, list[int]], gpus_per_learner: int, first: int, end: int
                 ) -> dict[int, list[list[int]]]:
    """The servers first..end-1 by how many learners of `gpus_per_learner` GPUs (> 0) each takes counting GPUs
    alone, from free-GPU buckets (FreeCapacity.buckets: counts in rising order, servers in server order): per
    learner count > 0, the buckets' runs of those servers (each in server order). The counts are
    demand_slots()'s: a float floor division of free + 1e-6."""
    out: dict[int, list[list[int]]] = {}
    for level, servers in buckets.items():
        k = int((level + 1e-6) // gpus_per_learner)
        if k > 0:
            a = bisect_left(servers, first)
            b = bisect_left(servers, end, a)
            if a < b:
                out.setdefault(k, []).append(servers[a:b] if b - a < len(servers) else servers)
    return out


def bucket_room(by_slots: dict[int, list[list[int]]], learners: int) -> int:
    """How many of `learners` the servers of bucket_slots() hold in all, each at most all of them
    (np.minimum(slots, learners).sum())."""
    return sum(len(servers) * min(k, learners) for k, lists in by_slots.items() for servers in lists)


def bucket_ranges(groups: Sequence[npt.NDArray[np.bool_]], snap: Snapshot) -> list[tuple[int, int]] | None:
    """(first, end) of each of type_groups()'s masks, or None if one is not a run of consecutive servers
    (Cluster.mask_ranges): the groups bucket_slots() can count."""
    ranges = snap.cluster.mask_ranges
    out = []
    for mask in groups:
        r = ranges.get(id(mask))
        if r is None:
            return None
        out.append(r)
    return out


def spanning_by_buckets(by_slots: dict[int, list[list[int]]], learners: int) -> tuple[list[int], list[int]] | None:
    """fewest_servers() over a group's servers from bucket_slots() (the same answer, without NumPy passes over
    every server: a multi-server gang cost ~50 us of them, a third in float floor division): fullest first
    (most slots, lowest index on ties), then the last server swapped for the unused one with the fewest slots
    that still takes its learners (lowest index on ties). None if the servers cannot hold the gang
    (best_spanning's test)."""
    if bucket_room(by_slots, learners) < learners:
        return None
    nodes: list[int] = []
    counts: list[int] = []
    remaining = learners
    for k in sorted(by_slots, reverse=True):
        lists = by_slots[k]
        for node in lists[0] if len(lists) == 1 else heapq.merge(*lists):
            take = min(k, remaining)
            nodes.append(node)
            counts.append(take)
            remaining -= take
            if not remaining:
                break
        if not remaining:
            break
    need = counts[-1]
    used = set(nodes[:-1])
    for k in sorted(by_slots):
        if k < need:
            continue
        firsts = [next(n for n in servers if n not in used) for servers in by_slots[k]
                  if not used.issuperset(servers)]
        if firsts:  # the last server itself qualifies: found at its slot count at the latest
            nodes[-1] = min(firsts)
            break
    return nodes, counts


def type_groups(snap: Snapshot, job: JobView, prefer: Sequence[str] | None = None
                ) -> list[npt.NDArray[np.bool_]]:
    """Node masks, one per GPU type the job can run on: a gang never mixes GPU types (its speed would be
    the slowest's), and a type on which the job's throughput is zero (it does not fit in memory there)
    is never offered. With `prefer`, only those types, in that order."""
    cluster = snap.cluster
    spec = job.spec
    if prefer is not None and spec.gpus_per_learner > 0:
        return [mask for mask, _ in preferred_groups(snap, job, prefer)]
    if spec.gpus_per_learner == 0 or (len(cluster.gpu_types) <= 1 and not spec.excluded_types):
        return [cluster.all_nodes_mask]
    return [mask for t, mask in cluster.type_masks if t not in spec.excluded_types]


Span = tuple[int, int] | None  # (first, end) of a mask whose servers are consecutive (Cluster.mask_ranges)


def preferred_groups(snap: Snapshot, job: JobView, prefer: Sequence[str]
                     ) -> tuple[tuple[npt.NDArray[np.bool_], Span], ...]:
    """type_groups(snap, job, prefer) with each mask's span, made once per cluster, preference and exclusions
    (pack asks for nearly every placement a heterogeneity-aware policy makes)."""
    cluster = snap.cluster
    spec = job.spec
    ranges = cluster.mask_ranges
    if spec.gpus_per_learner <= 0:
        return ((cluster.all_nodes_mask, ranges.get(id(cluster.all_nodes_mask))),)
    key = (tuple(prefer), spec.excluded_types)
    found = cluster.preference_cache.get(key)
    if found is None:
        masks = cluster.type_mask_of
        found = cluster.preference_cache[key] = tuple(
            (masks[t], ranges.get(id(masks[t]))) for t in prefer if t in masks and t not in spec.excluded_types)
    return found


def any_of(groups: Sequence[npt.NDArray[np.bool_]]) -> npt.NDArray[np.bool_]:
    """The nodes of any of `groups` (type_groups' masks)."""
    if len(groups) == 1:
        return groups[0]
    out = np.zeros_like(groups[0])
    for g in groups:
        out |= g
    return out


def pack_by_slots(slots_all: npt.NDArray[np.int64], learners: int, free: FreeCapacity,
                  groups: Sequence[npt.NDArray[np.bool_]], gpus_per_learner: int
                  ) -> tuple[list[int], list[int]] | None:
    """PACK's rule on learner slots a placer computed for its own per-learner amounts: the tightest node
    that takes the whole gang, else the fewest servers inside one group. None if it fits nowhere."""
    if not groups:
        return None
    node = tightest_node((slots_all >= learners) & any_of(groups), free)
    if node is not None:
        return [node], [learners]
    return best_spanning(groups, slots_all, learners, free, gpus_per_learner)
