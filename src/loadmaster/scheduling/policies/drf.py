"""DRF: dominant resource fairness across tenants over GPUs, CPUs and memory (Ghodsi et al., NSDI'11).

A tenant's dominant share is the largest fraction of any one resource its running jobs hold (usage /
cluster total, max over GPUs, CPUs, memory), divided by its weight: TenantQuota.gpus where quotas are
given (weighted DRF), 1 for every tenant where none are. Queued jobs are offered by progressive filling:
the tenant with the lowest dominant share goes next (FIFO within a tenant), and its share is recomputed
as soon as one of its jobs starts in this round, so one decide() call fills the cluster the way DRF's
"give the next task to the poorest user" loop does. Where some tenants have quotas, one with none (or a
zero quota) is best-effort: it is offered only what is left after every weighted tenant.

Preemptive, because DL jobs hold their GPUs for hours: without preemption whoever reaches an idle cluster
first keeps it until its jobs end, and progressive filling only ever orders newcomers. Displacement is
limited the way DRF's guarantee reads: each active tenant (queued or running jobs) is entitled to a
dominant share of weight / total active weight (what it would get if every tenant wanted everything).
A job may displace others only if its tenant stays within its entitlement after it starts, and only
jobs of tenants above theirs can be displaced. A displacement therefore never pushes the displacing
tenant above its entitlement, so the two tenants cannot trade jobs back and forth; entitlements move only
when tenants arrive or leave.

CPUs and memory of a job started in this round are counted at its request (the placer may give a CPU-aware
amount; the gate only learns the GPU count); running jobs count what their allocation holds.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import overload

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.scheduling.placement.base import bucket_room, bucket_slots
from loadmaster.scheduling.plan import FRAGMENTATION, NO_CAPACITY, WaitReason
from loadmaster.scheduling.policies.base import Admission, Gate, Policy
from loadmaster.scheduling.policies.srtf import (
    DEFAULT_CHECKPOINT_INTERVAL_S,
    DEFAULT_RESTART_OVERHEAD_S,
    in_checkpoint_window,
    preemption_loss_gpu_s,
)
from loadmaster.scheduling.policies.view_rows import ViewRows
from loadmaster.scheduling.policies.windows import next_window_s
from loadmaster.scheduling.queue_index import Group, JobClass, Key, WalkOrder
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota

_EPS = 1e-12
# As for `las` (las.py): displace a job only in the minute of work after one of its checkpoints, and
# decide again at least that often while jobs wait so that no such window passes unseen.
DEFAULT_MAX_LOSS_S = 60.0
DEFAULT_ROUND_S = 60.0
# Checkpoint windows of each running job that next_change_s follows: past them it asks for a round (more cost
# a little more per call and spare rounds while a gang waits for windows on enough GPUs at once).
WINDOWS_FOLLOWED = 4


# (quotas, active tenants, weight per tenant, fair level): what a gate derived from the quotas and the
# tenants with queued or running jobs, for the next gate to reuse.
_Weights = tuple[Mapping[str, TenantQuota], frozenset[str], dict[str, float], float]
_Shape = tuple[int, int, float, float]  # learners, GPUs, CPUs and memory per learner
# A class whose jobs may not displace anyone, its gang's GPUs, its GPUs per learner and its learners.
_Unable = tuple[JobClass, int, int, int]
# What a gate needs of the cluster's totals (_cluster_totals): 1 / total per resource, the total CPUs and memory,
# and how much of each may be in use for shares to be GPU shares alone.
_Totals = tuple[tuple[float, float, float], float, float, float, float]


def _cluster_totals(c: Cluster) -> _Totals:
    """A cluster's _Totals: sums over every server, and a gate is made at every decision (clusters are immutable,
    DrfPolicy keeps them)."""
    total_gpus, total_cpus, total_mem = c.total_gpus, c.total_cpus, c.total_mem_gb
    # 1 / total per resource; a resource the cluster does not have counts for nobody.
    inv_total = (1.0 / total_gpus if total_gpus > 0 else 0.0, 1.0 / total_cpus if total_cpus > 0 else 0.0,
                 1.0 / total_mem if total_mem > 0 else 0.0)
    return inv_total, total_cpus, total_mem, 1e-6 * max(1.0, total_cpus), 1e-6 * max(1.0, total_mem)


@dataclass(slots=True)
class _Facts:
    """What a gate works out for a tenant from its usage alone (kept per gate, and across gates in DrfGate.memo)."""

    level: tuple[int, float]  # share(): (tier, dominant share / weight)
    over: bool  # over()
    fits: dict[_Shape, bool]  # within_entitlement() by shape, filled as shapes are asked about
    # The tenant's classes whose jobs may not displace anyone (_unable_classes), as of a version of its queue's
    # classes (Group.version), and whether they are all of its classes: _prune asks at every decision, and
    # between two the classes and the usage of most tenants stay the same (kept here, the answer goes with the
    # usage it follows from).
    unable: tuple[Group, int, list[_Unable], bool] | None = None


class DrfGate(Gate):
    """Per-tenant GPU, CPU and memory usage during one decide() call, and the dominant shares from it."""

    def __init__(self, snap: Snapshot, quotas: Mapping[str, TenantQuota],
                 totals: _Totals | None = None, weights: _Weights | None = None,
                 memo_for: Callable[[DrfGate], dict[tuple[str, int], _Facts] | None] | None = None) -> None:
        """`totals`: _cluster_totals(snap.cluster), when the caller already has them. `weights`: an earlier
        gate's `weights`, reused if its quotas and active tenants are this snapshot's. `memo_for`: gives `memo`
        once the weights are known (None: no memo)."""
        super().__init__(snap)
        inv_total, total_cpus, total_mem, cpus_unused, mem_unused = (totals if totals is not None
                                                                      else _cluster_totals(snap.cluster))
        self.inv_total = inv_total
        # decide() runs once per event, so the gate must not walk every running job each time. When
        # no running job holds CPUs or memory (the free arrays say so in two sums), shares are GPU
        # shares and the snapshot's per-tenant GPU counts are enough; otherwise a tenant's usage is
        # summed over its running jobs on first use, for the tenants a round actually asks about.
        self.gpus_only = (total_cpus - snap.free_cpu_total <= cpus_unused
                          and total_mem - snap.free_mem_total <= mem_unused)
        self.usage: dict[str, list[float]] = {}
        # The tenants with running jobs, as the snapshot's mapping's keys (not copied: a gate is made at every
        # decision).
        self.running_tenants: Collection[str] = snap.tenant_gpus if self.gpus_only else snap.running_by_tenant
        # The tenants with queued jobs, where the caller knows them (a Session's walk: its groups' names, every
        # queued job in one by then); else the snapshot's queued_tenants, worked out on its first read (at
        # about every decision).
        self.queued_tenants: Collection[str] | None = None
        # Worked out on first use (_weigh(), from facts(), which every share, entitlement and memo lookup goes
        # through), not here: a gate is made at every decision, and one for a lone arrival that starts at once
        # (decide.start_alone, most decisions on the 117,000-job trace) is only asked admit(), which needs none
        # of them; the active tenants alone cost a twentieth of that run. (Set here all the same, so that every
        # gate has the same attributes: CPython then reads them fastest.)
        self._quotas, self._earlier, self._memo_for = quotas, weights, memo_for
        self._weighed = False
        self.weight: dict[str, float] = {}  # tenant -> its weight (its GPU quota, 1 without quotas; 0: best effort)
        self.fair_level = 0.0  # entitled dominant share divided by weight: the same for every weighted tenant
        # What the next gate may reuse while the quotas and the active tenants stay the same (most decisions:
        # tenants come and go far less often than jobs). Read-only once made.
        self.weights: _Weights | None = None
        # Facts of a tenant that only follow from its GPUs, the weights and the cluster (DrfPolicy._memo, given
        # where shares are GPU shares): (tenant, GPUs held) -> its _Facts.
        # A gate is made at every decision, most tenants' GPUs did not change since the last, and working out
        # their shares and which shapes fit their entitlements again cost a tenth of a decision. Not used for a
        # tenant whose usage this round changed (`moved`).
        self.memo: dict[tuple[str, int], _Facts] | None = None
        # Tenant -> what follows from its usage now (share(), over(), the shapes within its entitlement), worked
        # out on first ask and dropped when its usage changes: share() and over() are asked at every step of a
        # walk, and one object per tenant is one store where four dicts were four.
        self._facts: dict[str, _Facts] = {}
        # Is a victim released in this round (remove()) and not wholly given back? Until then usage has only
        # grown, and the free GPUs have only fallen, by the GPUs of the jobs started. A displacement search
        # that fails gives back every victim it released (and decide() restores the free capacity it saved):
        # under overload most searches fail (570 of 919 on the 3,000-job trace), and each left the rest of
        # the walk to visit every pruned class. Given back counts only where usage is GPUs alone (gpus_only:
        # a victim holds no CPUs or memory), whose books the give-back restores exactly (whole numbers).
        self.released = False
        self._out: set[str] = set()  # victims released and not given back (job ids), where gpus_only
        self.started_gpus = 0
        self.moves = 0  # usage changes booked (starts, releases)
        self.moved: set[str] = set()
        # Tenant -> its displaceable running jobs in victim order (DrfPolicy._displaceable_of).
        self.displaceable_victims: dict[str, list[tuple[tuple[float, ...], JobView]]] = {}

    def _weigh(self) -> None:
        """weight, fair_level, weights and memo, from the quotas and the active tenants (queued or running); once."""
        quotas, earlier = self._quotas, self._earlier
        queued = self.queued_tenants
        active = (self.snap.queued_tenants if queued is None else frozenset(queued)).union(self.running_tenants)
        if earlier is not None and earlier[0] is quotas and earlier[1] == active:
            weight, fair_level = earlier[2], earlier[3]
        else:
            weighted = any(q.gpus > 0 for q in quotas.values())
            weight = {}
            for t in active:
                q = quotas.get(t)
                weight[t] = (float(q.gpus) if q is not None else 0.0) if weighted else 1.0
            total_weight = sum(weight.values())
            fair_level = 1.0 / total_weight if total_weight > 0 else 0.0
        self.weight, self.fair_level = weight, fair_level
        self.weights = (quotas, active, weight, fair_level)
        self._weighed = True
        if self._memo_for is not None:
            self.memo = self._memo_for(self)

    def _usage(self, tenant: str) -> list[float]:
        """GPUs, CPUs and memory the tenant holds (as of the snapshot, plus this round's changes)."""
        u = self.usage.get(tenant)
        if u is None:
            if self.gpus_only:
                u = [float(self.snap.tenant_gpus.get(tenant, 0)), 0.0, 0.0]
            else:
                u = [0.0, 0.0, 0.0]
                for job in self.snap.running_by_tenant.get(tenant, ()):
                    a = job.allocation
                    if a is not None:
                        n = len(a.learner_nodes)
                        u[0] += n * a.gpus_per_learner
                        u[1] += n * a.cpus_per_learner
                        u[2] += n * a.mem_gb_per_learner
            self.usage[tenant] = u
        return u

    def dominant(self, tenant: str, extra: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> float:
        """Unweighted dominant share of `tenant`, with `extra` resources added."""
        u = self._usage(tenant)
        ig, ic, im = self.inv_total
        return max((u[0] + extra[0]) * ig, (u[1] + extra[1]) * ic, (u[2] + extra[2]) * im)

    def facts(self, tenant: str) -> _Facts:
        """The tenant's _Facts, kept in this gate until its usage changes; from `memo` (worked out there if new)
        where that applies."""
        facts = self._facts.get(tenant)
        if facts is not None:
            return facts
        if not self._weighed:
            self._weigh()
        memo = self.memo
        if memo is None or tenant in self.moved:
            facts = self._work_out(tenant)
        else:
            key = (tenant, self.snap.tenant_gpus.get(tenant, 0))
            found = memo.get(key)
            if found is None:
                found = memo[key] = self._work_out(tenant)
            facts = found
        self._facts[tenant] = facts
        return facts

    def _work_out(self, tenant: str) -> _Facts:
        w = self.weight.get(tenant, 0.0)
        d = self.dominant(tenant)
        return _Facts((0, d / w) if w > 0 else (1, d), not (w > 0 and d <= (self.fair_level + _EPS) * w), {})

    def over(self, tenant: str) -> bool:
        """Is the tenant past its entitlement already? Then no job of it is within it (a job only adds to its
        dominant share): one answer for all its shapes, where most asks are (DRF's walk, next_change_s)."""
        facts = self._facts.get(tenant)
        return (facts if facts is not None else self.facts(tenant)).over

    def share(self, tenant: str) -> tuple[int, float]:
        """(tier, dominant share / weight): weighted tenants (tier 0) before best-effort ones (tier 1).
        Kept until the tenant's usage changes: progressive filling asks for it at every step. (The lookup of
        facts() inline here, in over() and in within_entitlement(): they are asked at every step of a walk.)"""
        facts = self._facts.get(tenant)
        return (facts if facts is not None else self.facts(tenant)).level

    def within_entitlement(self, job: JobView) -> bool:
        """Would the job's tenant stay within its entitled dominant share if the job started?"""
        s = job.spec
        t = s.tenant
        facts = self._facts.get(t)
        if facts is None:
            facts = self.facts(t)
        if facts.over:
            return False
        fits = facts.fits
        shape = (s.learners, s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner)
        ok = fits.get(shape)
        if ok is None:
            w = self.weight.get(t, 0.0)
            n = s.learners
            extra = (float(n * s.gpus_per_learner), n * s.cpus_per_learner, n * s.mem_gb_per_learner)
            ok = fits[shape] = w > 0 and self.dominant(t, extra) <= (self.fair_level + _EPS) * w
        return ok

    def above_entitlement(self, tenant: str) -> bool:
        tier, level = self.share(tenant)
        return tier == 1 or level > self.fair_level + _EPS

    def _move(self, tenant: str, amount: tuple[float, float, float], sign: float) -> None:
        u = self._usage(tenant)
        for i in range(3):
            u[i] += sign * amount[i]
        self._facts.pop(tenant, None)
        self.moved.add(tenant)
        self.moves += 1

    def add(self, job: JobView, learners: int | None = None) -> None:
        # Per learner: what a running job's allocation holds, else the request. `learners` may be only part
        # of the gang (an elastic job started smaller, or a victim cut to its minimum).
        a = job.allocation
        s = job.spec
        if a is not None:
            per = (a.gpus_per_learner, a.cpus_per_learner, a.mem_gb_per_learner)
            n = a.learners if learners is None else learners
            if n >= a.learners and job.job_id in self._out:  # a victim given back all it held
                self._out.discard(job.job_id)
                self.released = bool(self._out)
        else:
            per = (s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner)
            n = s.learners if learners is None else learners
            self.started_gpus += n * per[0]
        self._move(s.tenant, (float(n * per[0]), n * per[1], n * per[2]), 1.0)

    def remove(self, job: JobView) -> None:
        a = job.allocation
        assert a is not None
        if self.gpus_only:
            self._out.add(job.job_id)
        self.released = True
        n = a.learners
        self._move(job.spec.tenant, (float(a.gpus), n * a.cpus_per_learner, n * a.mem_gb_per_learner), -1.0)

    def admit(self, job: JobView, gpus: int) -> Admission:
        # DRF is work conserving and never holds a job back: whether a job is within its tenant's
        # entitlement matters only for displacement (preemptor, may_preempt), so it is not computed here
        # for every queued job.
        return Admission.GUARANTEED

    @classmethod
    def may_deny(cls) -> bool:
        return False


# A tenant's entry in the progressive-filling heap: (tier, weighted share, submit time of its next job,
# tenant, position of that job in its queue).
_Entry = tuple[int, float, float, str, int]


def _current_top(heap: list[_Entry], share: Callable[[str], tuple[int, float]]) -> _Entry | None:
    """The top entry once it is current (None if the heap is empty). An entry goes stale when its tenant's
    usage changes (a start, or a victim released) and is refreshed when it reaches the top. A tenant's
    share can only fall while it is not on top (victims), so a stale entry is offered late at worst,
    never early."""
    while heap:
        top = heap[0]
        now = share(top[3])
        if now[0] == top[0] and now[1] == top[1]:
            return top
        heapq.heapreplace(heap, (now[0], now[1], top[2], top[3], top[4]))
    return None


def _replace_top(heap: list[_Entry], entry: _Entry) -> None:
    """The top tenant's entry for its next job. Still no larger than both children (its share did not grow:
    nothing started), the heap stays a heap with the entry in place, no sifting; else the usual replace."""
    n = len(heap)
    if (n < 2 or entry <= heap[1]) and (n < 3 or entry <= heap[2]):
        heap[0] = entry
    else:
        heapq.heapreplace(heap, entry)


class _ProgressiveOrder(Sequence[JobView]):
    """Queued jobs in progressive-filling order, computed lazily: iterating asks the gate for the current
    shares, so a tenant whose job decide() has just started drops back. Iterate it once; indexing gives
    the order the shares give at that moment."""

    def __init__(self, gate: DrfGate, queued: Sequence[JobView]) -> None:
        self.gate = gate
        self.by_tenant: dict[str, list[JobView]] = {}
        for job in sorted(queued, key=lambda j: (j.spec.submit_time_s, j.spec.job_id)):
            self.by_tenant.setdefault(job.spec.tenant, []).append(job)
        self._len = len(queued)
        self._list: list[JobView] | None = None

    def __iter__(self) -> Iterator[JobView]:
        share = self.gate.share
        by_tenant = self.by_tenant
        heap: list[_Entry] = [(*share(t), js[0].spec.submit_time_s, t, 0) for t, js in by_tenant.items()]
        heapq.heapify(heap)
        while (top := _current_top(heap, share)) is not None:
            _, _, _, t, i = top
            jobs = by_tenant[t]
            yield jobs[i]
            i += 1
            if i == len(jobs):
                heapq.heappop(heap)
                continue
            now = share(t)
            _replace_top(heap, (now[0], now[1], jobs[i].spec.submit_time_s, t, i))

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> JobView: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[JobView]: ...

    def __getitem__(self, i: int | slice) -> JobView | Sequence[JobView]:
        if self._list is None:
            self._list = list(iter(self))
        return self._list[i]


class _SkippingProgressiveOrder:
    """_ProgressiveOrder for a Session's walk (queue_index.WalkOrder): the same heap of tenants, entries and
    stale-entry refreshes, step for step, except that the jobs whose class was answered since the last
    start are not handed out. decide() answers those from its memo without changing anything, so while
    they would be handed out the tenant on top stays on top (its next entry is no larger than its
    children's, which nothing touches), and they are skipped in one go: to the first job of an unanswered
    class if the tenant is still on top by then, else to where the tenant's entry goes down the heap."""

    def __init__(self, gate: DrfGate, groups: Mapping[str, Group], class_of: Callable[[str], JobClass],
                 migrate: bool = False) -> None:
        self.gate = gate
        self.share = gate.share
        self.groups = groups
        self.class_of = class_of
        self.answered_since: set[JobClass] = set()
        self.handed: tuple[str, int] | None = None  # (tenant, position) of the job handed out last
        # Classes answered without a visit (_prune), with the answer, skipped like answered ones while no
        # victim has been released in this round. Which of them the walk has passed (so a visit would have
        # answered them) follows from each tenant's position in its queue, now and at the last start.
        self.free = gate.snap.free_gpu_total  # FreeCapacity.total_gpus at the round's start
        # Tenants whose every class is pruned stay out of the heap (_prune's `whole`): the walk would only pass
        # their queues, handing out nobody, and under overload they are most tenants at most walks (DRF on the
        # 3,000-job trace: 29,082 of 37,040 heap entries, and half the steps of next()). Where the walk would
        # be in such a queue follows from the entry of the job handed out last (_passed); a tenant comes back
        # into the heap there, with the share it had (its entry's, never refreshed until then) when one of
        # its classes is unpruned. Tenant -> (tier, level) as the walk began.
        out: dict[str, tuple[int, float]] = {}
        self.out = out
        self.pruned: dict[JobClass, WaitReason] = self._prune(gate, groups, self.free, migrate, out)
        heap: list[_Entry] = []
        if len(out) < len(groups):
            share = gate.share
            for name, g in groups.items():
                if name not in out:
                    tier, level = share(name)
                    heap.append((tier, level, _submit(g.keys[0]), name, 0))
            heapq.heapify(heap)
        # Else every class is pruned: the walk would pass every tenant's queue handing out nobody (nothing is
        # attempted, so no victim is released and nothing is unpruned), and next() settles them all at once.
        # Under overload that is half of the walks (DRF on the 3,000-job trace: 4,579 of 9,339).
        self.heap = heap
        self.skip: set[JobClass] = set(self.pruned)  # answered_since | pruned
        self.pos: dict[str, int] = {}  # tenant -> its first job not handed out or skipped yet
        self.pos_at_start: dict[str, int] = {}
        self.last: _Entry | None = None  # the heap entry of the job handed out last
        self.last_start: _Entry | None = None  # ... and of the last one started
        self.settled: list[tuple[JobClass, WaitReason]] = []

    @staticmethod
    def _prune(gate: DrfGate, groups: Mapping[str, Group], free: float,
               migrate: bool = False,
               whole: dict[str, tuple[int, float]] | None = None) -> dict[JobClass, WaitReason]:
        """The classes whose every visit in this round gives one answer, as long as no victim is released, of a
        tenant that may not displace anyone (outside its entitlement, which its own starts only take it
        further from): NO_CAPACITY for a gang larger than the free GPUs (which only fall as jobs start);
        FRAGMENTATION for a learner larger than any server's free GPUs while the gang is not, or for a gang
        whose learners the servers' free GPUs cannot hold (placement.base.failure_reason's count, on every
        server whatever its type: the placer fails and classifies it so), until starts take the free GPUs
        below the gang (started() then walks the class again; the free GPUs, and so that count, only fall
        until then). Under overload that is most classes, and decide() would answer each at every decision.
        With `migrate`, a FRAGMENTATION class may start by moving running jobs: it is visited (moves never add
        free GPUs: NO_CAPACITY holds). `whole` gets the tenants whose every class is pruned, each with its share()
        (which the walk keeps for them: _SkippingProgressiveOrder.out)."""
        # Every class of every queued tenant is looked at, at every decision: the bounds are looked up once
        # here, not per class; and which classes may not displace anyone comes from the tenant's _Facts, kept
        # there while its usage and its queue's classes stay the same.
        above_free = free + 1e-9
        above_largest = math.inf if migrate else gate.snap.max_free_gpus + 1e-9  # FreeCapacity.max_node_gpus
        pruned: dict[JobClass, WaitReason] = {}
        snap = gate.snap
        room: dict[tuple[int, int], bool] = {}  # (GPUs per learner, learners) -> the servers hold the learners
        for name, group in groups.items():
            facts = gate.facts(name)
            unable = facts.unable
            if unable is None or unable[0] is not group or unable[1] != group.version:
                classes = _unable_classes(gate, group, facts.over)
                unable = facts.unable = (group, group.version, classes, len(classes) == len(group.classes))
            every = unable[3]  # so far, every class of the tenant pruned
            for cls, gang, g, n in unable[2]:
                if gang > above_free:
                    reason = NO_CAPACITY
                elif g > above_largest:
                    reason = FRAGMENTATION
                elif migrate or n <= 1 or g <= 0:
                    every = False
                    continue
                else:
                    fits = room.get((g, n))
                    if fits is None:
                        fits = room[(g, n)] = _learner_room(snap, g, n) >= n
                    if fits:
                        every = False
                        continue
                    reason = FRAGMENTATION
                pruned[cls] = reason
            if every and whole is not None:
                whole[name] = facts.level
        return pruned

    def answered(self, cls: JobClass) -> None:
        self.answered_since.add(cls)
        self.skip.add(cls)

    def started(self, cls: JobClass, i: int, order: Key, key: Key) -> None:
        self.answered_since.clear()
        if self.pruned:
            self.pos_at_start = dict(self.pos)
            self.last_start = self.last
            # A class pruned as FRAGMENTATION whose gang no longer fits in the free GPUs would now answer
            # NO_CAPACITY: it is walked again (the Session learns the new reason from that visit).
            free = self.free - self.gate.started_gpus
            moved = [c for c, r in self.pruned.items()
                     if r is FRAGMENTATION and _gang_gpus(c) > free + 1e-9]
            if moved:
                self._unprune(moved)
            self.skip = set(self.pruned)
        else:
            self.skip = set()

    def _unprune(self, classes: Iterable[JobClass]) -> None:
        """Pruned classes walked again (a victim was released: capacity or a tenant's share may have moved
        back; or a FRAGMENTATION class's answer changes). Those passed already were given their answer
        (settled), and those passed since the last start stay answered until the next one, as a visit
        would have left them."""
        out = self.out
        for cls in list(classes):
            reason = self.pruned.pop(cls)
            t = str(cls.group)
            keys = self.groups[t].keys
            if t in out:
                self._back(t, keys)
            now = self.pos.get(t, 0)
            if _has_key_between(cls.keys, keys, 0, now):
                self.settled.append((cls, reason))
                if _has_key_between(cls.keys, keys, self.pos_at_start.get(t, 0), now):
                    self.answered_since.add(cls)
        self.skip = self.answered_since | set(self.pruned)

    def next(self) -> tuple[JobClass, int, Key, Key] | None:
        heap = self.heap
        if self.handed is not None:
            self._after(*self.handed)
            self.handed = None
        if self.pruned and self.gate.released:
            self._unprune(self.pruned)
        while (top := _current_top(heap, self.share)) is not None:
            tier, level, _, t, i = top
            group = self.groups[t]
            p = self._first_unanswered(group, i)
            if p > i:
                end = self._stays_on_top(group, i, top)
                if p >= end:  # every job it would hand out before leaving the top is answered
                    self.pos[t] = end
                    if end == len(group.keys):
                        heapq.heappop(heap)
                    else:
                        heapq.heapreplace(heap, (tier, level, _submit(group.keys[end]), t, end))
                    continue
                heap[0] = (tier, level, _submit(group.keys[p]), t, p)
            self.pos[t] = p
            self.handed = (t, p)
            self.last = heap[0]
            key = group.keys[p]
            cls = self.class_of(group.views[p].job_id)
            return cls, bisect_left(cls.keys, key), (), key
        if self.pruned:  # the walk passed every job: the classes still pruned were answered
            self.settled += list(self.pruned.items())
            self.pruned.clear()
        return None

    def _back(self, t: str, keys: list[Key]) -> None:
        """A tenant left out of the heap comes back where the walk would have it: past every job whose entry is
        below that of the job handed out last (now) or started last (at the last start)."""
        tier, level = self.out.pop(t)
        now = self.pos[t] = _passed(keys, tier, level, t, self.last)
        self.pos_at_start[t] = _passed(keys, tier, level, t, self.last_start)
        if now < len(keys):
            heapq.heappush(self.heap, (tier, level, _submit(keys[now]), t, now))

    def _after(self, t: str, i: int) -> None:
        """_ProgressiveOrder after handing out the tenant's job i: its next job's entry, at the top if it is
        no larger than both children, else down the heap."""
        heap = self.heap
        group = self.groups[t]
        i += 1
        self.pos[t] = i
        if i == len(group.keys):
            heapq.heappop(heap)
            return
        now = self.share(t)
        _replace_top(heap, (now[0], now[1], _submit(group.keys[i]), t, i))

    def _first_unanswered(self, group: Group, i: int) -> int:
        """The first position at or after i in the tenant's queue whose class has not been answered."""
        first = len(group.keys)
        at = group.keys[i]
        answered = self.skip
        for cls in group.classes:
            if cls in answered:
                continue
            j = bisect_left(cls.keys, at)
            if j < len(cls.keys):
                first = min(first, bisect_left(group.keys, cls.keys[j]))
        return first

    def _stays_on_top(self, group: Group, i: int, top: _Entry) -> int:
        """The first position after i whose entry would be larger than a child of the top (the tenant then
        leaves the top), or the queue's length."""
        heap = self.heap
        n = len(heap)
        if n < 2:
            return len(group.keys)
        bound = heap[1] if n < 3 or heap[1] <= heap[2] else heap[2]
        tier, level, _, t, _ = top
        # The top's share is at most the bound's: its entries below the bound are all of them (a lower share) or
        # those before a later submit time, or the same one and a tenant name that sorts after the bound's.
        return max(i + 1, _passed(group.keys, tier, level, t, bound))


def _unable_classes(gate: DrfGate, group: Group, over: bool) -> list[_Unable]:
    """The group's classes (but those answered on their own) whose jobs may not displace anyone: its tenant is
    past its entitlement (`over`), or would be with one of them started. In the group's order."""
    within = gate.within_entitlement
    unable = []
    for cls in group.classes:
        if cls.solo is None:  # else rejected, or elastic: answered on its own
            view = cls.views[0]
            if over or not within(view):
                spec = view.spec
                g, n = spec.gpus_per_learner, spec.learners
                unable.append((cls, n * g, g, n))
    return unable


def _learner_room(snap: Snapshot, per_learner: int, learners: int) -> int:
    """How many of `learners` learners of `per_learner` GPUs the servers' free GPUs hold, each server counted
    up to `learners` (placement.base.failure_reason's count, over every server)."""
    buckets = snap.free_buckets
    if buckets is None:
        return int(np.minimum(np.floor_divide(snap.free_gpus + 1e-6, per_learner), learners).sum())
    return bucket_room(bucket_slots(buckets, per_learner, 0, len(snap.free_gpus)), learners)


def _passed(keys: list[Key], tier: int, level: float, t: str, entry: _Entry | None) -> int:
    """How many of a tenant's jobs, at (tier, level) all along, have entries (tier, level, submit time, t,
    position) below `entry` (another tenant's; None: none), i.e. were passed by the time the walk handed out
    that entry's job: before anyone is released, shares only grow, so the walk takes entries in rising order."""
    if entry is None:
        return 0
    if (tier, level) != entry[:2]:
        return len(keys) if (tier, level) < entry[:2] else 0
    # Entries (tier, level, submit_j, t, j) grow with j: those below `entry` have an earlier submit time, or
    # the same one where the tenant's name sorts before the entry's.
    submit = entry[2]
    return bisect_right(keys, submit, key=_submit) if t < entry[3] else bisect_left(keys, submit, key=_submit)


def _gang_gpus(cls: JobClass) -> int:
    spec = cls.views[0].spec
    return spec.learners * spec.gpus_per_learner


def _has_key_between(keys: list[Key], queue: list[Key], a: int, b: int) -> bool:
    """Does `keys` (a class's, sorted) hold a key of queue[a:b] (its tenant's queue, sorted)?"""
    if a >= b:
        return False
    j = bisect_left(keys, queue[a])
    return j < len(keys) and (b == len(queue) or keys[j] < queue[b])


def _window_row(job: JobView) -> tuple[float, float, float, float]:
    """What a running job's checkpoint windows follow from, and what it holds: GPUs, work done, rate, as_of."""
    a = job.allocation
    return (float(a.gpus) if a is not None else 0.0, job.work_done_s, job.rate, job.as_of)


def _first(pair: tuple[tuple[float, ...], JobView]) -> tuple[float, ...]:
    return pair[0]


def _by_tenant(gate: DrfGate, groups: Mapping[Hashable, Group]) -> Mapping[str, Group]:
    """A Session's groups, named by tenant (order_group), with the gate told that their names are the tenants
    with queued jobs (every queued job is in a group by the time they are walked). Typed so, not converted:
    str() of each name cost a call per tenant at every decision."""
    by_tenant: Mapping[str, Group] = groups  # type: ignore[assignment]  # (a cast() costs a call too)
    gate.queued_tenants = by_tenant.keys()
    return by_tenant


def _submit(key: Key) -> float:
    """A DRF order key's submit time (order_key: submit time, job id)."""
    return key[0]  # type: ignore[return-value]  # (a cast() here costs a call per bisection step)


class DrfPolicy(Policy):
    name = "drf"
    preemptive = True

    def __init__(self, quotas: Mapping[str, TenantQuota] | None = None,
                 max_loss_s: float | None = DEFAULT_MAX_LOSS_S,
                 checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S,
                 round_s: float | None = DEFAULT_ROUND_S) -> None:
        # Quotas given here override the snapshot's (whose GPU quotas are the weights).
        self.quotas = dict(quotas) if quotas else None
        self.max_loss_s = max_loss_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        # Displaceability changes with time alone (checkpoint windows), so decide again while jobs wait.
        self.round_s = round_s if max_loss_s is not None else None
        # The gate of the snapshot being decided: decide() asks for gate() and then rank(), and the
        # order must follow the usage the gate books as jobs start. Held for one call, keyed by snapshot.
        self._current: tuple[Snapshot, DrfGate] | None = None
        # The last cluster's _Totals (clusters are immutable).
        self._totals: tuple[Cluster, _Totals] | None = None
        # The last gate's weights and fair level, with the quotas and active tenants they came from.
        self._weights: _Weights | None = None
        # DrfGate.memo, for gates whose weights, fair level and cluster totals are these (weights by identity).
        self._memo: tuple[dict[str, float], float, tuple[float, float, float],
                          dict[tuple[str, int], _Facts]] | None = None
        # Per running view: GPUs held, work done, rate and as_of, for next_change_s's windows.
        self._rows = ViewRows(4, _window_row)
        # next_change_s's last answer: (running views, free GPUs, gangs that may displace, victims' tenants, clock, the
        # openings at which a gang could start, horizon), reused while the first four stay the same.
        self._quiet: tuple[Sequence[JobView], float, frozenset[tuple[int, int]], tuple[str, ...], float, list[float],
                           float] | None = None

    def gate(self, snap: Snapshot) -> DrfGate:
        totals = self._totals
        if totals is None or totals[0] is not snap.cluster:
            totals = self._totals = (snap.cluster, _cluster_totals(snap.cluster))
        gate = DrfGate(snap, self.quotas if self.quotas is not None else snap.tenants, totals[1], self._weights,
                       self._memo_for)
        self._current = (snap, gate)
        return gate

    def _memo_for(self, gate: DrfGate) -> dict[tuple[str, int], _Facts] | None:
        """A gate's weights are known: kept for the next gate, and its memo (DrfGate.memo) given."""
        self._weights = gate.weights
        if not gate.gpus_only:
            return None
        memo = self._memo
        if memo is None or memo[0] is not gate.weight or memo[1] != gate.fair_level or memo[2] != gate.inv_total:
            memo = self._memo = (gate.weight, gate.fair_level, gate.inv_total, {})
        return memo[3]

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        current = self._current
        gate = current[1] if current is not None and current[0] is snap else self.gate(snap)
        self._current = None
        return _ProgressiveOrder(gate, snap.queued)

    def admits_alone(self, snap: Snapshot, job: JobView) -> bool:
        # A DrfGate admits every job (admit, never_admits: entitlements only limit displacement), so no gate is
        # made for it: at 117,000 jobs most decisions are lone arrivals that start at once (decide.start_alone),
        # and making a gate for each was a twentieth of that run.
        return True

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        assert isinstance(gate, DrfGate)
        return gate.within_entitlement(job)

    # -- a Session keeps each tenant's queue in FIFO order and walks it by progressive filling ----------
    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (job.spec.submit_time_s, job.spec.job_id)

    def order_group(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return job.spec.tenant

    def walk_order(self, gate: Gate, groups: Mapping[Hashable, Group], class_of: Callable[[str], JobClass],
                   migrate: bool = False) -> WalkOrder | None:
        assert isinstance(gate, DrfGate)
        return _SkippingProgressiveOrder(gate, _by_tenant(gate, groups), class_of, migrate)

    def settles_every_class(self, snap: Snapshot,
                            groups: Mapping[Hashable, Group]) -> Mapping[JobClass, WaitReason] | None:
        """Every class pruned (_SkippingProgressiveOrder._prune): the walk hands out nobody and settles each with
        its pruned answer. Those answers follow from the free GPUs and the tenants' entitlements alone, so they
        hold until an event; and no class's first job may displace anyone (next_change_s then says infinity)."""
        whole: dict[str, tuple[int, float]] = {}
        gate = self.gate(snap)
        pruned = _SkippingProgressiveOrder._prune(gate, _by_tenant(gate, groups), snap.free_gpu_total, whole=whole)
        return pruned if len(whole) == len(groups) else None

    def next_change_s(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """Shares change only with events, so if no waiting class may displace anyone now, none may until
        one. Else displaceable jobs are added only when a running job of a tenant above its entitlement
        completes a checkpoint (only those may be displaced, and which tenants those are changes only with
        events), and a round then can start a gang only if some server count holds its learners once the
        jobs in their windows at that time are released: a window of a job too small, or on the wrong
        servers, lets nobody start, and the round it would wake is not needed (_openings)."""
        # The gate of the decision just made on this snapshot, if it booked nothing (a plan that changed
        # nothing: the shell's usual reason to ask), is the gate a fresh one would be, its answers cached.
        current = self._current
        gate = current[1] if current is not None and current[0] is snap and not current[1].moves else self.gate(snap)
        self._current = None  # a gate for this question only, not for the next rank()
        is_over, within = gate.over, gate.within_entitlement
        # The gangs that may displace others, as (GPUs per learner, learners; elastic: its minimum).
        gangs = set()
        for h in heads:
            s = h.spec
            if not is_over(s.tenant) and within(h):  # most heads are of tenants past theirs: one lookup
                gangs.add((s.gpus_per_learner, min(s.learners, s.min_learners or s.learners)))
        if not gangs:
            return math.inf
        over = tuple(t for t in gate.running_tenants if gate.above_entitlement(t))
        by_tenant = snap.running_by_tenant
        ckpt, loss = self.checkpoint_interval_s, self.max_loss_s
        if loss is None or ckpt <= 0:
            victims = [v for t in over for v in by_tenant.get(t, ())]
            return next_window_s(victims, snap.clock, ckpt, loss)
        clock = snap.clock
        facts = (snap.running, snap.free_gpu_total, frozenset(gangs), over)
        memo = self._quiet
        if memo is not None and memo[0] is facts[0] and memo[1:4] == facts[1:] and memo[4] <= clock < memo[6]:
            # The same running jobs, free GPUs, gangs and victims' tenants as at an earlier clock before its
            # horizon: the openings found then still hold, less those passed (one within rounding of this
            # clock may not have opened yet: kept, a round made early at worst).
            at, horizon = memo[5], memo[6]
            i = bisect_right(at, clock - abs(clock) * 4e-12 - 4e-9)
            return min(at[i] if i < len(at) else math.inf, horizon)
        victims = [v for t in over for v in by_tenant.get(t, ())]
        at, horizon = self._openings(victims, clock, snap.free_gpus, gangs)
        self._quiet = (*facts, clock, at, horizon)
        return min(at[0] if at else math.inf, horizon)

    def _openings(self, victims: Sequence[JobView], clock: float, free: npt.NDArray[np.float64],
                  gangs: Iterable[tuple[int, int]]) -> tuple[list[float], float]:
        """The clocks before the horizon at which a checkpoint window of one of `victims` opens and, with the
        GPUs of every job in its window then released on its servers, the servers would have room for the
        learners of one of `gangs` (sorted); and the horizon: the earliest opening past the
        WINDOWS_FOLLOWED windows followed per job. A displacement releases only such jobs, so between two
        of these clocks a round finds room for no gang, or only jobs it found in their windows before.
        The window a job is in now (by its work alone, which may count a job not displaceable yet: more
        room, a round made early at worst) was seen by the decision just made and only closes. Openings
        are rounded down and closings up, as windows.py's; room is counted on every server whatever its
        GPU type, CPUs or memory (more room: early at worst)."""
        if not victims:
            return [], math.inf
        gpus, done, rate, as_of = self._rows.gather(victims)
        ckpt, loss = self.checkpoint_interval_s, self.max_loss_s
        assert loss is not None
        moving = rate > 0
        step = np.where(moving, rate, 1.0)
        work = done + rate * np.maximum(0.0, clock - as_of)  # JobView.work_at, element by element
        k = np.floor(work / ckpt)
        # Checkpoints k (the current window's), k+1 ... k+WINDOWS_FOLLOWED (the windows followed), and the
        # one after them (the horizon), as rows; a column per job.
        marks = (k + np.arange(WINDOWS_FOLLOWED + 2.0)[:, None]) * ckpt
        reach = as_of + (marks - done) / step
        early = reach[:-1] - np.abs(reach[:-1]) * 1e-12 - 1e-9  # windows.before()
        end = reach[:-1] + loss / step
        opens = np.where(moving, early, math.inf)
        closes = np.where(moving, end + np.abs(end) * 1e-12 + 1e-9, math.inf)
        # In a window now by work alone: it only closes (never, for a job that does not move). Else the
        # current row is no window.
        now = work - k * ckpt <= loss + 1e-9 * max(1.0, loss)
        opens[0] = -math.inf
        closes[0] = np.where(now, closes[0], -math.inf)
        horizon = float(np.where(moving, reach[-1] - np.abs(reach[-1]) * 1e-12 - 1e-9, math.inf).min())
        # The GPUs of the jobs in their windows, in all, at each joining opening before the horizon (openings
        # sort before closings at one clock: a tie counts both windows, early, never late).
        rows, n = opens.shape
        times = np.concatenate((opens.ravel(), closes.ravel()))
        order = np.argsort(times, kind="stable")
        held = np.concatenate((np.tile(gpus, rows), -np.tile(gpus, rows)))
        total = np.cumsum(held[order])
        at = times[order]
        joining = (order >= n) & (order < rows * n) & (at < horizon)
        # A gang needs at least its GPUs in all: most openings fail here, without counting servers.
        smallest = min(per_learner * learners for per_learner, learners in gangs)
        joining &= total + float(free.sum()) + 1e-9 >= smallest
        if not joining.any():
            return [], horizon
        # Then per server, on the servers the jobs hold (the others keep their free GPUs): one event per
        # window and learner, +GPUs per learner on its server at the opening, - at the closing.
        alloc = [v.allocation for v in victims]
        counts = [len(x.learner_nodes) if x is not None else 0 for x in alloc]
        nodes = np.fromiter(chain.from_iterable(x.learner_nodes for x in alloc if x is not None), np.intp)
        per = np.repeat([float(x.gpus_per_learner) if x is not None else 0.0 for x in alloc], counts)
        col = np.repeat(np.arange(n), counts)
        servers, where = np.unique(nodes, return_inverse=True)
        # Per server: what the windows opened by each clock hold, less what those closed before it hold (a
        # window closing at an opening's clock still counts there).
        wanted = at[joining]
        width = servers.size
        held_at = np.zeros((wanted.size, width))
        for times_of, sign, right in ((opens[:, col].ravel(), 1.0, True), (closes[:, col].ravel(), -1.0, False)):
            order_of = np.argsort(times_of, kind="stable")
            steps = np.zeros((times_of.size + 1, width))
            steps[np.arange(1, times_of.size + 1), np.tile(where, rows)[order_of]] = np.tile(per, rows)[order_of]
            upto = np.searchsorted(times_of[order_of], wanted, side="right" if right else "left")
            held_at += sign * np.cumsum(steps, axis=0)[upto]
        room = free[servers][None, :] + held_at + 1e-9
        others = np.ones(free.size, dtype=bool)
        others[servers] = False
        rest = free[others] + 1e-9
        ok = np.zeros(wanted.size, dtype=bool)
        for per_learner, learners in gangs:
            if per_learner <= 0:
                ok[:] = True
                break
            ok |= (room // per_learner).sum(axis=1) + float((rest // per_learner).sum()) >= learners
        return wanted[ok].tolist(), horizon

    def displaceable(self, snap: Snapshot, victim: JobView) -> bool:
        """With max_loss_s, a job is displaced only just after a checkpoint saved in its current run, as
        under `las` (see las.py): fairness is restored within a checkpoint interval at almost no lost work."""
        return in_checkpoint_window(victim, snap.clock, self.checkpoint_interval_s, self.max_loss_s)

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        assert isinstance(gate, DrfGate)
        return (victim.spec.tenant != job.spec.tenant and gate.above_entitlement(victim.spec.tenant)
                and gate.within_entitlement(job) and self.displaceable(snap, victim))

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        # Displaceable first; among them the one whose preemption wastes the fewest GPU-seconds.
        held = 0.0 if self.displaceable(snap, victim) else 1.0
        loss = preemption_loss_gpu_s(victim, snap.clock, self.checkpoint_interval_s, self.restart_overhead_s)
        return (held, loss, -(victim.started_at or 0.0))

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # Only tenants above their entitlement can lose jobs: walk just theirs, merged in victim order
        # (displaceable ones first, so the first held one ends the walk), re-checking shares as they fall
        # with each release.
        assert isinstance(gate, DrfGate)

        mine = job.spec.tenant
        lists = [self._displaceable_of(snap, gate, t) for t in gate.running_tenants
                 if t != mine and gate.above_entitlement(t)]
        merged = heapq.merge(*lists, key=_first)
        return (v for _, v in merged if self.may_preempt(snap, gate, job, v))

    def _displaceable_of(self, snap: Snapshot, gate: DrfGate, tenant: str) -> list[tuple[tuple[float, ...], JobView]]:
        """The tenant's displaceable running jobs in victim order, with their keys (once per decision): the
        prefix of Gate.victims_of() that victim_candidates walks (the held ones sort after every
        displaceable one, and a stable sort of the displaceable ones alone keeps their order), without a
        victim key for each held job, most of them (a window is a minute after a checkpoint)."""
        cache = gate.displaceable_victims
        out = cache.get(tenant)
        if out is None:
            out = cache[tenant] = sorted(((self.victim_key(snap, v), v) for v in snap.running_by_tenant.get(tenant, ())
                                          if self.displaceable(snap, v)), key=_first)
        return out

    def preemption_scope(self, job: JobView) -> object:
        return job.spec.tenant

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return job.spec.tenant  # entitlement and victims follow the tenant and the job's shape
