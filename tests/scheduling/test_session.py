"""A Session gives decide()'s plans, decision after decision, with the waits reduced to what changed.

Worlds evolve under the plans themselves: started jobs run, some end, some are preempted back into the
queue, new jobs arrive, the clock moves (LAS promotions and checkpoint windows with it). At every step the
Session's plan must equal decide() on the whole snapshot, and its waits must be exactly the jobs whose
reason differs from the one they were last given."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Plan, Snapshot, TenantQuota, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.snapshot import free_after


def _spec(rng: random.Random, i: int, clock: float) -> JobSpec:
    learners = rng.choice([1, 1, 1, 2, 4])
    elastic = rng.random() < 0.1
    return JobSpec(job_id=f"j{i}", tenant=rng.choice("ABC"), submit_time_s=clock + rng.choice([0.0, 0.0, 5.0]),
                   learners=learners, gpus_per_learner=rng.choice([0, 1, 1, 2, 4, 16]),
                   cpus_per_learner=rng.choice([0.0, 0.0, 2.0, 8.0]), mem_gb_per_learner=rng.choice([0.0, 16.0]),
                   duration_s=float(rng.randint(1, 4000)), priority=rng.choice([0, 0, 1, 2]),
                   model=rng.choice(["ResNet-18", "Transformer", ""]),
                   min_learners=rng.randint(1, learners) if elastic else None,
                   max_learners=learners + rng.randint(0, 3) if elastic else None)


def _cluster(rng: random.Random) -> Cluster:
    types = rng.choice([("gpu",), ("v100", "k80")])
    return Cluster(tuple(Node(f"n{i}", rng.choice([1, 2, 4, 8]), rng.choice([8.0, 32.0]), 256.0,
                              gpu_type=types[i % len(types)], rack=f"r{i % 2}") for i in range(rng.randint(1, 6))))


def _waits(plan: Plan) -> dict[str, WaitReason]:
    return {w.job_id: w.reason for w in plan.waits}


def carry_out(plan: Plan, session: Session, queued: dict[str, JobView], running: dict[str, JobView],
              last: dict[str, WaitReason], clock: float, rng: random.Random,
              start_delays: Sequence[float] = (0.0,)) -> bool:
    """Carry `plan` out on a test's world (the session told of every queue change); whether the running jobs
    changed. A started job runs at full or half speed, from `clock` plus one of `start_delays`."""
    for p in plan.preempts:
        view = running.pop(p.job_id)
        queued[p.job_id] = JobView(view.spec, clock, view.attempt + 1, None, view.work_at(clock) * 0.5, 0.0,
                                   clock, view.attained_at(clock), view.preemptions + 1)
        session.add(queued[p.job_id])
    for z in plan.resizes:
        view = running[z.job_id]
        running[z.job_id] = JobView(view.spec, view.queued_since, view.attempt, z.allocation,
                                    view.work_at(clock), 1.0, clock, view.attained_at(clock), view.preemptions,
                                    clock)
    for m in plan.migrations:
        view = running[m.job_id]
        running[m.job_id] = JobView(view.spec, view.queued_since, view.attempt, m.allocation,
                                    view.work_at(clock) * 0.5, 1.0, clock, view.attained_at(clock),
                                    view.preemptions, clock)
    for r in plan.rejects:
        del queued[r.job_id]
        session.remove(r.job_id)
        last.pop(r.job_id, None)
    for s in plan.starts:
        view = queued.pop(s.job_id)
        session.remove(s.job_id)
        last.pop(s.job_id, None)
        speed = rng.choice([1.0, 0.5])
        delay = rng.choice(start_delays) if len(start_delays) > 1 else start_delays[0]
        running[s.job_id] = JobView(view.spec, view.queued_since, view.attempt, s.allocation, view.work_done_s,
                                    speed, clock + delay, view.attained_gpu_s, view.preemptions, clock)
    last.update(_waits(plan))
    return bool(plan.preempts or plan.resizes or plan.migrations or plan.starts)


def _check(seed: int, policy: str, placement: str, steps: int = 25, migrate: bool = False,
           reference: Policy | None = None) -> None:
    """`reference`: the policy decide() runs with (default: another `policy`)."""
    rng = random.Random(seed)
    cluster = _cluster(rng)
    tenants = {t: TenantQuota(t, rng.randint(0, 8), rng.choice([None, 0, 4])) for t in "ABC"}
    pol_session, pol_full = make_policy(policy), reference if reference is not None else make_policy(policy)
    placer_session, placer_full = make_placer(placement), make_placer(placement)
    session = Session(pol_session, placer_session, migrate)
    queued: dict[str, JobView] = {}
    running: dict[str, JobView] = {}
    last: dict[str, WaitReason] = {}  # the reason each queued job was last given
    clock = 0.0
    n = 0
    for _ in range(steps):
        for _ in range(rng.choice([0, 1, 1, 3, 8])):  # arrivals
            spec = _spec(rng, n, clock)
            n += 1
            queued[spec.job_id] = JobView(spec, clock, as_of=clock, attained_gpu_s=rng.choice([0.0, 0.0, 5000.0]),
                                          work_done_s=rng.choice([0.0, 0.0, 100.0]))
            session.add(queued[spec.job_id])
        snap = Snapshot.of_running(clock, cluster, tuple(queued.values()), tuple(running.values()), tenants)
        assert set(session.queued_tenants()) == {v.spec.tenant for v in queued.values()}
        full = decide(snap, pol_full, placer_full, migrate)
        lazy = Snapshot.of_running(clock, cluster, session.queued, tuple(running.values()), tenants)
        plan = session.decide(lazy)
        assert (plan.starts, plan.preempts, plan.resizes, plan.rejects, plan.migrations) == (
            full.starts, full.preempts, full.resizes, full.rejects, full.migrations)
        assert _waits(plan) == {w.job_id: w.reason for w in full.waits if last.get(w.job_id) is not w.reason}
        carry_out(plan, session, queued, running, last, clock, rng)
        if migrate:
            assert all(g >= -1e-9 for g in free_after(cluster, running.values())[0])
        for job_id in [j for j in running if rng.random() < 0.3]:  # ends
            del running[job_id]
        if queued and rng.random() < 0.1:  # a queued job is cancelled
            gone = rng.choice(sorted(queued))
            del queued[gone]
            session.remove(gone)
            last.pop(gone, None)
        clock += rng.choice([1.0, 60.0, 600.0, 5000.0, 400000.0])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)))
def test_a_session_gives_decides_plans_and_the_changed_reasons(seed: int, policy: str, placement: str) -> None:
    _check(seed, policy, placement)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(POLICIES)), st.sampled_from(["pack", "spread", "locality"]))
def test_with_migration_too(seed: int, policy: str, placement: str) -> None:
    _check(seed, policy, placement, migrate=True)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_over_a_long_run(policy: str) -> None:
    for seed in range(6):
        _check(seed, policy, "pack", steps=60)


def test_sortable_policies_are_kept_incrementally_and_the_others_in_full() -> None:
    kept = {p for p in POLICIES if Session(make_policy(p), make_placer("pack")).incremental}
    assert kept == {"fifo", "fifo-strict", "priority", "srtf", "las", "las-het", "las-gavel", "fair", "fair-fifo",
                    "drf"}
    assert not Session(make_policy("fifo"), make_placer("locality")).incremental


def test_a_job_readded_while_queued_keeps_its_reason_and_a_removed_one_is_forgotten() -> None:
    c = Cluster((Node("n0", 4, 32.0, 256.0),))
    hog = (JobView(JobSpec("hog", "A", 0.0, 1, 4, 100.0), 0.0, allocation=Allocation("hog", (0,), 4, 0.0, 0.0),
                   rate=1.0, started_at=0.0),)
    session = Session(make_policy("fifo"), make_placer("pack"))
    big = JobView(JobSpec("big", "A", 0.0, 1, 2, 100.0), 0.0)
    session.add(big)
    first = session.decide(Snapshot.of_running(0.0, c, session.queued, hog))
    assert _waits(first) == {"big": WaitReason.NO_CAPACITY}
    session.add(big)  # the same job again (a changed view): no news
    assert session.decide(Snapshot.of_running(1.0, c, session.queued, hog)).waits == ()
    session.remove("big")
    session.remove("never-seen")
    assert len(session) == 0
    session.add(big)  # back after leaving: it is told its reason again
    assert _waits(session.decide(Snapshot.of_running(2.0, c, session.queued, hog))) == {
        "big": WaitReason.NO_CAPACITY}


def test_queued_tenants_are_counted_only_once_asked_and_then_kept() -> None:
    session = Session(make_policy("fifo"), make_placer("pack"))
    views = {i: JobView(JobSpec(f"j{i}", "AB"[i % 2], 0.0, 1, 1, 100.0), 0.0) for i in range(4)}
    for view in views.values():
        session.add(view)
    session.remove("j1")
    assert session._tenants is None  # nobody asked: add() and remove() counted nothing
    assert sorted(session.queued_tenants()) == ["A", "B"]
    session.remove("j3")  # B's last job: from now on the count is kept
    assert session.queued_tenants() == ["A"]
    session.add(JobView(JobSpec("j9", "C", 0.0, 1, 1, 100.0), 0.0))
    session.add(views[0])  # a changed view of a queued job: counted once
    session.remove("j2")
    assert sorted(session.queued_tenants()) == ["A", "C"]
    session.remove("j0")
    assert session.queued_tenants() == ["C"]


def test_the_queue_is_not_copied_for_a_decision_a_sortable_policy_makes() -> None:
    c = Cluster((Node("n0", 2, 32.0, 256.0),))
    session = Session(make_policy("fifo"), make_placer("pack"))
    for i in range(50):
        session.add(JobView(JobSpec(f"j{i}", "A", float(i), 1, 4, 100.0), 0.0))
    queued = session.queued
    session.decide(Snapshot.of_running(0.0, c, queued, ()))
    assert queued._jobs is None  # nobody iterated it
    assert len(queued) == 50


def _carry_out(snap: Snapshot, plan: Plan, rng: random.Random) -> Snapshot:
    """The snapshot after `plan`, at the same instant."""
    clock = snap.clock
    queued = {v.job_id: v for v in snap.queued}
    running = {v.job_id: v for v in snap.running}
    for p in plan.preempts:
        view = running.pop(p.job_id)
        queued[p.job_id] = JobView(view.spec, clock, view.attempt + 1, None, view.work_at(clock), 0.0, clock,
                                   view.attained_at(clock), view.preemptions + 1)
    for z in plan.resizes:
        view = running[z.job_id]
        running[z.job_id] = JobView(view.spec, view.queued_since, view.attempt, z.allocation, view.work_at(clock),
                                    1.0, clock, view.attained_at(clock), view.preemptions, clock)
    for r in plan.rejects:
        del queued[r.job_id]
    for s in plan.starts:
        view = queued.pop(s.job_id)
        running[s.job_id] = JobView(view.spec, view.queued_since, view.attempt, s.allocation, view.work_done_s,
                                    rng.choice([1.0, 0.5, 1.7]), clock, view.attained_gpu_s, view.preemptions, clock)
    return Snapshot.of_running(clock, snap.cluster, tuple(queued.values()), tuple(running.values()), snap.tenants)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(["las", "las-het", "drf", "fifo", "srtf"]))
def test_rounds_before_next_change_would_change_nothing(seed: int, policy: str) -> None:
    """Once a decision changes nothing, every decision before the policy's next_change_s (and the Session's,
    for promotions) changes nothing either, with time alone: the simulator counts those rounds unmade."""
    rng = random.Random(seed)
    cluster = _cluster(rng)
    tenants = {t: TenantQuota(t, rng.randint(0, 8), rng.choice([None, 0, 4])) for t in "ABC"}
    pol, placer = make_policy(policy), make_placer("pack")
    clock = float(rng.randint(0, 10**5))
    specs = [_spec(rng, i, 0.0) for i in range(rng.randint(1, 25))]
    views = tuple(JobView(s, 0.0, work_done_s=rng.choice([0.0, 400.0]),
                          attained_gpu_s=rng.choice([0.0, 0.0, 2000.0, 9000.0])) for s in specs)
    snap = Snapshot.of_running(0.0, cluster, views, (), tenants)
    # Run a while so that jobs hold GPUs with progress, checkpoints and service of their own.
    for _ in range(rng.randint(1, 4)):
        snap = _carry_out(snap, decide(snap, pol, placer), rng)
        later = snap.clock + rng.choice([100.0, 900.0, 3000.0])
        snap = Snapshot.of_running(later, cluster, snap.queued, snap.running, tenants)
    snap = Snapshot.of_running(clock + snap.clock, cluster, snap.queued, snap.running, tenants)
    session = Session(make_policy(policy), make_placer("pack"))
    for v in snap.queued:
        session.add(v)
    first = session.decide(Snapshot.of_running(snap.clock, cluster, session.queued, snap.running, tenants))
    settled = _carry_out(snap, first, rng)
    for s in first.starts:
        session.remove(s.job_id)
    for r in first.rejects:
        session.remove(r.job_id)
    for p in first.preempts:
        session.add(next(v for v in settled.queued if v.job_id == p.job_id))
    quiet = session.decide(Snapshot.of_running(settled.clock, cluster, session.queued, settled.running, tenants))
    if quiet.starts or quiet.preempts or quiet.resizes or quiet.rejects or quiet.waits:
        return  # not a quiet state: nothing to check
    reasons = {w.job_id: w.reason for w in decide(settled, make_policy(policy), placer).waits}
    horizon = min(session.next_change_s(), make_policy(policy).next_change_s(settled, session.heads()))
    for frac in (1e-6, 0.01, 0.3, 0.9, 0.999999):
        if horizon == float("inf"):
            at = settled.clock + 10**6 * frac
        else:
            at = settled.clock + (horizon - settled.clock) * frac
        if at <= settled.clock or at >= horizon:
            continue
        again = decide(Snapshot.of_running(at, cluster, settled.queued, settled.running, tenants),
                       make_policy(policy), placer)
        assert not (again.starts or again.preempts or again.resizes or again.rejects), (policy, at, horizon)
        assert {w.job_id: w.reason for w in again.waits} == reasons


@given(st.integers(0, 10_000), st.sampled_from(sorted(POLICIES)))
@settings(max_examples=30, deadline=None)
def test_decide_changes_is_decide_less_the_reasons_known(seed: int, policy: str) -> None:
    """decide_changes() (Session's full mode) makes decide()'s plan, and of its waits keeps those whose reason
    `known` does not hold already; `known` then holds every reason given, and no started or rejected job."""
    from loadmaster.scheduling.decide import decide_changes

    rng = random.Random(seed)
    cluster = _cluster(rng)
    tenants = {t: TenantQuota(t, rng.randint(0, 8), rng.choice([None, 0, 4])) for t in "ABC"}
    queued = tuple(JobView(_spec(rng, i, 0.0), 0.0) for i in range(rng.randint(0, 12)))
    snap = Snapshot.of_running(10.0, cluster, queued, (), tenants)
    full = decide(snap, make_policy(policy), make_placer("pack"))
    stale = {v.job_id: rng.choice(list(WaitReason)) for v in queued if rng.random() < 0.5}
    known = dict(stale)
    plan = decide_changes(snap, make_policy(policy), make_placer("pack"), False, known)
    assert (plan.starts, plan.preempts, plan.resizes, plan.rejects, plan.migrations) == (
        full.starts, full.preempts, full.resizes, full.rejects, full.migrations)
    assert plan.waits == tuple(w for w in full.waits if stale.get(w.job_id) is not w.reason)
    gone = {s.job_id for s in full.starts} | {r.job_id for r in full.rejects}
    assert known == {**{j: r for j, r in stale.items() if j not in gone}, **_waits(full)}
