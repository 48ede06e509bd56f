"""Philly-style fair sharing: each virtual cluster (tenant) has a GPU quota; idle quota is lent to others
and taken back by preempting borrowed jobs when the owner needs it.

Order: jobs that fit in their tenant's quota first, then tenants furthest below their quota (usage /
quota), FIFO within a tenant. A job that fits in its tenant's quota is GUARANTEED and may reclaim GPUs from
tenants running over their quota; a job that does not is BORROWED (it runs on idle GPUs only) up to the
tenant's borrowing limit.

Guaranteed jobs go before borrowing ones because a borrowing job started on GPUs that a waiting guaranteed
job could use is reclaimed at the next decision: ranked by share alone, a tenant whose borrowed job was just
reclaimed holds nothing, so its share is the lowest, and the job would take the next idle GPUs again and be
preempted again, event after event (reclaim thrash: 378 preemptions on the 3,000-job overload, one job 55).

`fair-fifo` (FairFifoPolicy) adds Philly's FIFO within a VC: while a VC's head-of-queue job (its earliest
queued) does not fit in what is left of the VC's quota, no other job of the VC may start, so the quota that
frees is kept for the head instead of being taken, GPU by GPU, by the narrower jobs behind it. Without it a
wide job waits until its VC happens to have enough GPUs free at once (hours under load) while the 1-GPU
jobs behind it start at once; with it the wide job waits for about as many of its VC's jobs to end as it
needs GPUs, and the jobs behind it wait that long too (Jeon et al., ATC'19: jobs of a VC are scheduled in
FIFO order). The head may still borrow other VCs' idle GPUs where the quotas allow borrowing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence

from loadmaster.core.job import JobSpec
from loadmaster.scheduling.policies.base import Admission, Gate, Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota


class QuotaGate(Gate):
    """`heads`: each tenant's head-of-queue job, for a gate that keeps freed quota for it (fair-fifo); None:
    no such reservation."""

    def __init__(self, snap: Snapshot, quotas: Mapping[str, TenantQuota],
                 heads: Mapping[str, JobView] | None = None) -> None:
        super().__init__(snap)
        self.quotas = quotas
        self.usage: dict[str, int] = dict(snap.tenant_gpus)
        # Copied: a head that starts lifts its tenant's reservation for the rest of the round (the next job
        # becomes the head at the next decision).
        self.heads: dict[str, JobView] | None = dict(heads) if heads is not None else None

    def add(self, job: JobView, learners: int | None = None) -> None:
        a = job.allocation
        if learners is None:
            gpus = a.gpus if a is not None else 0
        else:
            gpus = learners * (a.gpus_per_learner if a is not None else job.spec.gpus_per_learner)
        t = job.spec.tenant
        self.usage[t] = self.usage.get(t, 0) + gpus
        if self.heads is not None and t in self.heads and self.heads[t].spec.job_id == job.spec.job_id:
            del self.heads[t]

    def remove(self, job: JobView) -> None:
        assert job.allocation is not None
        t = job.spec.tenant
        self.usage[t] = self.usage.get(t, 0) - job.allocation.gpus

    def quota(self, tenant: str) -> TenantQuota:
        return quota_of(self.quotas, tenant)

    def admit(self, job: JobView, gpus: int) -> Admission:
        tenant = job.spec.tenant
        q = quota_of(self.quotas, tenant)  # not through quota(): asked at every visit of a walk
        used = self.usage.get(tenant, 0)
        if self.heads is not None and kept_for_head(self.heads.get(tenant), job, used, q):
            return Admission.DENIED
        return admission(q, used, gpus)

    def over_quota(self, tenant: str) -> bool:
        return self.usage.get(tenant, 0) > self.quota(tenant).gpus

    def never_admits(self, job: JobView) -> str | None:
        q = self.quota(job.spec.tenant)
        if job.spec.gpus > q.max_gpus:
            return (f"needs {job.spec.gpus} GPUs but tenant {q.name} may hold at most {int(q.max_gpus)} "
                    f"(quota {q.gpus} + borrowing limit {q.borrow_limit})")
        return None


def quota_of(quotas: Mapping[str, TenantQuota], tenant: str) -> TenantQuota:
    # A tenant without a configured quota has none guaranteed but may borrow idle GPUs.
    return quotas.get(tenant) or TenantQuota(tenant, 0, None)


def admission(q: TenantQuota, used: int, gpus: int) -> Admission:
    """`gpus` more GPUs for a tenant with quota `q` that holds `used`."""
    if used + gpus <= q.gpus:
        return Admission.GUARANTEED
    if used + gpus <= q.max_gpus:
        return Admission.BORROWED
    return Admission.DENIED


def _share(used: int, nominal: int) -> float:
    return used / nominal if nominal > 0 else float("inf")


def kept_for_head(head: JobView | None, job: JobView, used: int, q: TenantQuota) -> bool:
    """Is what the quota `q` of a tenant holding `used` GPUs frees kept for its head job `head` (None: it has
    none), which is not `job`? (fair-fifo only)"""
    return head is not None and head.spec.job_id != job.spec.job_id and used + head.spec.gpus > q.gpus


class FairPolicy(Policy):
    name = "fair"
    preemptive = True

    def __init__(self, quotas: Mapping[str, TenantQuota] | None = None) -> None:
        # Quotas given here override the snapshot's (the simulator passes them in the snapshot).
        self.quotas = dict(quotas) if quotas else None

    def _quotas(self, snap: Snapshot) -> Mapping[str, TenantQuota]:
        return self.quotas if self.quotas is not None else snap.tenants

    def gate(self, snap: Snapshot) -> QuotaGate:
        return QuotaGate(snap, self._quotas(snap))

    def admits_alone(self, snap: Snapshot, job: JobView) -> bool:
        # The gate's answer without the gate (its copy of the usage, its calls): asked at most arrivals, it
        # was three quarters of what fair costs over fifo on 117,000 Philly-like jobs. admission() denies
        # whatever never_admits() refuses (the tenant holds no fewer than 0 GPUs).
        return self._admitted_alone(snap, job) is not Admission.DENIED

    def _admitted_alone(self, snap: Snapshot, job: JobView) -> Admission:
        spec = job.spec
        tenant = spec.tenant
        # _quotas() written out: one call fewer at each of the ~165,000 lone starts of 117,000 Philly-like jobs.
        q = quota_of(self.quotas if self.quotas is not None else snap.tenants, tenant)
        return admission(q, snap.tenant_gpus.get(tenant, 0), spec.gpus)

    def _standing(self, snap: Snapshot, tenant: str) -> tuple[int, int]:
        """The GPUs the tenant holds and its quota's (0 without one): what share() and borrowing() compare."""
        q = (self.quotas if self.quotas is not None else snap.tenants).get(tenant)
        return snap.tenant_gpus.get(tenant, 0), q.gpus if q else 0

    def share(self, snap: Snapshot, tenant: str) -> float:
        """GPUs the tenant holds over its quota (infinite without one): tenants furthest below go first."""
        return _share(*self._standing(snap, tenant))

    def borrowing(self, snap: Snapshot, job: JobView) -> bool:
        """Would the job run on GPUs lent by others (beyond its tenant's quota) if it started now?"""
        used, nominal = self._standing(snap, job.spec.tenant)
        return used + job.spec.gpus > nominal

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        shares = {t: self.share(snap, t) for t in {j.spec.tenant for j in snap.queued}}
        return sorted(snap.queued, key=lambda j: (self.borrowing(snap, j), shares[j.spec.tenant],
                                                  j.spec.submit_time_s, j.spec.job_id))

    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (job.spec.submit_time_s, job.spec.job_id)

    def class_order(self, snap: Snapshot, job: JobView) -> tuple[object, ...]:
        # The decision class is the tenant and the shape: one size, so one answer to borrowing(). (borrowing(),
        # share()) from one look-up of the tenant: asked per class per walk, ~55,000 times at 117k jobs.
        spec = job.spec
        used, nominal = self._standing(snap, spec.tenant)
        return (used + spec.gpus > nominal, _share(used, nominal))

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        assert isinstance(gate, QuotaGate)
        return (
            victim.spec.tenant != job.spec.tenant
            and gate.admit(job, job.spec.gpus) is Admission.GUARANTEED
            and gate.over_quota(victim.spec.tenant)
        )

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        return gate.admit(job, job.spec.gpus) is Admission.GUARANTEED

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # Only tenants over their quota can lose jobs: walk just their jobs, merged in victim order.
        assert isinstance(gate, QuotaGate)
        def key(v: JobView) -> tuple[float, ...]:
            return self.victim_key(snap, v)

        lists = [gate.victims_of(t, key) for t in list(gate.usage) if t != job.spec.tenant and gate.over_quota(t)]
        return self._still_eligible(snap, gate, job, lists)

    def _still_eligible(self, snap: Snapshot, gate: Gate, job: JobView,
                        lists: list[list[tuple[tuple[float, ...], JobView]]]) -> Iterator[JobView]:
        """The tenants' victims (`lists`: one tenant's each, in victim order) merged in victim order (ties: the
        earlier list first, as heapq.merge), those may_preempt() lets go as the search releases them. The search
        only lowers its victims' tenants' usage, and `job`'s admission rests on its own tenant's alone: a victim
        refused stays refused, and so is every later one of its tenant, which is left out of the merge instead
        of being walked to its end (most of a search's walk under overload: 11,000 victims in one decision on
        10,000 GPUs, h9ff in docs/benchmarks.md)."""
        heap = [(kv[0][0], i, 0) for i, kv in enumerate(lists) if kv]
        heapq.heapify(heap)
        while heap:
            _, i, at = heap[0]
            victims = lists[i]
            victim = victims[at][1]
            if not self.may_preempt(snap, gate, job, victim):
                heapq.heappop(heap)  # its tenant's later victims would be refused too
                continue
            if at + 1 < len(victims):
                heapq.heapreplace(heap, (victims[at + 1][0], i, at + 1))
            else:
                heapq.heappop(heap)
            yield victim

    def preemption_scope(self, job: JobView) -> object:
        return job.spec.tenant

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return job.spec.tenant  # admission, preemption rights and victims follow the tenant and the GPUs


