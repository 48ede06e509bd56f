"""DRF: dominant shares over GPUs, CPUs and memory, progressive filling inside one decide(), weights from
quotas, and displacement limited to tenants above their entitlement."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as hst

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.scheduling import JobView, Plan, Snapshot, TenantQuota, decide, make_placer
from loadmaster.scheduling.decide import start_alone
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.policies.drf import DrfGate, DrfPolicy
from loadmaster.sim.experiment import RunOptions, simulate
from tests.helpers import job, queued, workload
from tests.scheduling.test_invariants import check_invariants, snapshots


def node(i: int, gpus: int = 4, cpus: float = 16, mem: float = 64) -> Node:
    return Node(f"n{i}", gpus, cpus, mem)


def running(spec: JobSpec, nodes: tuple[int, ...], started: float = 0.0) -> JobView:
    alloc = Allocation(spec.job_id, nodes, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner)
    return JobView(spec, spec.submit_time_s, allocation=alloc, rate=1.0, as_of=started, started_at=started)


def snapshot(c: Cluster, run: tuple[JobView, ...], waiting: tuple[JobView, ...],
             tenants: dict[str, TenantQuota] | None = None, clock: float = 100.0) -> Snapshot:
    return Snapshot.of_running(clock, c, waiting, run, tenants)


def test_dominant_share_takes_the_scarcest_resource() -> None:
    # 8 GPUs, 32 CPUs, 128 GB. A holds 1 GPU and 16 CPUs (CPU share 1/2); B holds 2 GPUs (GPU share 1/4).
    c = Cluster((node(0), node(1)))
    a = running(job("a", tenant="A", cpus_per_learner=16), (0,))
    b = running(job("b", tenant="B", gpus=2), (1,))
    gate = DrfGate(snapshot(c, (a, b), ()), {})
    assert gate.dominant("A") == 0.5 and gate.dominant("B") == 0.25
    assert not gate.gpus_only


def test_queued_jobs_are_offered_by_dominant_share_not_by_arrival() -> None:
    c = Cluster((node(0), node(1)))
    a = running(job("a", tenant="A", cpus_per_learner=16), (0,))
    b = running(job("b", tenant="B", gpus=2), (1,))
    waiting = (queued(job("a1", tenant="A", submit=1)), queued(job("b1", tenant="B", submit=2)),
               queued(job("a2", tenant="A", submit=3)))
    ranked = list(DrfPolicy().rank(snapshot(c, (a, b), waiting)))
    # B (1/4) before A (1/2) although A's job came first.
    assert [j.job_id for j in ranked] == ["b1", "a1", "a2"]


def test_progressive_filling_alternates_tenants_within_one_round() -> None:
    # Idle 4-GPU node; A queued first with four 1-GPU jobs, B later with four: FIFO would give A all
    # four GPUs, DRF gives each tenant two, one at a time.
    c = Cluster((node(0),))
    waiting = tuple(queued(job(f"a{i}", tenant="A", submit=i)) for i in range(4)) + tuple(
        queued(job(f"b{i}", tenant="B", submit=10 + i)) for i in range(4))
    plan = decide(Snapshot.idle(0, c, waiting), DrfPolicy(), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["a0", "b0", "a1", "b1"]


def test_weights_come_from_gpu_quotas() -> None:
    c = Cluster((node(0),))
    quotas = {"A": TenantQuota("A", 3), "B": TenantQuota("B", 1)}
    waiting = tuple(queued(job(f"a{i}", tenant="A", submit=i)) for i in range(4)) + tuple(
        queued(job(f"b{i}", tenant="B", submit=i)) for i in range(4))
    plan = decide(Snapshot.idle(0, c, waiting, quotas), DrfPolicy(), make_placer("pack"))
    started = [s.job_id for s in plan.starts]
    assert sorted(started) == ["a0", "a1", "a2", "b0"]


def test_tenant_without_quota_is_best_effort_when_others_have_quotas() -> None:
    c = Cluster((node(0),))
    quotas = {"A": TenantQuota("A", 4)}
    waiting = (queued(job("x", tenant="X", submit=0)), queued(job("a", tenant="A", gpus=4, submit=5)))
    plan = decide(Snapshot.idle(0, c, waiting, quotas), DrfPolicy(), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["a"]


def test_preempts_only_a_tenant_above_its_entitlement() -> None:
    c = Cluster((node(0), node(1)))
    # A holds all 8 GPUs (entitled to half of them once B is active): B reclaims them by preempting one of
    # A's jobs, the one that has just saved a checkpoint (a1: 10 s of work since; a0: 100 s).
    hog = (running(job("a0", tenant="A", gpus=4), (0,), started=0), running(job("a1", tenant="A", gpus=4), (1,),
                                                                            started=90))
    b0 = queued(job("b0", tenant="B", gpus=4, submit=50))
    plan = decide(snapshot(c, hog, (b0,), clock=1000), DrfPolicy(), make_placer("pack"))
    assert [p.job_id for p in plan.preempts] == ["a1"] and [s.job_id for s in plan.starts] == ["b0"]
    # Between checkpoints B waits rather than waste A's work; without the window it takes the cheaper.
    assert decide(snapshot(c, hog, (b0,), clock=1500), DrfPolicy(), make_placer("pack")).preempts == ()
    anytime = decide(snapshot(c, hog, (b0,), clock=1500), DrfPolicy(max_loss_s=None), make_placer("pack"))
    assert [p.job_id for p in anytime.preempts] == ["a1"]
    # A at its entitlement (4 of 8), B wanting more than its half: nobody is displaced.
    even = (running(job("a0", tenant="A", gpus=4), (0,)), running(job("b0", tenant="B", gpus=4), (1,)))
    plan2 = decide(snapshot(c, even, (queued(job("b1", tenant="B", gpus=4, submit=50)),)), DrfPolicy(),
                   make_placer("pack"))
    assert plan2.preempts == () and plan2.starts == ()


def test_registered_with_defaults() -> None:
    assert POLICIES["drf"]().name == "drf"


def test_a_cpu_only_learner_is_counted_by_learners_not_gpus() -> None:
    # An elastic CPU-only job cut to one learner: the gate must count one learner's CPUs. Counting by GPUs
    # (0 here) could not say how many learners were meant and counted the whole gang again.
    c = Cluster((node(0), node(1)))
    e = running(job("e", tenant="A", learners=2, gpus=0, cpus_per_learner=8, min_learners=1, max_learners=2),
                (0, 0))
    gate = DrfGate(snapshot(c, (e,), ()), {})
    assert gate.dominant("A") == 0.5
    gate.remove(e)
    gate.add(e, 1)
    assert gate.dominant("A") == 0.25
    gate.add(e, 1)  # given back in full
    assert gate.dominant("A") == 0.5


def test_a_lone_start_works_out_no_weights() -> None:
    # A lone arrival that starts at once (decide.start_alone) asks DRF's gate admit() only: the weights, and
    # the active tenants they come from, are worked out only when a share is first asked for.
    c = Cluster((node(0),))
    a = queued(job("a", tenant="A"))
    snap = snapshot(c, (), (a,))
    policy = DrfPolicy()
    assert start_alone(snap, policy, make_placer("pack"), a) is not None
    assert "queued_tenants" not in snap.__dict__  # Snapshot's lazy attribute: never read
    gate = policy.gate(snap)
    assert gate.share("A") == (0, 0.0) and gate.fair_level == 1.0
    assert "queued_tenants" in snap.__dict__


def test_a_lone_start_makes_no_gate() -> None:
    # A DrfGate admits every job, so start_alone asks DRF admits_alone() without a gate being made for it.
    c = Cluster((node(0),))
    a = queued(job("a", tenant="A"))
    snap = snapshot(c, (), (a,))
    policy = DrfPolicy()
    made: list[Snapshot] = []
    gate = policy.gate
    policy.gate = lambda s: made.append(s) or gate(s)  # type: ignore[method-assign]
    assert policy.admits_alone(snap, a)
    assert start_alone(snap, policy, make_placer("pack"), a) is not None
    assert not made


def test_a_victim_given_back_in_full_is_no_longer_released() -> None:
    # A displacement search that fails gives back every victim it released: the round is then as before it
    # (usage and free GPUs), and DRF's walk keeps the classes it pruned (they stay answered without a visit).
    c = Cluster((node(0), node(1)))
    a = running(job("a", tenant="A", gpus=2), (0,))
    e = running(job("e", tenant="B", learners=2, gpus=1, min_learners=1, max_learners=2), (1, 1))
    gate = DrfGate(snapshot(c, (a, e), ()), {})
    assert gate.gpus_only and not gate.released
    gate.remove(a)
    gate.remove(e)
    assert gate.released
    gate.add(a)
    assert gate.released  # e is still out
    gate.add(e)
    assert not gate.released and gate.dominant("A") == 0.25 and gate.dominant("B") == 0.25
    gate.remove(e)
    gate.add(e, 1)  # cut to its minimum: it lost a learner
    assert gate.released


def test_a_victim_holding_cpus_stays_released_when_given_back() -> None:
    # Usage with CPUs or memory is summed in floats, which a give-back need not restore bit for bit: no
    # claim that the round is as before.
    c = Cluster((node(0), node(1)))
    a = running(job("a", tenant="A", cpus_per_learner=4), (0,))
    gate = DrfGate(snapshot(c, (a,), ()), {})
    assert not gate.gpus_only
    gate.remove(a)
    gate.add(a)
    assert gate.released


class _KeepsGate(DrfPolicy):
    """DRF that keeps the gate of its last decision, to compare the gate's books with the plan."""

    last: DrfGate | None = None

    def gate(self, snap: Snapshot) -> DrfGate:
        self.last = super().gate(snap)
        return self.last


