"""fair-fifo: fair with Philly's FIFO within a VC (a VC's head job keeps the quota that frees for itself)."""

from collections.abc import Collection, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, Wait, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling.decide import _Round
from loadmaster.scheduling.policies.fair import FairFifoPolicy
from loadmaster.scheduling.session import Session
from tests.helpers import cluster, job, queued
from tests.scheduling.test_invariants import snapshots


def _world(borrow: int | None = 0) -> tuple[Snapshot, dict[str, TenantQuota]]:
    """Two servers of 4 GPUs; A and B 4 GPUs each. A runs a 2-GPU job; its head (4 GPUs) does not fit in the 2
    GPUs of quota left, a 1-GPU job behind it would."""
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4, borrow), "B": TenantQuota("B", 4, borrow)}
    running = (JobView(job("r", gpus=2, tenant="A"), 0, allocation=Allocation("r", (0,), 2, 0, 0), rate=1.0),)
    waiting = (queued(job("wide", gpus=4, tenant="A", submit=1)), queued(job("small", gpus=1, tenant="A", submit=2)))
    return Snapshot.build(5, c, [2, 4], [32, 32], [256, 256], waiting, running, quotas), quotas


def test_the_jobs_behind_a_head_that_does_not_fit_the_quota_left_wait_for_it() -> None:
    snap, _ = _world()
    fair = decide(snap, make_policy("fair"), make_placer("pack"))
    assert [s.job_id for s in fair.starts] == ["small"]  # plain fair: the narrow job takes the freed quota
    fifo = decide(snap, make_policy("fair-fifo"), make_placer("pack"))
    assert fifo.starts == ()
    assert {w.job_id: w.reason for w in fifo.waits} == {"wide": WaitReason.OVER_QUOTA, "small": WaitReason.OVER_QUOTA}


def test_a_head_that_fits_starts_and_the_jobs_behind_it_may_follow() -> None:
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 8, 0)}
    waiting = (queued(job("wide", gpus=4, tenant="A", submit=1)), queued(job("s1", gpus=1, tenant="A", submit=2)),
               queued(job("s2", gpus=1, tenant="A", submit=3)))
    plan = decide(Snapshot.idle(0, c, waiting, quotas), make_policy("fair-fifo"), make_placer("pack"))
    assert sorted(s.job_id for s in plan.starts) == ["s1", "s2", "wide"]


