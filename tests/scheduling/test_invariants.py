"""Property tests of decide() for every policy x placer: the core's invariants on random states."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobSpec
from loadmaster.scheduling import JobView, Plan, Snapshot, TenantQuota, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n = draw(st.integers(1, 6))
    types = draw(st.sampled_from([("gpu",), ("v100", "k80")]))
    return Cluster(tuple(
        Node(f"n{i}", draw(st.sampled_from([0, 1, 2, 4, 8])), draw(st.sampled_from([4.0, 16.0, 32.0])),
             draw(st.sampled_from([32.0, 256.0])), gpu_type=types[i % len(types)], rack=f"r{i % 2}")
        for i in range(n)
    ))


@st.composite
def specs(draw: st.DrawFn, prefix: str, count: int) -> list[JobSpec]:
    jobs = []
    for i in range(count):
        learners = draw(st.integers(1, 4))
        # Some jobs are elastic: they may run with min..max learners around the nominal size.
        elastic = draw(st.booleans())
        jobs.append(JobSpec(
            job_id=f"{prefix}{i}", tenant=draw(st.sampled_from(["A", "B", "C"])),
            submit_time_s=float(draw(st.integers(0, 50))), learners=learners,
            gpus_per_learner=draw(st.sampled_from([0, 1, 2, 4])),
            cpus_per_learner=draw(st.sampled_from([0.0, 2.0, 8.0])),
            mem_gb_per_learner=draw(st.sampled_from([0.0, 16.0])),
            duration_s=float(draw(st.integers(1, 1000))), priority=draw(st.integers(0, 2)),
            min_learners=draw(st.integers(1, learners)) if elastic else None,
            max_learners=learners + draw(st.integers(0, 4)) if elastic else None,
        ))
    return jobs


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """A cluster with some jobs already running (placed by decide itself) and more queued."""
    c = draw(clusters())
    quotas = {t: TenantQuota(t, draw(st.integers(0, 8)), draw(st.sampled_from([None, 0, 4]))) for t in "ABC"}
    first = draw(specs("r", draw(st.integers(0, 6))))
    warm = decide(Snapshot.idle(0, c, tuple(JobView(s, 0) for s in first)), make_policy("fifo"),
                  make_placer("pack"))
    by_id = {s.job_id: s for s in first}
    running = tuple(JobView(by_id[s.job_id], 0, allocation=s.allocation, rate=1.0, as_of=0.0,
                            started_at=float(i)) for i, s in enumerate(warm.starts))
    free_g = c.gpu_capacity.astype(float)
    free_c = c.cpu_capacity.copy()
    free_m = c.mem_capacity.copy()
    for s in warm.starts:
        for node, k in s.allocation.per_node().items():
            free_g[node] -= k * s.allocation.gpus_per_learner
            free_c[node] -= k * s.allocation.cpus_per_learner
            free_m[node] -= k * s.allocation.mem_gb_per_learner
    queued = tuple(JobView(s, s.submit_time_s, as_of=s.submit_time_s)
                   for s in draw(specs("q", draw(st.integers(0, 10)))))
    return Snapshot.build(100.0, c, free_g, free_c, free_m, queued, running, quotas)


def check_invariants(snap: Snapshot, plan: Plan, policy_name: str) -> None:
    c = snap.cluster
    queued = {j.job_id: j for j in snap.queued}
    running = {j.job_id: j for j in snap.running}
    started = [s.job_id for s in plan.starts]
    # Every queued job is accounted for exactly once: started, waiting or rejected.
    outcome = started + [w.job_id for w in plan.waits] + [r.job_id for r in plan.rejects]
    assert sorted(outcome) == sorted(queued)
    assert {p.job_id for p in plan.preempts} <= set(running)
    # No partial gang: every learner or none, and an elastic job within its bounds.
    def size_ok(spec: JobSpec, learners: int) -> bool:
        if spec.elastic:
            return (spec.min_learners or spec.learners) <= learners <= (spec.max_learners or spec.learners)
        return learners == spec.learners

    for s in plan.starts:
        spec = queued[s.job_id].spec
        assert size_ok(spec, s.allocation.learners)
        assert s.allocation.gpus_per_learner == spec.gpus_per_learner
        types = {c.nodes[n].gpu_type for n in s.allocation.nodes}
        assert spec.gpus_per_learner == 0 or len(types) == 1
    resized = {z.job_id: z.allocation for z in plan.resizes}
    assert set(resized) <= set(running) and not set(resized) & {p.job_id for p in plan.preempts}
    for job_id, alloc in resized.items():
        assert running[job_id].spec.elastic and size_ok(running[job_id].spec, alloc.learners)
    # Capacity never exceeded, no GPU double-booked: sum what stays running plus what starts.
    used_g = np.zeros(len(c.nodes))
    used_c = np.zeros(len(c.nodes))
    used_m = np.zeros(len(c.nodes))
    preempted = {p.job_id for p in plan.preempts}
    allocs = [resized.get(j.job_id, j.allocation) for j in snap.running if j.job_id not in preempted]
    allocs += [s.allocation for s in plan.starts]
    for a in allocs:
        assert a is not None
        for node, k in a.per_node().items():
            used_g[node] += k * a.gpus_per_learner
            used_c[node] += k * a.cpus_per_learner
            used_m[node] += k * a.mem_gb_per_learner
    assert (used_g <= c.gpu_capacity + 1e-9).all()
    assert (used_c <= c.cpu_capacity + 1e-6).all()
    assert (used_m <= c.mem_capacity + 1e-6).all()
    # Quotas respected: a fair-share tenant never holds more than quota + borrowing limit after the plan,
    # unless it already did before (plans do not shrink other tenants' running jobs beyond preemption).
    if policy_name == "fair":
        before: dict[str, int] = {}
        for j in snap.running:
            assert j.allocation is not None
            before[j.spec.tenant] = before.get(j.spec.tenant, 0) + j.allocation.gpus
        after = dict(before)
        for p in plan.preempts:
            a = running[p.job_id].allocation
            assert a is not None
            after[running[p.job_id].spec.tenant] -= a.gpus
        for job_id, alloc in resized.items():
            a = running[job_id].allocation
            assert a is not None
            after[running[job_id].spec.tenant] += alloc.gpus - a.gpus
        for s in plan.starts:
            t = queued[s.job_id].spec.tenant
            after[t] = after.get(t, 0) + s.allocation.gpus
        for t, gpus in after.items():
            assert gpus <= max(snap.tenants[t].max_gpus, before.get(t, 0))
        # Only tenants over their quota lose jobs or learners: over it before the plan, or pushed over it by
        # what this plan starts for them on borrowed GPUs.
        started: dict[str, int] = {}
        for s in plan.starts:
            t = queued[s.job_id].spec.tenant
            started[t] = started.get(t, 0) + s.allocation.gpus
        for p in [*plan.preempts, *(z for z in plan.resizes if z.allocation.gpus < (running[z.job_id].allocation
                                                                                  or z.allocation).gpus)]:
            victim_tenant = running[p.job_id].spec.tenant
            assert before[victim_tenant] + started.get(victim_tenant, 0) > snap.tenants[victim_tenant].gpus


@settings(max_examples=150, deadline=None)
@given(snapshots(), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)))
def test_plan_invariants(snap: Snapshot, policy_name: str, placement: str) -> None:
    plan = decide(snap, make_policy(policy_name), make_placer(placement))
    check_invariants(snap, plan, policy_name)