def _usage_after(snap: Snapshot, plan: Plan) -> dict[str, list[float]]:
    """What each tenant holds once the plan is carried out: running jobs (resized or not) at what their
    allocation gives each learner, started jobs at their request (as the gate counts them)."""
    out: dict[str, list[float]] = {}
    gone = {p.job_id for p in plan.preempts}
    resized = {z.job_id: z.allocation for z in plan.resizes}
    for j in snap.running:
        a = resized.get(j.job_id, j.allocation)
        if j.job_id in gone or a is None:
            continue
        u = out.setdefault(j.spec.tenant, [0.0, 0.0, 0.0])
        u[0] += a.learners * a.gpus_per_learner
        u[1] += a.learners * a.cpus_per_learner
        u[2] += a.learners * a.mem_gb_per_learner
    queued_by_id = {j.job_id: j for j in snap.queued}
    for st in plan.starts:
        spec = queued_by_id[st.job_id].spec
        u = out.setdefault(spec.tenant, [0.0, 0.0, 0.0])
        n = st.allocation.learners
        u[0] += n * spec.gpus_per_learner
        u[1] += n * spec.cpus_per_learner
        u[2] += n * spec.mem_gb_per_learner
    return out


# Displacement is checked with max_loss_s=None: the generated running jobs have run ~100 s, short of a
# first checkpoint, so the default policy (displace only just after a checkpoint) never displaces there.
@settings(max_examples=60, deadline=None)
@given(snapshots())
def test_drf_plans_keep_the_invariants_and_displace_only_tenants_above_entitlement(snap: Snapshot) -> None:
    pol = _KeepsGate(max_loss_s=None)
    plan = decide(snap, pol, make_placer("pack"))
    check_invariants(snap, plan, "drf")
    running = {j.job_id: j for j in snap.running}
    queued_by_id = {j.job_id: j for j in snap.queued}
    # The gate's books at the end of the round are what the plan leaves each tenant holding.
    gate = pol.last
    assert gate is not None
    expected = _usage_after(snap, plan)
    for tenant in set(expected) | set(gate.usage):
        if gate.gpus_only and tenant not in gate.usage:
            continue  # never touched: the snapshot's GPU count, CPUs and memory held by nobody
        got = gate._usage(tenant)
        want = expected.get(tenant, [0.0, 0.0, 0.0])
        assert all(abs(g - w) <= 1e-6 for g, w in zip(got, want, strict=True)), (tenant, got, want)
    # A victim's tenant was above its entitlement when it lost the job (or learners of an elastic job).
    # Its usage then was at most what it held at the snapshot plus everything it starts in this round (it
    # may have been pushed over by its own starts on idle resources earlier in the round), so it is above
    # with all of that counted.
    shrunk = [z for z in plan.resizes
              if z.allocation.learners < (running[z.job_id].allocation or z.allocation).learners]
    if plan.preempts or shrunk:
        bound = DrfGate(snap, snap.tenants)
        for st in plan.starts:
            bound.add(queued_by_id[st.job_id], st.allocation.learners)
        for victim_id in [p.job_id for p in plan.preempts] + [z.job_id for z in shrunk]:
            assert bound.above_entitlement(running[victim_id].spec.tenant)
        for p in plan.preempts:
            assert running[p.job_id].spec.tenant != queued_by_id[p.for_job].spec.tenant