def test_a_narrow_head_is_not_held_for_a_wide_job_behind_it() -> None:
    snap, _ = _world()
    swapped = tuple(queued(job(j.spec.job_id, gpus=j.spec.gpus, tenant="A", submit=3 - j.spec.submit_time_s))
                    for j in snap.queued)
    snap2 = Snapshot.build(5, snap.cluster, [2, 4], [32, 32], [256, 256], swapped, snap.running, snap.tenants)
    plan = decide(snap2, make_policy("fair-fifo"), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["small"]
    assert {w.job_id: w.reason for w in plan.waits} == {"wide": WaitReason.OVER_QUOTA}


def test_the_head_may_borrow_idle_gpus_and_the_others_still_wait() -> None:
    snap, _ = _world(borrow=None)
    plan = decide(snap, make_policy("fair-fifo"), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["wide"]  # on B's idle server, borrowed
    # The 1-GPU job is ranked first (it would not borrow) and was held for the head before the head started.
    assert {w.job_id: w.reason for w in plan.waits} == {"small": WaitReason.OVER_QUOTA}


def test_other_tenants_are_not_held_back() -> None:
    snap, quotas = _world()
    b = queued(job("b", gpus=4, tenant="B", submit=3))
    snap2 = Snapshot.build(5, snap.cluster, [2, 4], [32, 32], [256, 256], (*snap.queued, b), snap.running, quotas)
    plan = decide(snap2, make_policy("fair-fifo"), make_placer("pack"))
    assert [s.job_id for s in plan.starts] == ["b"]


def test_a_session_keeps_the_queue_and_classifies_a_new_head_again() -> None:
    """Kept between decisions (incremental), a Session follows who heads each VC: the head leaving the
    queue makes the next job the head (its class changes), and a requeued job submitted earlier takes the
    head from it. A and B fill the cluster; A may borrow but nothing is idle."""
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4, None), "B": TenantQuota("B", 4, None)}
    running = (JobView(job("ra", gpus=4, tenant="A"), 0, allocation=Allocation("ra", (0,), 4, 0, 0), rate=1.0),
               JobView(job("rb", gpus=4, tenant="B"), 0, allocation=Allocation("rb", (1,), 4, 0, 0), rate=1.0))
    waiting = [queued(job("wide", gpus=4, tenant="A", submit=1)), queued(job("small", gpus=1, tenant="A", submit=2)),
               queued(job("small2", gpus=1, tenant="A", submit=3))]
    session = Session(make_policy("fair-fifo"), make_placer("pack"))
    assert session.incremental
    for view in waiting:
        session.add(view)
    last: dict[str, WaitReason] = {}

    def check(jobs: list[JobView]) -> dict[str, WaitReason]:
        def world(queue: Sequence[JobView]) -> Snapshot:
            return Snapshot.build(5, c, [0, 0], [32, 32], [256, 256], queue, running, quotas)
        plan = session.decide(world(session.queued))
        full = decide(world(tuple(jobs)), make_policy("fair-fifo"), make_placer("pack"))
        assert (plan.starts, plan.preempts, plan.rejects) == (full.starts, full.preempts, full.rejects)
        reasons = {w.job_id: w.reason for w in full.waits}
        assert {w.job_id: w.reason for w in plan.waits} == {j: r for j, r in reasons.items() if last.get(j) is not r}
        last.update(reasons)
        return reasons

    # "wide" heads A: it would borrow but nothing is idle; the others are held for it.
    assert check(waiting) == {"wide": WaitReason.NO_CAPACITY, "small": WaitReason.OVER_QUOTA,
                              "small2": WaitReason.OVER_QUOTA}
    session.remove("wide")  # cancelled: "small" heads A now, and "small2" is held for it
    waiting = waiting[1:]
    assert check(waiting) == {"small": WaitReason.NO_CAPACITY, "small2": WaitReason.OVER_QUOTA}
    early = queued(job("early", gpus=4, tenant="A", submit=0))  # e.g. requeued after a preemption
    session.add(early)
    assert check([*waiting, early]) == {"early": WaitReason.NO_CAPACITY, "small": WaitReason.OVER_QUOTA,
                                        "small2": WaitReason.OVER_QUOTA}


def test_a_session_decides_on_the_whole_queue_as_decide_does() -> None:
    snap, _ = _world()
    session = Session(make_policy("fair-fifo"), make_placer("pack"))
    for view in snap.queued:
        session.add(view)
    plan = session.decide(snap)
    full = decide(snap, make_policy("fair-fifo"), make_placer("pack"))
    assert (plan.starts, plan.preempts, plan.rejects) == (full.starts, full.preempts, full.rejects)
    assert {w.job_id: w.reason for w in plan.waits} == {w.job_id: w.reason for w in full.waits}


