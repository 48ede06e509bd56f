"""SRTF, LAS (Tiresias), heterogeneity-aware LAS and strict priority: unit tests, a property test on
random states, and simulator runs that must end every job without thrashing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.scheduling import JobView, Plan, Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.policies.priority import PriorityPolicy
from loadmaster.scheduling.policies.srtf import (
    DEFAULT_CHECKPOINT_INTERVAL_S,
    SrtfPolicy,
    checkpointed_this_run,
    work_since_checkpoint,
)
from loadmaster.scheduling.session import Session
from loadmaster.sim.experiment import RunOptions, simulate
from tests.helpers import cluster, job, queued, workload
from tests.scheduling.test_invariants import check_invariants, snapshots


def running(spec: JobSpec, nodes: tuple[int, ...], *, started: float = 0.0, work: float = 0.0,
            attained: float = 0.0, rate: float = 1.0, queued_since: float | None = None) -> JobView:
    """A running view: `work` and `attained` as of `started`, progressing at `rate` from then on."""
    alloc = Allocation(spec.job_id, nodes, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner)
    since = spec.submit_time_s if queued_since is None else queued_since
    return JobView(spec, since, allocation=alloc, work_done_s=work, rate=rate, as_of=started,
                   attained_gpu_s=attained, started_at=started)


def busy_snapshot(clock: float, c: Cluster, run: tuple[JobView, ...], waiting: tuple[JobView, ...]) -> Snapshot:
    free = c.gpu_capacity.astype(float)
    for v in run:
        assert v.allocation is not None
        for n, k in v.allocation.per_node().items():
            free[n] -= k * v.allocation.gpus_per_learner
    return Snapshot.build(clock, c, free, c.cpu_capacity, c.mem_capacity, waiting, run)


def outcome(plan: Plan) -> tuple[list[str], list[str]]:
    return [p.job_id for p in plan.preempts], [s.job_id for s in plan.starts]


# -- SRTF ---------------------------------------------------------------------------------------------
def test_srtf_preempts_a_long_job_for_a_short_one_and_not_back() -> None:
    c = cluster(4)
    long = running(job("long", gpus=4, duration=10_000), (0,))
    short = queued(job("short", gpus=4, duration=50, submit=100))
    plan = decide(busy_snapshot(100, c, (long,), (short,)), SrtfPolicy(), make_placer("pack"))
    assert outcome(plan) == (["long"], ["short"])
    # Not vice versa: a long job waits behind a short one.
    plan2 = decide(busy_snapshot(100, c, (running(short.spec, (0,), started=100),),
                                 (queued(long.spec),)), SrtfPolicy(), make_placer("pack"))
    assert outcome(plan2) == ([], [])


def test_srtf_does_not_preempt_when_the_lost_work_outweighs_the_gain() -> None:
    # 800 s done of 1,000, nothing checkpointed (every 900 s): preempting loses 800 s to save a 100-s job
    # 200 s of waiting, which costs more than it saves.
    c = cluster(1)
    nearly = running(job("nearly", duration=1000), (0,))
    newcomer = queued(job("new", duration=100, submit=800))
    plan = decide(busy_snapshot(800, c, (nearly,), (newcomer,)), SrtfPolicy(), make_placer("pack"))
    assert outcome(plan) == ([], [])
    # Just after a checkpoint little is lost, and the shorter job goes first.
    plan2 = decide(busy_snapshot(100, c, (running(job("early", duration=1000), (0,)),),
                                 (queued(job("new", duration=100, submit=100)),)), SrtfPolicy(), make_placer("pack"))
    assert outcome(plan2) == (["early"], ["new"])


def test_srtf_ranks_by_remaining_work_not_by_size() -> None:
    half_done = JobView(job("half", duration=1000, submit=0), 0, work_done_s=900)
    fresh = queued(job("fresh", duration=200, submit=5))
    ranked = SrtfPolicy().rank(Snapshot.idle(10, cluster(1), (fresh, half_done)))
    assert [j.job_id for j in ranked] == ["half", "fresh"]


# -- LAS ----------------------------------------------------------------------------------------------
def test_las_demotes_after_the_threshold_and_only_then_preempts() -> None:
    c = cluster(4)
    pol = LasPolicy()
    assert (pol.thresholds, pol.starve_factor, pol.round_s, pol.max_loss_s) == ((3250.0,), 100.0, 60.0, 60.0)
    old = running(job("old", gpus=4, duration=100_000), (0,))
    new = queued(job("new", gpus=4, duration=100, submit=700))
    # 4 GPUs x 700 s = 2,800 GPU-s: still in the first queue with the newcomer, so no preemption.
    early = busy_snapshot(700, c, (old,), (new,))
    assert pol.queue(early, old) == 0
    assert outcome(decide(early, pol, make_placer("pack"))) == ([], [])
    # 4 x 900 = 3,600 GPU-s: demoted, and (just checkpointed at 900 s of work) a first-queue job displaces it.
    late = busy_snapshot(900, c, (old,), (new,))
    assert pol.queue(late, old) == 1
    assert outcome(decide(late, pol, make_placer("pack"))) == (["old"], ["new"])


def test_las_never_preempts_inside_a_queue() -> None:
    c = cluster(4)
    pol = LasPolicy()
    # Both demoted, the running one submitted later: FIFO order would favour the waiting one, but jobs of
    # one queue never displace each other.
    late_runner = running(job("runner", gpus=4, duration=100_000, submit=50), (0,), started=1000,
                          attained=10_000)
    waiter = JobView(job("waiter", gpus=4, duration=100_000, submit=0), 900, attained_gpu_s=4000)
    snap = busy_snapshot(1100, c, (late_runner,), (waiter,))
    assert pol.queue(snap, late_runner) == pol.queue(snap, waiter) == 1
    assert outcome(decide(snap, pol, make_placer("pack"))) == ([], [])


def test_las_displaces_only_just_after_a_checkpoint() -> None:
    c = cluster(4)
    pol = LasPolicy()  # checkpoints every 900 work-seconds, at most 60 s of work lost
    demoted = running(job("demoted", gpus=4, duration=100_000), (0,), started=1000, work=900, attained=8000)
    new = queued(job("new", gpus=4, duration=100, submit=1000))

    def displaced(clock: float) -> bool:
        snap = busy_snapshot(clock, c, (demoted,), (new,))
        assert pol.queue(snap, demoted) == 1 and pol.queue(snap, new) == 0
        return outcome(decide(snap, pol, make_placer("pack"))) == (["demoted"], ["new"])

    # Restarted at 900 s of work: not before it has saved a checkpoint in this run (at 1,800 s of work),
    # then only in the 60 s after each checkpoint.
    assert not displaced(1030) and not displaced(1899)
    assert displaced(1900) and displaced(1960)
    assert not displaced(1961) and not displaced(2799)
    assert displaced(2800)
    # Without the window (Tiresias as published): any time.
    early = busy_snapshot(1030, c, (demoted,), (new,))
    free_for_all = LasPolicy(max_loss_s=None)
    assert free_for_all.may_preempt(early, free_for_all.gate(early), new, demoted)


def test_las_ranks_queues_first_then_fifo() -> None:
    demoted = JobView(job("demoted", submit=0), 0, attained_gpu_s=5000)
    a = queued(job("a", submit=10))
    b = queued(job("b", submit=20))
    ranked = LasPolicy().rank(Snapshot.idle(30, cluster(1), (b, demoted, a)))
    assert [j.job_id for j in ranked] == ["a", "b", "demoted"]


def test_las_promotes_a_starving_job_and_keeps_it_promoted_while_it_runs() -> None:
    c = cluster(1)
    pol = LasPolicy(starve_factor=8, max_loss_s=None)
    # Ran 4,000 s on one GPU (demoted), queued again at t=10,000: starving from t = 10,000 + 8 x 4,000.
    spec = job("starved", duration=100_000)
    waiting = JobView(spec, 10_000, attained_gpu_s=4000, work_done_s=3600, as_of=10_000)
    blocker = running(job("blocker", duration=100_000, submit=5000), (0,), started=10_000, attained=20_000)
    before = busy_snapshot(41_999, c, (blocker,), (waiting,))
    assert pol.queue(before, waiting) == 1
    assert outcome(decide(before, pol, make_placer("pack"))) == ([], [])
    after = busy_snapshot(42_000, c, (blocker,), (waiting,))
    assert pol.queue(after, waiting) == 0
    assert outcome(decide(after, pol, make_placer("pack"))) == (["blocker"], ["starved"])
    # Running after its promotion, only this run's service counts (Tiresias resets the executed time).
    promoted = running(spec, (0,), started=42_000, attained=4000, work=3600, queued_since=10_000)
    assert pol.queue(busy_snapshot(42_000 + 3000, c, (promoted,), ()), promoted) == 0
    assert pol.queue(busy_snapshot(42_000 + 3300, c, (promoted,), ()), promoted) == 1
    # Without the guard it stays where its service puts it.
    assert LasPolicy(starve_factor=None).queue(after, waiting) == 1


def test_las_het_counts_work_not_gpu_time() -> None:
    # 10,000 s on one GPU at a fifth of its best speed: 10,000 GPU-s held, 2,000 work-seconds attained.
    slow = running(job("slow", duration=100_000), (0,), rate=0.2)
    snap = busy_snapshot(10_000, cluster(1), (slow,), ())
    assert LasPolicy().queue(snap, slow) == 1
    assert HetLasPolicy().queue(snap, slow) == 0


def test_las_het_prefers_the_types_the_job_runs_fastest_on() -> None:
    c = Cluster((Node("k", 4, 32, 256, gpu_type="k80"), Node("p", 4, 32, 256, gpu_type="p100"),
                 Node("v", 4, 32, 256, gpu_type="v100")))
    pol = HetLasPolicy()
    plain = queued(job("plain"))
    own = queued(job("own", type_speed=(("k80", 3.0), ("p100", 1.0), ("v100", 2.0))))
    snap = Snapshot.idle(0, c, (plain, own))
    assert pol.type_preference(snap, plain) == ["v100", "p100", "k80"]
    assert pol.type_preference(snap, own) == ["k80", "v100", "p100"]
    starts = {s.job_id: c.nodes[s.allocation.learner_nodes[0]].gpu_type
              for s in decide(snap, pol, make_placer("pack")).starts}
    assert starts == {"plain": "v100", "own": "k80"}
    assert pol.type_preference(Snapshot.idle(0, cluster(4), (plain,)), plain) is None


def test_las_het_works_out_a_preference_once_per_cluster_types_and_job_speeds() -> None:
    # Asked at every start: the order follows the cluster's types and the job's speeds alone, so a later job
    # with the same speeds (or none), on another snapshot, gets the list worked out for the first.
    c = _three_types()
    pol = HetLasPolicy()
    plain, other = queued(job("plain")), queued(job("other", submit=5))
    own = queued(job("own", type_speed=(("k80", 3.0), ("p100", 1.0), ("v100", 2.0))))
    first = pol.type_preference(Snapshot.idle(0, c, (plain,)), plain)
    assert pol.type_preference(Snapshot.idle(10, c, (other,)), other) is first
    assert pol.type_preference(Snapshot.idle(10, c, (own,)), own) == ["k80", "v100", "p100"]
    assert first == ["v100", "p100", "k80"]


# -- priority -----------------------------------------------------------------------------------------
def test_priority_reads_the_running_classes_from_the_shells_count() -> None:
    # preemptor() asks whether any running job is of a lower class: from the count a shell keeps (the simulator)
    # without reading the running jobs, or from the snapshot's own count of them when no shell gives one.
    c = cluster(4)
    run = (running(job("low", gpus=2, priority=0), (0,)), running(job("mid", gpus=2, priority=1), (0,)))
    high, same = queued(job("high", priority=2, submit=50)), queued(job("same", priority=0, submit=60))
    pol = PriorityPolicy()
    snap = busy_snapshot(100, c, run, (high, same))
    gate = pol.gate(snap)
    assert dict(snap.running_priorities) == {0: 1, 1: 1}
    assert pol.preemptor(snap, gate, high) and not pol.preemptor(snap, gate, same)

    def never() -> tuple[JobView, ...]:
        raise AssertionError("the running jobs were read")

    counted = Snapshot.build(100.0, c, snap.free_gpus, snap.free_cpus, snap.free_mem, (high, same), never,
                             tenant_gpus={"default": 4}, running_priorities=lambda: {1: 1})
    assert pol.preemptor(counted, gate, high)
    assert not pol.preemptor(counted, gate, same)
    assert not pol.preemptor(busy_snapshot(300, c, (), (high,)), gate, high)  # nobody running


def test_priority_preempts_lower_classes_only() -> None:
    c = cluster(4)
    low = running(job("low", gpus=4, duration=10_000, priority=0), (0,))
    high = queued(job("high", gpus=4, priority=2, submit=50))
    same = queued(job("same", gpus=4, priority=0, submit=50))
    assert outcome(decide(busy_snapshot(100, c, (low,), (high,)), PriorityPolicy(), make_placer("pack"))) == (
        ["low"], ["high"])
    assert outcome(decide(busy_snapshot(100, c, (low,), (same,)), PriorityPolicy(), make_placer("pack"))) == (
        [], [])


def test_priority_picks_the_victim_that_loses_least_work() -> None:
    c = cluster(2, 2, 2)
    # Checkpoints every 900 work-seconds: at t=1,000 "fresh" (started at 950) has 50 s to lose, "midway"
    # 100 s (1,000 done, 900 kept), "deep" 800 s; "vip" is of a higher class and is never a victim of
    # class 1. Lower classes go before any loss comparison: "deep" is class 0.
    fresh = running(job("fresh", gpus=2, duration=10_000, priority=1), (0,), started=950)
    midway = running(job("midway", gpus=2, duration=10_000, priority=1), (1,))
    deep = running(job("deep", gpus=2, duration=10_000, priority=0), (2,), started=200)
    pol = PriorityPolicy()
    snap = busy_snapshot(1000, c, (fresh, midway, deep), (queued(job("urgent", gpus=2, priority=5, submit=999)),))
    assert [pol.lost_gpu_s(snap, v) for v in (fresh, midway, deep)] == [2 * 80, 2 * 130, 2 * 830]
    assert outcome(decide(snap, pol, make_placer("pack"))) == (["deep"], ["urgent"])
    # Among one class, the one that loses least.
    snap2 = busy_snapshot(1000, c, (fresh, midway, running(job("other", gpus=2, priority=3), (2,))),
                          (queued(job("urgent", gpus=2, priority=2, submit=999)),))
    assert outcome(decide(snap2, pol, make_placer("pack"))) == (["fresh"], ["urgent"])


def test_priority_is_fifo_within_a_class() -> None:
    jobs = (queued(job("a", priority=0, submit=0)), queued(job("b", priority=1, submit=5)),
            queued(job("c", priority=1, submit=3)), queued(job("d", priority=0, submit=1)))
    ranked = PriorityPolicy().rank(Snapshot.idle(10, cluster(1), jobs))
    assert [j.job_id for j in ranked] == ["c", "b", "a", "d"]


# -- every keyed policy -------------------------------------------------------------------------------
KEYED = ("srtf", "las", "las-het", "priority", "las-gavel")


@pytest.mark.parametrize("name", KEYED)
def test_registered_with_defaults(name: str) -> None:
    assert POLICIES[name]().name == name


@settings(max_examples=60, deadline=None)
@given(snapshots(), st.sampled_from(KEYED))
def test_keyed_plans_keep_the_invariants_and_displace_only_less_urgent_jobs(snap: Snapshot, name: str) -> None:
    pol = make_policy(name)
    plan = decide(snap, pol, make_placer("pack"))
    check_invariants(snap, plan, name)
    queued_by_id = {j.job_id: j for j in snap.queued}
    running_by_id = {j.job_id: j for j in snap.running}
    for p in plan.preempts:
        assert pol.may_preempt(snap, pol.gate(snap), queued_by_id[p.for_job], running_by_id[p.job_id])


def random_workload(seed: int, n: int = 80) -> list[JobSpec]:
    """Poisson arrivals, log-normal runtimes, gangs of 1-8 GPUs: about 55% load on 16 GPUs, in bursts."""
    rng = random.Random(seed)
    t = 0.0
    specs = []
    for i in range(n):
        t += rng.expovariate(1 / 800)
        learners, gpus = rng.choice([(1, 1), (1, 1), (1, 2), (2, 1), (1, 4), (2, 2), (2, 4), (4, 2)])
        specs.append(job(f"j{i}", learners=learners, gpus=gpus, duration=float(int(rng.lognormvariate(7, 1.2)) + 1),
                         submit=round(t), tenant=rng.choice("AB"), priority=rng.choice([0, 0, 1, 2]),
                         model=rng.choice(["resnet50", "transformer", ""])))
    return specs


@pytest.mark.parametrize("name", KEYED)
def test_simulated_jobs_all_end_without_thrashing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    displaced: list[tuple[float, JobView, str]] = []  # (when, victim as it ran, for which job)
    # Session._decide serves decide() and start_or_decide() (the simulator's loop calls the latter): a lone start
    # comes back as (job id, allocation), which displaces nobody.
    real_decide = Session._decide

    def spy(self: Session, snap: Snapshot) -> Plan | tuple[str, Allocation]:
        got = real_decide(self, snap)
        if isinstance(got, Plan):
            by_id = {j.job_id: j for j in snap.running}
            displaced.extend((snap.clock, by_id[p.job_id], p.for_job) for p in got.preempts)
        return got

    monkeypatch.setattr(Session, "_decide", spy)
    # Two GPU types: a gang never mixes them, so 8 GPUs is the largest gang that fits.
    c = Cluster(tuple(Node(f"n{i}", 4, 32, 256, gpu_type=("v100", "k80")[i % 2], rack=f"r{i % 2}")
                      for i in range(4)))
    specs = random_workload(seed=KEYED.index(name))
    run = simulate(workload(*specs), c, RunOptions(policy=name))
    records = run.result.records
    assert len(records) == len(specs)
    assert all(r.status is JobStatus.COMPLETED for r in records)
    assert len(displaced) == run.result.preemptions <= len(specs)
    pairs = {(v.job_id, j) for _, v, j in displaced}
    if name in ("srtf", "priority"):
        # No two jobs ever displace each other back and forth.
        assert not any((j, v) in pairs for v, j in pairs)
    else:
        # LAS may swap two jobs over time (a promotion), but never cuts a run short of its first
        # checkpoint (every run it interrupts has made progress that is kept), and never loses more
        # than a minute of work.
        assert all(checkpointed_this_run(v, t, DEFAULT_CHECKPOINT_INTERVAL_S) for t, v, _ in displaced)
        assert all(work_since_checkpoint(v, t, DEFAULT_CHECKPOINT_INTERVAL_S) <= 60 for t, v, _ in displaced)


# -- las-gavel ----------------------------------------------------------------------------------------
def _three_types() -> Cluster:
    return Cluster((Node("k", 4, 32, 256, gpu_type="k80"), Node("p", 4, 32, 256, gpu_type="p100"),
                    Node("v", 4, 32, 256, gpu_type="v100")))


def test_las_gavel_never_offers_a_type_where_the_job_runs_below_min_speed() -> None:
    from loadmaster.scheduling.policies.las_gavel import GavelLasPolicy

    c = _three_types()
    slow_on_k80 = queued(job("a", type_speed=(("k80", 0.2), ("p100", 0.6), ("v100", 1.0))))
    pol = GavelLasPolicy(min_speed=0.5)
    snap = Snapshot.idle(0, c, (slow_on_k80,))
    assert pol.type_preference(snap, slow_on_k80) == ["v100", "p100"]
    # With the V100s and P100s taken it waits rather than run at a fifth of its speed (las-het takes the K80).
    busy = (running(job("v", gpus=4, duration=10_000), (2,)), running(job("p", gpus=4, duration=10_000), (1,)))
    snap = busy_snapshot(0, c, busy, (slow_on_k80,))
    assert decide(snap, pol, make_placer("pack")).starts == ()
    assert [s.job_id for s in decide(snap, HetLasPolicy(), make_placer("pack")).starts] == ["a"]


def test_las_gavel_offers_types_by_comparative_advantage() -> None:
    from loadmaster.scheduling.policies.las_gavel import GavelLasPolicy

    c = _three_types()
    # Fastest on V100, but at 0.7 of that on a K80, where a typical job runs at 0.2: its advantage is the K80.
    good_on_k80 = queued(job("g", type_speed=(("k80", 0.7), ("p100", 0.9), ("v100", 1.0))))
    typical = queued(job("t", type_speed=(("k80", 0.2), ("p100", 0.7), ("v100", 1.0))))
    snap = Snapshot.idle(0, c, (good_on_k80, typical))
    pol = GavelLasPolicy(min_speed=0.5)
    assert pol.type_preference(snap, good_on_k80) == ["k80", "p100", "v100"]
    assert pol.type_preference(snap, typical) == ["v100", "p100"]
    assert GavelLasPolicy(min_speed=0.5, advantage=False).type_preference(snap, good_on_k80) == ["v100", "p100", "k80"]
    starts = {s.job_id: c.nodes[s.allocation.learner_nodes[0]].gpu_type
              for s in decide(snap, pol, make_placer("pack")).starts}
    assert starts == {"g": "k80", "t": "v100"}


def test_las_gavel_falls_back_to_las_het_without_speeds_of_the_job() -> None:
    from loadmaster.scheduling.policies.las_gavel import GavelLasPolicy

    plain = queued(job("plain"))
    partly = queued(job("partly", type_speed=(("k80", 0.1), ("v100", 1.0))))
    snap = Snapshot.idle(0, _three_types(), (plain, partly))
    assert GavelLasPolicy().type_preference(snap, plain) == HetLasPolicy().type_preference(snap, plain)
    # A type it has no number for is not known to be slow: offered last.
    assert GavelLasPolicy(min_speed=0.5).type_preference(snap, partly) == ["v100", "p100"]
    with pytest.raises(ValueError, match="min_speed"):
        GavelLasPolicy(min_speed=1.5)