@settings(max_examples=30, deadline=None)
@given(snapshots())
def test_default_drf_never_displaces_a_job_before_its_first_checkpoint(snap: Snapshot) -> None:
    # Every generated running job has done ~100 s of work, short of the 900 s checkpoint interval.
    plan = decide(snap, DrfPolicy(), make_placer("pack"))
    check_invariants(snap, plan, "drf")
    assert plan.preempts == ()


def test_simulated_tenants_share_and_every_job_ends() -> None:
    rng = random.Random(7)
    c = Cluster(tuple(Node(f"n{i}", 4, 32, 256, rack=f"r{i % 2}") for i in range(4)))
    specs, t = [], 0.0
    for i in range(80):
        t += rng.expovariate(1 / 500)
        tenant = rng.choice("ABC")
        specs.append(job(f"j{i}", tenant=tenant, learners=rng.choice([1, 2]), gpus=rng.choice([1, 2, 4]),
                         cpus_per_learner=rng.choice([0.0, 4.0, 8.0]), duration=float(rng.randint(300, 8000)),
                         submit=round(t)))
    run = simulate(workload(*specs), c, RunOptions(policy="drf"))
    assert all(r.status is JobStatus.COMPLETED for r in run.result.records)
    assert run.result.preemptions <= len(specs) // 2