def test_a_vc_flipping_between_held_and_no_capacity_reuses_its_waits() -> None:
    """When a VC's usage crosses what its head needs, every other queued job of the VC flips between
    OVER_QUOTA (held for the head) and NO_CAPACITY. The plans report each flip as decide() does, and a job
    flipping back gets the Wait it had before, not a new object (thousands per decision brought the garbage
    collector into decide()); a job that leaves the queue takes its Waits with it."""
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 6, 0), "B": TenantQuota("B", 8, 0)}
    ra1 = JobView(job("ra1", gpus=2, tenant="A"), 0, allocation=Allocation("ra1", (0,), 2, 0, 0), rate=1.0)
    ra2 = JobView(job("ra2", gpus=2, tenant="A"), 0, allocation=Allocation("ra2", (0,), 2, 0, 0), rate=1.0)
    rb = JobView(job("rb", gpus=4, tenant="B"), 0, allocation=Allocation("rb", (1,), 4, 0, 0), rate=1.0)
    waiting = [queued(job("wide", gpus=4, tenant="A", submit=1)), queued(job("s1", gpus=3, tenant="A", submit=2)),
               queued(job("s2", gpus=3, tenant="A", submit=3))]
    session = Session(make_policy("fair-fifo"), make_placer("pack"))
    for view in waiting:
        session.add(view)
    last: dict[str, WaitReason] = {}

    def check(running: tuple[JobView, ...]) -> dict[str, Wait]:
        free = [4 - sum(v.spec.gpus for v in running if v.allocation and v.allocation.learner_nodes == (n,))
                for n in (0, 1)]

        def world(queue: Sequence[JobView]) -> Snapshot:
            return Snapshot.build(5, c, free, [32, 32], [256, 256], queue, running, quotas)
        plan = session.decide(world(session.queued))
        full = decide(world(tuple(waiting)), make_policy("fair-fifo"), make_placer("pack"))
        assert (plan.starts, plan.preempts, plan.rejects) == (full.starts, full.preempts, full.rejects) == ((), (), ())
        reasons = {w.job_id: w.reason for w in full.waits}
        assert {w.job_id: w.reason for w in plan.waits} == {j: r for j, r in reasons.items() if last.get(j) is not r}
        last.update(reasons)
        return {w.job_id: w for w in plan.waits}

    # A holds 4 of its 6: the head (4) does not fit, the others are held for it.
    held = check((ra1, ra2, rb))
    assert {j: w.reason for j, w in held.items()} == dict.fromkeys(["wide", "s1", "s2"], WaitReason.OVER_QUOTA)
    # ra2 ends: the head fits A's quota, but 2 GPUs are free; nobody is over quota, so nobody is preempted.
    free = check((ra1, rb))
    assert {j: w.reason for j, w in free.items()} == dict.fromkeys(["wide", "s1", "s2"], WaitReason.NO_CAPACITY)
    # ra2 back (a shell's world moves back and forth across the line): the same Waits again.
    again = check((ra1, ra2, rb))
    assert again == held and all(again[j] is held[j] for j in held)
    again = check((ra1, rb))
    assert all(again[j] is free[j] for j in free)
    session.remove("s1")
    waiting = [v for v in waiting if v.job_id != "s1"]
    assert all("s1" not in made for made in session._waits.values())
    assert check((ra1, ra2, rb)) == {"wide": held["wide"], "s2": held["s2"]}


def test_a_lone_arrival_that_starts_at_once_is_decided_without_the_marks() -> None:
    """Most arrivals start alone (Session._decide_alone): with no job classified no class rests on who heads
    each VC, so marked_jobs() is not asked then; a walk that classifies jobs works the marks out first."""
    asked: list[float] = []

    class Counting(FairFifoPolicy):
        def marked_jobs(self, snap: Snapshot) -> Collection[str]:
            asked.append(snap.clock)
            return super().marked_jobs(snap)

    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4, 0), "B": TenantQuota("B", 4, 0)}
    session = Session(Counting(), make_placer("pack"))
    session.add(queued(job("lone", gpus=1, tenant="A", submit=1)))
    plan = session.decide(Snapshot.build(1, c, [4, 4], [32, 32], [256, 256], session.queued, (), quotas))
    assert [s.job_id for s in plan.starts] == ["lone"] and asked == []
    session.remove("lone")
    running = (JobView(job("lone", gpus=1, tenant="A"), 1, allocation=Allocation("lone", (0,), 1, 0, 0), rate=1.0),)
    waiting = (queued(job("wide", gpus=4, tenant="A", submit=2)), queued(job("small", gpus=1, tenant="A", submit=3)))
    for view in waiting:
        session.add(view)
    snap = Snapshot.build(3, c, [3, 4], [32, 32], [256, 256], session.queued, running, quotas)
    plan = session.decide(snap)
    assert asked == [3]
    full = decide(Snapshot.build(3, c, [3, 4], [32, 32], [256, 256], waiting, running, quotas),
                  make_policy("fair-fifo"), make_placer("pack"))
    assert (plan.starts, plan.preempts, plan.rejects) == (full.starts, full.preempts, full.rejects) == ((), (), ())
    reasons = {w.job_id: w.reason for w in plan.waits}
    assert reasons == {w.job_id: w.reason for w in full.waits} == {"wide": WaitReason.OVER_QUOTA,
                                                                   "small": WaitReason.OVER_QUOTA}


