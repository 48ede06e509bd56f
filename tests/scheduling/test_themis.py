"""Themis (finish-time fairness with leases): offers, leases, preemption, bids, and a simulated workload."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer
from loadmaster.scheduling.decide import start_alone
from loadmaster.scheduling.policies import POLICIES, make_policy
from loadmaster.scheduling.policies.themis import ThemisPolicy, _ideal_s, _rho_if_preempted
from loadmaster.scheduling.session import Session
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, SimResult, Simulator
from tests.helpers import cluster, job, queued, workload


def running(spec: JobSpec, node: int, started: float, work: float = 0.0, rate: float = 1.0) -> JobView:
    """A job running on `node` since `started`, with `work` work-seconds done as of `started`."""
    alloc = Allocation(spec.job_id, (node,) * spec.learners, spec.gpus_per_learner, 0, 0)
    return JobView(spec, spec.submit_time_s, allocation=alloc, work_done_s=work, rate=rate, as_of=started,
                   started_at=started)


def snapshot(c: Cluster, clock: float, queue: tuple[JobView, ...], run: tuple[JobView, ...] = ()) -> Snapshot:
    free = c.gpu_capacity.astype(float)
    for r in run:
        assert r.allocation is not None
        for node, k in r.allocation.per_node().items():
            free[node] -= k * r.allocation.gpus_per_learner
    return Snapshot.build(clock, c, free, c.cpu_capacity, c.mem_capacity, queue, run)


def test_registered_with_paper_defaults() -> None:
    assert "themis" in POLICIES
    p = make_policy("themis")
    assert isinstance(p, ThemisPolicy) and p.preemptive
    assert (p.fairness_knob, p.lease_s, p.round_s) == (0.8, 600.0, 600.0)
    with pytest.raises(ValueError, match="fairness_knob"):
        ThemisPolicy(fairness_knob=1.0)


def test_worst_rho_job_is_offered_first() -> None:
    # Same size, same duration; the one waiting longest is furthest behind its private-share finish time.
    jobs = tuple(queued(job(f"j{i}", duration=1000, submit=float(s))) for i, s in enumerate([500, 0, 300, 900, 800]))
    p = ThemisPolicy()
    snap = Snapshot.idle(1000.0, cluster(1), jobs)
    ranked = p.rank(snap)
    assert ranked[0].job_id == "j1"
    assert p.offered(snap) == {"j1"}  # the worst 20% of five jobs
    rhos = [p.rho(snap, j) for j in jobs]
    assert p.rho(snap, ranked[0]) == max(rhos)
    # Five contenders on one GPU: the private share is 0.2 GPU, so T_ideal = 1000 x 1 / 0.2.
    assert p.rho(snap, jobs[1]) == pytest.approx((1000 + 1000) / 5000)
    assert decide(snap, p, make_placer("pack")).starts[0].job_id == "j1"


def test_leftovers_go_to_the_least_remaining_gpu_time() -> None:
    # Nobody has waited: the narrow jobs' rho is 1 (the earliest id wins the tie and the 20% offer); the 2-GPU
    # job is wider than a 1.6-GPU private share, so its T_ideal is longer and its rho lower. The rest follow
    # by remaining GPU-seconds, fewest first.
    jobs = (queued(job("long", duration=5000)), queued(job("wide", gpus=2, duration=1000)),
            queued(job("short", duration=100)), queued(job("mid", duration=2000)), queued(job("tiny", duration=50)))
    p = ThemisPolicy()
    snap = Snapshot.idle(0.0, cluster(8), jobs)
    assert p.rho(snap, jobs[1]) == pytest.approx(0.8)
    assert [j.job_id for j in p.rank(snap)] == ["long", "tiny", "short", "mid", "wide"]


def test_fairness_knob_sets_how_many_get_the_offer() -> None:
    jobs = tuple(queued(job(f"j{i}", submit=float(i))) for i in range(10))
    snap = Snapshot.idle(100.0, cluster(1), jobs)
    assert ThemisPolicy(fairness_knob=0.0).offered(snap) == {j.job_id for j in jobs}
    assert len(ThemisPolicy(fairness_knob=0.8).offered(snap)) == 2
    assert len(ThemisPolicy(fairness_knob=0.99).offered(snap)) == 1
    assert ThemisPolicy(fairness_knob=0.5).offer_count(3) == 2
    assert ThemisPolicy().offer_count(0) == 0


def test_a_lease_protects_a_running_job_until_it_expires() -> None:
    c = cluster(1)
    holder = running(job("holder", duration=100_000), 0, started=0.0)
    waiter = queued(job("waiter", duration=100, submit=0.0))
    p = ThemisPolicy(lease_s=600)
    within = snapshot(c, 599.0, (waiter,), (holder,))
    assert p.rho(within, waiter) > 1  # the waiter is treated unfairly already...
    plan = decide(within, p, make_placer("pack"))
    assert not plan.preempts and not plan.starts  # ...but the lease holds
    expired = snapshot(c, 900.0, (waiter,), (holder,))  # past the lease (and at a checkpoint: nothing lost)
    plan = decide(expired, p, make_placer("pack"))
    assert [x.job_id for x in plan.preempts] == ["holder"]
    assert [s.job_id for s in plan.starts] == ["waiter"]


def test_expired_lease_with_better_rho_is_preempted_for_a_worse_rho_job() -> None:
    c = cluster(1, 1, 1)
    # ahead: started at once, far ahead of its fair finish time. behind: waited long before it started, so
    # its rho is already bad; it must not be the one to go. fresh: within its lease.
    ahead = running(job("ahead", duration=50_000, submit=0.0), 0, started=0.0)
    behind = running(job("behind", duration=50_000, submit=0.0), 1, started=1800.0)
    fresh = running(job("fresh", duration=50_000, submit=0.0), 2, started=3300.0)
    waiter = queued(job("waiter", duration=200, submit=0.0))
    p = ThemisPolicy()
    snap = snapshot(c, 3600.0, (waiter,), (ahead, behind, fresh))
    rnd_key = sorted((ahead, behind, fresh), key=lambda v: p.victim_key(snap, v))
    assert [v.job_id for v in rnd_key] == ["ahead", "behind", "fresh"]
    assert p.may_preempt(snap, p.gate(snap), waiter, ahead)
    assert not p.may_preempt(snap, p.gate(snap), waiter, fresh)
    plan = decide(snap, p, make_placer("pack"))
    assert [x.job_id for x in plan.preempts] == ["ahead"]
    assert plan.starts[0].allocation.learner_nodes == (0,)


def test_no_preemption_when_the_victim_would_end_up_worse_off() -> None:
    c = cluster(1)
    # The holder ran 800 s since its last checkpoint: preempting it would throw that away.
    holder = running(job("holder", duration=2000, submit=0.0), 0, started=0.0)
    waiter = queued(job("waiter", duration=2000, submit=700.0))
    p = ThemisPolicy()
    snap = snapshot(c, 800.0, (waiter,), (holder,))
    assert not p.may_preempt(snap, p.gate(snap), waiter, holder)
    assert not decide(snap, p, make_placer("pack")).preempts


def test_only_offered_jobs_may_preempt() -> None:
    c = cluster(1)
    holder = running(job("holder", duration=100_000), 0, started=0.0)
    jobs = tuple(queued(job(f"w{i}", duration=100, submit=float(i))) for i in range(5))
    p = ThemisPolicy()
    snap = snapshot(c, 5000.0, jobs, (holder,))
    gate = p.gate(snap)
    assert p.offered(snap) == {"w0"}
    assert p.may_preempt(snap, gate, jobs[0], holder)
    assert not p.may_preempt(snap, gate, jobs[4], holder)
    assert not p.preemptor(snap, gate, jobs[4])


def het_cluster() -> Cluster:
    # K80 listed first: a heterogeneity-blind best fit would pick it on ties.
    return Cluster((Node("k0", 4, 32, 256, gpu_type="k80"), Node("p0", 4, 32, 256, gpu_type="p100"),
                    Node("v0", 4, 32, 256, gpu_type="v100")))


def test_a_job_with_a_high_k80_penalty_prefers_v100() -> None:
    c = het_cluster()
    slow_on_k80 = job("j", gpus=2, duration=100, type_speed=(("v100", 1.0), ("p100", 0.8), ("k80", 0.05)))
    fine_on_k80 = job("f", gpus=2, duration=100, type_speed=(("v100", 1.0), ("p100", 0.8), ("k80", 0.5)))
    p = ThemisPolicy()
    snap = Snapshot.idle(0.0, c, (queued(slow_on_k80), queued(fine_on_k80)))
    # 100 s of work takes 2,000 s on a K80: 1,900 s lost, more than a lease of waiting for a better GPU.
    assert p.type_preference(snap, snap.queued[0]) == ("v100", "p100")
    assert p.type_preference(snap, snap.queued[1]) == ("v100", "p100", "k80")  # 100 s lost: acceptable
    starts = {x.job_id: x.allocation for x in decide(snap, p, make_placer("pack")).starts}
    assert c.nodes[starts["j"].learner_nodes[0]].gpu_type == "v100"


def test_a_slow_type_is_accepted_once_waiting_cost_as_much() -> None:
    # Only K80 free. Ski rental: the job waits while waiting is cheaper than the K80 slowdown (1,900 s);
    # then it takes the K80 rather than wait on (decide places before it considers preempting).
    c = het_cluster()
    slow_on_k80 = job("j", gpus=2, duration=100, type_speed=(("v100", 1.0), ("p100", 0.8), ("k80", 0.05)))
    busy = (running(job("b1", gpus=4, duration=10_000), 1, 500.0),
            running(job("b2", gpus=4, duration=10_000), 2, 500.0))
    p = ThemisPolicy()
    early = snapshot(c, 1000.0, (queued(slow_on_k80),), busy)
    assert p.type_preference(early, early.queued[0]) == ("v100", "p100")
    assert p.rho(early, early.queued[0]) == pytest.approx(11.0)  # (1,000 waited + 100 on a V100) / 100
    plan = decide(early, p, make_placer("pack"))
    assert not plan.starts and not plan.preempts  # the V100/P100 holders are within their lease
    late = snapshot(c, 1900.0, (queued(slow_on_k80),), busy)
    assert p.type_preference(late, late.queued[0]) == ("v100", "p100", "k80")
    assert p.rho(late, late.queued[0]) == pytest.approx((1900 + 2000) / 100)
    start = decide(late, p, make_placer("pack")).starts[0]
    assert c.nodes[start.allocation.learner_nodes[0]].gpu_type == "k80"


def test_types_a_job_cannot_run_on_are_never_bid_for_and_defaults_order_the_rest() -> None:
    c = het_cluster()
    p = ThemisPolicy()
    no_k80 = queued(job("m", type_speed=(("v100", 1.0), ("p100", 0.9), ("k80", 0.0))))
    plain = queued(job("plain"))  # no per-type speeds: the simulator's defaults (V100 > P100 > K80)
    snap = Snapshot.idle(0.0, c, (no_k80, plain))
    assert p.type_preference(snap, no_k80) == ("v100", "p100")
    assert p.type_preference(snap, plain) == ("v100", "p100", "k80")
    # One GPU type: nothing to choose, the placer decides.
    assert p.type_preference(Snapshot.idle(0.0, cluster(4), (plain,)), plain) is None


def test_bid_counts_locality_when_types_are_close() -> None:
    # A 2-learner gang: the V100 servers have one free GPU each (it would span servers), a P100 server has
    # two. P100 at 0.95 x V100 on one server beats V100 across servers (language model: 1.25x slowdown).
    c = Cluster((Node("v0", 2, 32, 256, gpu_type="v100"), Node("v1", 2, 32, 256, gpu_type="v100"),
                 Node("p0", 2, 32, 256, gpu_type="p100")))
    gang = queued(job("g", learners=2, model="transformer", type_speed=(("v100", 1.0), ("p100", 0.95))))
    busy = (running(job("x"), 0, 0.0), running(job("y"), 1, 0.0))
    snap = snapshot(c, 0.0, (gang,), busy)
    p = ThemisPolicy()
    assert p.type_preference(snap, gang) == ("p100", "v100")
    start = decide(snap, p, make_placer("pack")).starts[0]
    assert start.allocation.learner_nodes == (2, 2)


def test_every_job_finishes_in_the_simulator() -> None:
    c = het_cluster()
    jobs = [job(f"j{i}", learners=1 + i % 2, gpus=1 + i % 2, duration=300.0 + 97 * i, submit=40.0 * i,
                model="resnet50" if i % 2 else "transformer") for i in range(30)]
    out = simulate(workload(*jobs), c, RunOptions(policy="themis"))
    assert out.summary["completed"] == 30
    assert all(r.status is JobStatus.COMPLETED for r in out.result.records)


def contended() -> list[JobSpec]:
    """Long wide jobs take the whole cluster; short narrow ones arrive right behind them."""
    wide = [job(f"wide{i}", learners=1, gpus=4, duration=20_000.0, submit=0.0) for i in range(4)]
    narrow = [job(f"narrow{i:02d}", duration=600.0, submit=10.0) for i in range(16)]
    return wide + narrow


def test_themis_is_fairer_than_fifo_on_a_contended_workload() -> None:
    c = cluster(4, 4, 4, 4)
    runs = {p: simulate(workload(*contended()), c, RunOptions(policy=p)).summary for p in ("fifo", "themis")}
    assert runs["themis"]["completed"] == runs["fifo"]["completed"] == 20
    # FIFO: every narrow job waits out the wide ones (rho 27.6). Themis: when the first leases expire, the
    # worst-off narrow jobs take a wide job's server (it loses its 600 s of work) and the others follow
    # through that server four at a time (measured: max rho 5.0, median 2.57, avg JCT 5,832 s vs 20,472).
    assert runs["fifo"]["max_rho"] > 27
    assert runs["themis"]["max_rho"] <= 5.0 + 1e-9
    assert runs["themis"]["avg_jct_s"] < runs["fifo"]["avg_jct_s"] / 3
    assert runs["themis"]["preemptions"] == 1


def test_a_lower_fairness_knob_is_fairer() -> None:
    # f = 0 offers to every waiting job each round: all four wide jobs yield at their first lease expiry.
    c = cluster(4, 4, 4, 4)
    rho = {}
    for f in (0.0, 0.8):
        sim = Simulator(c, ThemisPolicy(fairness_knob=f), make_placer("pack"), perf=PerformanceModel(c))
        result = sim.run(workload(*contended()))
        rho[f] = max(r.rho for r in result.records if r.rho is not None)
        assert result.preemptions == (4 if f == 0.0 else 1)
    assert rho[0.0] == pytest.approx(1.6)
    assert rho[0.0] < rho[0.8]


@st.composite
def contested(draw: st.DrawFn) -> Snapshot:
    """A full cluster of random running jobs (some wide, some within their lease) and a few queued ones.
    Progress is consistent: no job has done more work than the time since its submission (rate <= 1)."""
    c = cluster(*([8] * 8))
    nodes = list(range(8))
    run = []
    for i, node in enumerate(nodes):
        submit = draw(st.floats(0, 5000))
        started = submit + draw(st.floats(0, 3000))
        work = draw(st.floats(0, started - submit))
        spec = job(f"r{i}", gpus=draw(st.sampled_from([1, 2, 4, 8])), submit=submit,
                   duration=work + draw(st.floats(1, 50_000)))
        run.append(running(spec, node, started, work, rate=draw(st.floats(0.05, 1.0))))
    clock = 8000.0 + draw(st.floats(0, 5000))
    queue = tuple(queued(job(f"q{i}", gpus=draw(st.sampled_from([1, 8])), learners=draw(st.integers(1, 4)),
                             submit=draw(st.floats(0, clock)), duration=draw(st.floats(1, 20_000))))
                  for i in range(draw(st.integers(1, 40))))
    return snapshot(c, clock, queue, tuple(run))


@settings(max_examples=200, deadline=None)
@given(contested(), st.sampled_from([0.0, 0.5, 0.8]))
def test_victim_search_finds_exactly_the_jobs_may_preempt_allows(snap: Snapshot, f: float) -> None:
    # victim_candidates skips running jobs by a bound instead of valuing each: it must lose none.
    p = ThemisPolicy(fairness_knob=f)
    gate = p.gate(snap)
    for j in p.rank(snap):
        found = [v.job_id for v in p.victim_candidates(snap, gate, j, lambda: snap.running)]
        allowed = {v.job_id for v in snap.running if p.may_preempt(snap, gate, j, v)}
        assert set(found) == allowed and len(found) == len(allowed)
        if j.job_id not in p.offered(snap):
            assert not found


@settings(max_examples=200, deadline=None)
@given(contested(), st.sampled_from([0.0, 0.5, 0.8]))
def test_releasable_gpus_are_those_of_the_victim_candidates(snap: Snapshot, f: float) -> None:
    # decide() gives up a displacement that cannot free enough GPUs without walking the victims: the bound
    # must be the GPUs of exactly the jobs victim_candidates() would release (0 for a job not offered).
    p = ThemisPolicy(fairness_knob=f)
    gate = p.gate(snap)
    for j in p.rank(snap):
        bound = p.releasable_gpus(snap, gate, j)
        held = sum(v.allocation.gpus for v in p.victim_candidates(snap, gate, j, lambda: snap.running)
                   if v.allocation is not None)
        assert bound == held


@settings(max_examples=200, deadline=None)
@given(contested(), st.sampled_from([0.0, 0.5, 0.8]))
def test_releasable_by_server_are_the_victim_candidates_gpus_on_each_server(snap: Snapshot, f: float) -> None:
    # decide() gives up a displacement whose gang would not fit on the servers even with every victim
    # released: the bound must be what exactly those jobs hold, server by server (asked in rank order, as
    # decide() asks, so the per-prefix memo is exercised; None for a job not offered).
    p = ThemisPolicy(fairness_knob=f)
    gate = p.gate(snap)
    for j in p.rank(snap):
        got = p.releasable_by_server(snap, gate, j)
        if j.job_id not in p.offered(snap):
            assert got is None
            continue
        held = np.zeros(len(snap.free_gpus))
        for v in p.victim_candidates(snap, gate, j, lambda: snap.running):
            assert v.allocation is not None
            for node in v.allocation.learner_nodes:
                held[node] += v.allocation.gpus_per_learner
        assert got is not None and got.tolist() == held.tolist()


@st.composite
def queues(draw: st.DrawFn) -> Snapshot:
    """A queue short (ranked in Python) or long (ranked with numpy), on one GPU type or three, of jobs with or
    without per-type speeds, some with work done before (preempted), some of equal submit times (ties)."""
    het = draw(st.booleans())
    c = het_cluster() if het else cluster(4, 4, 4)
    clock = 10_000.0 + draw(st.floats(0, 5000))
    speeds = (None, (("v100", 1.0), ("p100", 0.8), ("k80", 0.05)), (("v100", 1.0), ("p100", 0.9), ("k80", 0.5)))
    views = []
    for i in range(draw(st.sampled_from([2, 5, 40, 63, 64, 150]))):
        spec = job(f"q{i:03d}", gpus=draw(st.sampled_from([0, 1, 2, 4])), learners=draw(st.integers(1, 3)),
                   submit=float(draw(st.integers(0, 20))) * 500.0, duration=draw(st.floats(1, 20_000)),
                   type_speed=draw(st.sampled_from(speeds)))
        done = draw(st.floats(0, spec.duration_s))
        views.append(JobView(spec, spec.submit_time_s, work_done_s=done, as_of=spec.submit_time_s))
    return Snapshot.idle(clock, c, tuple(views))


@settings(max_examples=150, deadline=None)
@given(queues(), st.sampled_from([0.0, 0.5, 0.8]))
def test_the_ranking_is_worst_rho_offered_then_least_remaining_gpu_time(snap: Snapshot, f: float) -> None:
    # The ranking's fast paths (one pass over a short queue, numpy over a long one) against the definition:
    # rho from queued_rho() (bid, remaining work, ideal time), sorted as the module docstring says.
    p = ThemisPolicy(fairness_knob=f)
    ranked = [j.job_id for j in p.rank(snap)]
    ref = ThemisPolicy(fairness_knob=f)._round(snap)
    ref.rho.clear()
    ref.bids.clear()
    rho = {j.job_id: ref.queued_rho(j) for j in snap.queued}
    by_rho = sorted(snap.queued, key=lambda j: (-rho[j.job_id], j.spec.submit_time_s, j.job_id))
    k = p.offer_count(len(by_rho))
    rest = sorted(by_rho[k:], key=lambda j: (j.remaining_at(snap.clock) * j.spec.gpus, j.spec.submit_time_s,
                                              j.job_id))
    assert ranked == [j.job_id for j in by_rho[:k] + rest]
    assert p.offered(snap) == {j.job_id for j in by_rho[:k]}
    assert {j.job_id: p.rho(snap, j) for j in snap.queued} == rho
    assert {j.job_id: p.type_preference(snap, j) for j in snap.queued} == {
        j.job_id: ref.bid(j)[0] for j in snap.queued}


@settings(max_examples=100, deadline=None)
@given(queues(), st.sampled_from([0.0, 0.5, 0.8]))
def test_the_decision_class_is_the_offer_and_the_bid(snap: Snapshot, f: float) -> None:
    # decision_class() answers from the offer alone where every bid is any type's (no per-job classes then):
    # it must stay (offered, the bid's types) for every queued job, on one GPU type or several.
    p = ThemisPolicy(fairness_knob=f)
    offered = p.offered(snap)
    for j in p.rank(snap):
        types = p.type_preference(snap, j)
        assert p.decision_class(snap, j) == (j.job_id in offered, None if types is None else tuple(types))


@settings(max_examples=100, deadline=None)
@given(contested(), st.sampled_from([0.5, 3.0, 64.0]), st.sampled_from([0.0, 900.0]))
def test_rho_if_preempted_redoes_the_work_since_the_last_checkpoint_and_pays_a_restart(
        snap: Snapshot, share: float, ckpt: float) -> None:
    # _rho_if_preempted writes work_at() and _ideal_s() out for speed: it must stay their composition.
    clock = snap.clock
    for v in snap.running:
        work = v.work_at(clock)
        lost = work % ckpt if ckpt > 0 else work
        shared = (clock - v.spec.submit_time_s) + 30.0 + (v.remaining_at(clock) + lost) / max(v.rate, 1e-9)
        assert _rho_if_preempted(v, clock, share, ckpt, 30.0) == shared / _ideal_s(v.spec, share)


@settings(max_examples=100, deadline=None)
@given(contested(), st.sampled_from([0.5, 1.0, 5.0]))
def test_the_victim_list_values_each_victim_as_rho_if_preempted_does(snap: Snapshot, rho: float) -> None:
    # victims() writes _rho_if_preempted out inline: the values and the order must stay its.
    policy = ThemisPolicy()
    rnd = policy._round(snap)
    entries = rnd.victims(rho)
    p = policy
    expected = sorted((_rho_if_preempted(e[3], snap.clock, rnd.share, p.checkpoint_interval_s,
                                          p.restart_overhead_s), e[1], e[2]) for e in entries)
    assert [e[:3] for e in entries] == expected


# -- the re-auction with migration (issue 13): a running job whose lease ended may move to better GPUs --------
def on_k80(duration: float, work: float, started: float = 0.0) -> Snapshot:
    """A job 20x slower on K80 than on V100, running on the K80 server since `started` at its K80 rate with `work`
    done by now (5,000 s); the V100 and P100 servers free, nobody queued."""
    c = het_cluster()
    spec = job("slow", gpus=4, duration=duration, type_speed=(("v100", 1.0), ("p100", 0.8), ("k80", 0.05)))
    view = JobView(spec, 0.0, allocation=Allocation("slow", (0,), 4, 0, 0), work_done_s=work, rate=0.05,
                   as_of=5000.0, started_at=started)
    return snapshot(c, 5000.0, (), (view,))


def test_a_running_job_moves_to_the_faster_gpus_the_reauction_offers_it() -> None:
    snap = on_k80(duration=100_000.0, work=0.0)
    assert decide(snap, ThemisPolicy(), make_placer("pack")).migrations == ()  # off by default
    [move] = decide(snap, ThemisPolicy(), make_placer("pack"), migrate=True).migrations
    assert move.job_id == "slow"
    assert snap.cluster.nodes[move.allocation.learner_nodes[0]].gpu_type == "v100"


def test_no_move_when_the_restart_and_lost_work_cost_more_than_the_faster_gpus_save() -> None:
    # 250 s of work done, 50 s left (1,000 s on the K80): moved, it redoes the 250 s since its (absent)
    # checkpoint plus a restart, 330 s on a V100 -- still sooner. With 1 s left it is not worth it.
    assert decide(on_k80(duration=300.0, work=250.0), ThemisPolicy(checkpoint_interval_s=0.0), make_placer("pack"),
                  migrate=True).migrations != ()
    assert decide(on_k80(duration=251.0, work=250.0), ThemisPolicy(checkpoint_interval_s=0.0), make_placer("pack"),
                  migrate=True).migrations == ()


def test_a_job_within_its_lease_is_not_moved() -> None:
    snap = on_k80(duration=100_000.0, work=0.0, started=4800.0)  # started 200 s ago: lease of 600 s
    assert decide(snap, ThemisPolicy(), make_placer("pack"), migrate=True).migrations == ()


def test_the_session_reauctions_as_decide_does() -> None:
    snap = on_k80(duration=100_000.0, work=0.0)
    session = Session(ThemisPolicy(), make_placer("pack"), migrate=True)
    assert session.decide(snap) == decide(snap, ThemisPolicy(), make_placer("pack"), migrate=True)


def test_the_simulator_carries_out_reauction_moves_and_every_job_finishes() -> None:
    # a and b hold the two V100 servers; c accepts the K80 at once (a 10,000 s lease makes waiting for a V100
    # cost more than the K80's slowdown); a wide d waits behind them. Once V100s free up, c (its lease over)
    # moves there: it finishes sooner than on the K80, a move is not a preemption, every job finishes.
    c = Cluster((Node("k0", 4, 32, 256, gpu_type="k80"), Node("v0", 4, 32, 256, gpu_type="v100"),
                 Node("v1", 4, 32, 256, gpu_type="v100")))
    speeds = (("v100", 1.0), ("k80", 0.6))
    jobs = [job("a", gpus=4, duration=12_000.0, type_speed=speeds),
            job("b", gpus=4, duration=20_000.0, type_speed=speeds),
            job("c", gpus=4, duration=14_000.0, submit=10.0, type_speed=speeds),
            job("d", gpus=4, learners=2, duration=1000.0, submit=11_000.0, type_speed=speeds)]

    def run(migrate: bool) -> SimResult:
        return Simulator(c, ThemisPolicy(lease_s=10_000), make_placer("pack"), FailureModel(seed=0),
                         PerformanceModel(c), SimConfig(migrate=migrate)).run(workload(*jobs))

    plain, moved = run(False), run(True)
    assert "migrations" not in plain.mode_metrics and moved.mode_metrics["migrations"] == 1
    by_id = {r.spec.job_id: r for r in moved.records}
    assert by_id["c"].migrations == 1 and by_id["c"].preemptions == 0
    assert by_id["c"].gpu_s_lost_migrating > 0
    assert by_id["c"].finish_s < {r.spec.job_id: r for r in plain.records}["c"].finish_s
    assert all(r.status is JobStatus.COMPLETED for r in moved.records + plain.records)


def test_the_simulator_reauctions_when_nobody_waits() -> None:
    # As above without d: when a's V100 server frees at 12,000 s nobody is queued, and c (its lease over) still
    # moves there, as the live loop (which decides on every change) would move it. Before, the simulator made
    # no decision with an empty queue and c ran out its time on the K80.
    c = Cluster((Node("k0", 4, 32, 256, gpu_type="k80"), Node("v0", 4, 32, 256, gpu_type="v100"),
                 Node("v1", 4, 32, 256, gpu_type="v100")))
    speeds = (("v100", 1.0), ("k80", 0.6))
    jobs = [job("a", gpus=4, duration=12_000.0, type_speed=speeds),
            job("b", gpus=4, duration=20_000.0, type_speed=speeds),
            job("c", gpus=4, duration=14_000.0, submit=10.0, type_speed=speeds)]
    res = Simulator(c, ThemisPolicy(lease_s=10_000), make_placer("pack"), FailureModel(seed=0),
                    PerformanceModel(c), SimConfig(migrate=True)).run(workload(*jobs))
    by_id = {r.spec.job_id: r for r in res.records}
    assert by_id["c"].migrations == 1 and res.mode_metrics["migrations"] == 1
    assert by_id["c"].finish_s < 10.0 + 14_000.0 / 0.6  # sooner than staying on the K80
    assert all(r.status is JobStatus.COMPLETED for r in res.records)


def _answers(p: ThemisPolicy, snap: Snapshot) -> object:
    """Everything decide() asks of Themis about a snapshot, in decide's order (the victim list is built for
    the worst-rho job first)."""
    gate = p.gate(snap)
    ranked = list(p.rank(snap))
    out: list[object] = [[j.job_id for j in ranked], sorted(p.offered(snap))]
    for j in ranked:
        server = p.releasable_by_server(snap, gate, j)
        out.append((j.job_id, p.rho(snap, j), p.type_preference(snap, j), p.decision_class(snap, j),
                    p.releasable_gpus(snap, gate, j), None if server is None else server.tolist(),
                    [v.job_id for v in p.victim_candidates(snap, gate, j, lambda: snap.running)]))
    out.append([(v.job_id, p.victim_key(snap, v)) for v in snap.running])
    return out


@st.composite
def evolving(draw: st.DrawFn) -> list[Snapshot]:
    """Snapshots of one cluster as a shell makes them: the clock moves on, most views stay the same objects,
    some jobs leave, arrive, start, are preempted back into the queue (work done, sometimes a rate while their
    restart is paid), and the queue crosses the length where the ranking switches to numpy."""
    c = het_cluster() if draw(st.booleans()) else cluster(*([8] * 8))
    speeds = (None, (("v100", 1.0), ("p100", 0.8), ("k80", 0.05)))
    clock = 10_000.0
    queue: dict[str, JobView] = {}
    run: dict[str, JobView] = {}
    used = [0] * len(c.nodes)
    snaps = []
    n = 0
    for _ in range(draw(st.integers(2, 6))):
        for _ in range(draw(st.sampled_from([0, 1, 3, 20, 70]))):
            spec = job(f"j{n:03d}", gpus=draw(st.sampled_from([1, 2, 8])), learners=draw(st.integers(1, 2)),
                       submit=clock - draw(st.floats(0, 5000)), duration=draw(st.floats(1, 20_000)),
                       type_speed=draw(st.sampled_from(speeds)))
            n += 1
            queue[spec.job_id] = JobView(spec, spec.submit_time_s, work_done_s=draw(st.sampled_from([0.0, 50.0])),
                                         rate=draw(st.sampled_from([0.0, 0.0, 0.5])), as_of=clock)
        for job_id in list(queue)[:draw(st.integers(0, 3))]:  # some start where there is room
            spec = queue[job_id].spec
            node = next((i for i, u in enumerate(used) if u + spec.gpus <= c.nodes[i].gpus), None)
            if node is not None and spec.learners == 1:
                used[node] += spec.gpus
                del queue[job_id]
                run[job_id] = JobView(spec, spec.submit_time_s, allocation=Allocation(job_id, (node,), spec.gpus,
                                      0, 0), work_done_s=0.0, rate=draw(st.sampled_from([1.0, 0.5])),
                                      as_of=clock, started_at=clock - draw(st.sampled_from([0.0, 700.0])))
        for job_id in list(run)[:draw(st.integers(0, 2))]:  # some are preempted back into the queue
            view = run.pop(job_id)
            assert view.allocation is not None
            used[view.allocation.learner_nodes[0]] -= view.spec.gpus
            queue[job_id] = JobView(view.spec, clock, 2, work_done_s=view.work_at(clock), as_of=clock)
        for job_id in list(queue)[:draw(st.integers(0, 2))]:  # some are cancelled
            del queue[job_id]
        snaps.append(snapshot(c, clock, tuple(queue.values()), tuple(run.values())))
        clock += draw(st.sampled_from([1.0, 300.0, 700.0]))
    return snaps


@settings(max_examples=60, deadline=None)
@given(evolving(), st.sampled_from([0.0, 0.8]))
def test_what_is_kept_between_snapshots_answers_as_a_fresh_policy_does(snaps: list[Snapshot], f: float) -> None:
    # The facts kept from one snapshot to the next (queued and running jobs' own, by view) must give every
    # answer a policy that sees each snapshot for the first time gives, bit for bit.
    kept = ThemisPolicy(fairness_knob=f)
    for snap in snaps:
        assert _answers(kept, snap) == _answers(ThemisPolicy(fairness_knob=f), snap)


def test_a_lone_start_makes_no_round() -> None:
    # Where the bid can only be "any type" (no speeds of its own on a cluster whose types are worth the same),
    # type_preference() answers without the per-snapshot round: decide.start_alone, the lone arrival's start,
    # asks nothing else of Themis.
    plain = queued(job("a", gpus=2))
    snap = Snapshot.idle(0.0, cluster(2, 4), (plain,))
    p = ThemisPolicy()
    assert start_alone(snap, p, make_placer("pack"), plain) is not None
    assert p._last is None
    assert p.type_preference(snap, plain) is None and p._last is None
    # A job with speeds of its own bids through the round.
    typed = queued(job("t", type_speed=(("k80", 1.0),)))
    p.type_preference(Snapshot.idle(0.0, cluster(2, 4), (typed,)), typed)
    assert p._last is not None