def test_next_change_follows_only_the_windows_of_tenants_above_their_entitlement() -> None:
    # Three tenants on 12 GPUs, each entitled to 4: "a" holds 8 (above), "c" holds 4 (at its entitlement,
    # so never a victim), "b" waits with a 4-GPU gang it may start by displacing. c's job checkpoints at
    # 200, a's at 900: only a's windows can let b start, so no round before 900 needs to be made.
    from loadmaster.scheduling.policies.windows import before

    c = Cluster(tuple(node(i) for i in range(3)))
    a1 = running(job("a1", gpus=4, duration=10_000, tenant="a"), (0,))
    a2 = running(job("a2", gpus=4, duration=10_000, tenant="a"), (1,))
    c1 = running(job("c1", gpus=4, duration=10_000, tenant="c"), (2,), started=-700.0)
    waiting = queued(job("b1", gpus=4, duration=100, tenant="b", submit=50))
    snap = snapshot(c, (a1, a2, c1), (waiting,))
    policy = DrfPolicy()
    plan = decide(snap, policy, make_placer("pack"))
    assert not plan.starts and not plan.preempts  # nobody is in a window yet
    assert policy.next_change_s(snap, (waiting,)) == before(900.0)


def test_next_change_skips_windows_that_cannot_make_room_for_a_gang() -> None:
    # As above, but "a" holds four 1-GPU jobs on server 1 (checkpoints at 200, 300, 400, 500; windows of 60 s
    # never overlap) besides its 4-GPU job on server 0 (checkpoint at 900). b's gang needs a whole server: a
    # window of one 1-GPU job frees one GPU of server 1, room for nobody, so the first round worth making is
    # at 900. Without server room counted, each of those windows woke a round.
    from loadmaster.scheduling.policies.windows import before

    c = Cluster(tuple(node(i) for i in range(3)))
    a0 = running(job("a0", gpus=4, duration=10_000, tenant="a"), (0,))
    small = tuple(running(job(f"a{i}", gpus=1, duration=10_000, tenant="a"), (1,), started=-800.0 + 100 * i)
                  for i in range(1, 5))
    c1 = running(job("c1", gpus=4, duration=10_000, tenant="c"), (2,), started=-700.0)
    waiting = queued(job("b1", gpus=4, duration=100, tenant="b", submit=50))
    snap = snapshot(c, (a0, *small, c1), (waiting,))
    policy = DrfPolicy()
    plan = decide(snap, policy, make_placer("pack"))
    assert not plan.starts and not plan.preempts
    assert policy.next_change_s(snap, (waiting,)) == before(900.0)
    # A 1-GPU gang of b fits in any one of those windows: the first of them is the next round.
    one = queued(job("b2", gpus=1, duration=100, tenant="b", submit=60))
    assert policy.next_change_s(snap, (one,)) == before(200.0)


@settings(max_examples=80, deadline=None)
@given(snapshots(), hst.lists(hst.integers(0, 6), min_size=1, max_size=4))
def test_a_policy_that_decided_before_decides_as_a_fresh_one(snap: Snapshot, keeps: list[int]) -> None:
    # A policy keeps each tenant's shares and the shapes within its entitlement across decisions, by the GPUs
    # it holds (DrfGate.memo). Decisions on the same cluster with fewer of the jobs running first (other
    # tenants' GPUs, the same for some), then on `snap`: every answer is a fresh policy's.
    kept = DrfPolicy(max_loss_s=None)
    for k in keeps:
        earlier = Snapshot.of_running(snap.clock, snap.cluster, snap.queued, snap.running[:k], snap.tenants)
        decide(earlier, kept, make_placer("pack"))
    fresh = DrfPolicy(max_loss_s=None)
    assert decide(snap, kept, make_placer("pack")) == decide(snap, fresh, make_placer("pack"))
    a, b = kept.gate(snap), fresh.gate(snap)
    for t in {j.spec.tenant for j in (*snap.queued, *snap.running)}:
        assert (a.share(t), a.over(t), a.above_entitlement(t)) == (b.share(t), b.over(t), b.above_entitlement(t))
    for j in snap.queued:
        assert a.within_entitlement(j) == b.within_entitlement(j)