class FairFifoPolicy(FairPolicy):
    """fair with Philly's FIFO within a VC: a VC's head job that does not fit in the quota left keeps what
    frees for itself (module docstring). The head is the VC's earliest queued job at the decision (submit
    time, then id), whatever its size."""

    name = "fair-fifo"

    def __init__(self, quotas: Mapping[str, TenantQuota] | None = None) -> None:
        super().__init__(quotas)
        # The heads of the last snapshot asked about: gate() and decision_class() ask once per job per
        # decision, the heads are found once per decision.
        self._heads_of: tuple[Snapshot, dict[str, JobView]] | None = None

    def heads(self, snap: Snapshot) -> dict[str, JobView]:
        """Each tenant's earliest queued job (submit time, then id) in `snap`."""
        cached = self._heads_of
        if cached is not None and cached[0] is snap:
            return cached[1]
        heads: dict[str, JobView] = {}
        first: dict[str, JobSpec] = {}
        # Compared field by field, not as (submit time, id) tuples: two tuples per queued job per decision
        # would make the collector run inside decisions (a long queue's p99).
        for j in snap.queued:
            s = j.spec
            h = first.get(s.tenant)
            if h is None or s.submit_time_s < h.submit_time_s or (
                    s.submit_time_s == h.submit_time_s and s.job_id < h.job_id):
                first[s.tenant] = s
                heads[s.tenant] = j
        self._heads_of = (snap, heads)
        return heads

    def gate(self, snap: Snapshot) -> QuotaGate:
        return QuotaGate(snap, self._quotas(snap), self.heads(snap))

    def admits_alone(self, snap: Snapshot, job: JobView) -> bool:
        # fair's answer, and the quota left kept for the tenant's head: none to keep where the job is the one
        # queued (start_alone's case: it heads its tenant), so the heads are not worked out then.
        if self._admitted_alone(snap, job) is Admission.DENIED:
            return False
        if len(snap.queued) == 1:
            # `job` is queued (admits_alone()'s contract): the one job queued, whose queue is not copied to be
            # sure of it (a tuple of the Session's queue per lone start).
            return True
        tenant = job.spec.tenant
        return not kept_for_head(self.heads(snap).get(tenant), job, snap.tenant_gpus.get(tenant, 0),
                                 quota_of(self._quotas(snap), tenant))

    def marked_jobs(self, snap: Snapshot) -> Collection[str]:
        # Who is a VC's head changes whenever another job of the VC leaves or joins the queue: a Session
        # classifies the old and the new head again.
        return [h.spec.job_id for h in self.heads(snap).values()]

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        # The head is admitted by the quota left, the others of its VC also by whether the head fits.
        head = self.heads(snap).get(job.spec.tenant)
        return (job.spec.tenant, head is not None and head.spec.job_id == job.spec.job_id)
