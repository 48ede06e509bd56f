"""fair's displacement search: the victims FairPolicy.victim_candidates() hands out as a search releases them."""

import heapq
import random

import pytest

from loadmaster.core.job import Allocation
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, make_policy
from loadmaster.scheduling.policies.fair import FairPolicy, QuotaGate
from tests.helpers import cluster, job, queued


def _world(seed: int) -> tuple[Snapshot, JobView]:
    """Up to six tenants with random quotas running jobs of 1-4 GPUs started at a few shared times (ties in
    victim order), and a queued job of tenant t0 that fits its quota."""
    rng = random.Random(seed)
    tenants = [f"t{k}" for k in range(rng.randint(2, 6))]
    running: list[JobView] = []
    node = 0
    for k in range(rng.randint(5, 40)):
        tenant = rng.choice(tenants[1:]) if rng.random() < 0.9 else tenants[0]
        gpus = rng.choice([1, 1, 2, 4])
        spec = job(f"r{k}", gpus=gpus, tenant=tenant)
        running.append(JobView(spec, 0, allocation=Allocation(spec.job_id, (node,), gpus, 0, 0), rate=1.0,
                               started_at=float(rng.choice([10, 20, 30, 40]))))
        node += 1
    quotas = {t: TenantQuota(t, rng.randint(0, 12), None) for t in tenants}
    quotas[tenants[0]] = TenantQuota(tenants[0], 1000, None)
    c = cluster(*([4] * node))
    snap = Snapshot.of_running(100, c, (queued(job("q", gpus=2, tenant=tenants[0], submit=1)),), tuple(running),
                               quotas)
    return snap, snap.queued[0]


def _walks(policy_name: str, seed: int) -> tuple[list[str], list[str]]:
    """(victim_candidates()'s victims, the reference walk's) on world `seed`, each released as handed out."""
    snap, q = _world(seed)
    policy = make_policy(policy_name)
    assert isinstance(policy, FairPolicy)
    gate, ref_gate = policy.gate(snap), policy.gate(snap)
    assert isinstance(ref_gate, QuotaGate)

    def key(v: JobView) -> tuple[float, ...]:
        return policy.victim_key(snap, v)
    lists = [ref_gate.victims_of(t, key) for t in list(ref_gate.usage) if t != q.spec.tenant and ref_gate.over_quota(t)]
    want = []
    for _, v in heapq.merge(*lists, key=lambda kv: kv[0]):
        if policy.may_preempt(snap, ref_gate, q, v):
            want.append(v.job_id)
            ref_gate.remove(v)
    got = []
    for v in policy.victim_candidates(snap, gate, q, lambda: sorted(snap.running, key=key)):
        got.append(v.job_id)
        gate.remove(v)
    return got, want


@pytest.mark.parametrize("policy_name", ["fair", "fair-fifo"])
def test_victims_are_the_merged_walk_less_those_may_preempt_refuses_by_then(policy_name: str) -> None:
    """The candidates are what walking every over-quota tenant's victims, merged in victim order, and keeping
    those may_preempt() accepts at their turn gives, when each one handed out is released before the next
    (as _Round.place_by_preempting does): leaving out a tenant once it is back within its quota changes
    nothing."""
    for seed in range(200):
        got, want = _walks(policy_name, seed)
        assert got == want, seed