@settings(max_examples=150, deadline=None)
@given(snap=snapshots(), policy=st.sampled_from(["fair", "fair-fifo"]))
def test_class_order_is_borrowing_then_share(snap: Snapshot, policy: str) -> None:
    """class_order() reads the tenant once for both: the same (borrowing(), share()) pair for every queued job,
    quotas of 0 GPUs (an infinite share) included."""
    pol = make_policy(policy)
    for view in snap.queued:
        assert pol.class_order(snap, view) == (pol.borrowing(snap, view), pol.share(snap, view.spec.tenant))


def test_a_session_walk_answers_quota_refusals_and_oversized_gangs_without_attempting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A walk under a gate that may refuse asks the gate first, then the capacity limits, as attempt() would:
    a job held for its VC's head, or one larger than the free GPUs that may displace nobody, gets its reason
    without the call (under fair-fifo half the visits of an overloaded walk are quota refusals)."""
    snap, quotas = _world()
    quotas["B"] = TenantQuota("B", 4, 8)
    big = queued(job("big", learners=2, gpus=4, tenant="B", submit=3))  # would borrow: may displace nobody
    waiting = (*snap.queued, big)
    snap = Snapshot.build(5, snap.cluster, [2, 4], [32, 32], [256, 256], waiting, snap.running, quotas)
    attempted: list[str] = []
    real = _Round.attempt

    def counting(rnd: _Round, view: JobView) -> tuple[Allocation | WaitReason, bool]:
        attempted.append(view.job_id)
        return real(rnd, view)

    session = Session(make_policy("fair-fifo"), make_placer("pack"))
    for view in waiting:
        session.add(view)
    monkeypatch.setattr(_Round, "attempt", counting)
    plan = session.decide(Snapshot.build(5, snap.cluster, [2, 4], [32, 32], [256, 256], session.queued,
                                         snap.running, quotas))
    assert attempted == []
    full = decide(snap, make_policy("fair-fifo"), make_placer("pack"))
    assert plan.starts == full.starts == ()
    assert {w.job_id: w.reason for w in plan.waits} == {w.job_id: w.reason for w in full.waits} == {
        "wide": WaitReason.OVER_QUOTA, "small": WaitReason.OVER_QUOTA, "big": WaitReason.NO_CAPACITY}


def test_a_session_walk_asks_the_gate_once_for_a_job_it_admits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk asks a refusing gate first; a job it admits is then placed without attempt() asking again."""
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 8, 0)}
    waiting = (queued(job("wide", gpus=4, tenant="A", submit=1)), queued(job("s1", gpus=1, tenant="A", submit=2)),
               queued(job("s2", gpus=1, tenant="A", submit=3)))
    snap = Snapshot.idle(0, c, waiting, quotas)
    policy = make_policy("fair-fifo")
    gate_type = type(policy.gate(snap))
    asked: list[str] = []
    real = gate_type.admit

    def counting(gate: object, view: JobView, gpus: int) -> object:
        asked.append(view.job_id)
        return real(gate, view, gpus)  # type: ignore[arg-type]

    monkeypatch.setattr(gate_type, "admit", counting)
    session = Session(policy, make_placer("pack"))
    for view in waiting:
        session.add(view)
    plan = session.decide(snap)
    assert sorted(s.job_id for s in plan.starts) == ["s1", "s2", "wide"]
    assert sorted(asked) == ["s1", "s2", "wide"]
