"""Session._decide_alone: a queue of one new job that starts at once is decided without the walk. Its plans
must be decide()'s, and the Session's state after it the walk's (the next decisions, checked by
test_session's worlds, must not see the difference)."""

from __future__ import annotations

import pytest

from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.plan import Plan, Start
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.session import Session
from tests.helpers import cluster, job
from tests.scheduling import test_session


def test_a_lone_arrival_that_fits_is_started_without_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    walks = []
    monkeypatch.setattr("loadmaster.scheduling.session._Walk.run", lambda self: walks.append(1))
    session = Session(make_policy("fifo"), make_placer("pack"))
    spec = job("a", gpus=2)
    session.add(JobView(spec, 0.0))
    c = cluster(2, 4)
    snap = Snapshot.of_running(0.0, c, session.queued, ())
    plan = session.decide(snap)
    assert not walks
    assert plan == decide(Snapshot.of_running(0.0, c, (JobView(spec, 0.0),), ()), make_policy("fifo"),
                          make_placer("pack"))
    session.remove("a")
    assert len(session) == 0 and not session.heads() and session.next_change_s() == float("inf")


@pytest.mark.parametrize("policy", ["fifo", "las", "drf", "srtf"])
def test_a_lone_arrival_that_must_preempt_or_wait_goes_through_the_walk(policy: str) -> None:
    c = cluster(1, 4)
    big = JobView(JobSpec(job_id="big", tenant="A", submit_time_s=0.0, learners=1, gpus_per_learner=8,
                          duration_s=10.0), 0.0)
    for waiting in (big, JobView(job("w", gpus=4, tenant="B"), 0.0)):
        running = (JobView(job("r", gpus=4, tenant="A"), 0.0, 1, Allocation("r", (0,), 4, 0.0, 0.0),
                           0.0, 1.0, 0.0, 0.0, 0, 0.0),)
        session = Session(make_policy(policy), make_placer("pack"))
        session.add(waiting)
        plan = session.decide(Snapshot.of_running(5000.0, c, session.queued, running))
        full = decide(Snapshot.of_running(5000.0, c, (waiting,), running), make_policy(policy), make_placer("pack"))
        assert (plan.starts, plan.preempts, plan.rejects) == (full.starts, full.preempts, full.rejects)
        assert [(w.job_id, w.reason) for w in plan.waits] == [(w.job_id, w.reason) for w in full.waits]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_worlds_whose_queue_often_empties(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """test_session's worlds, where lone arrivals are common: plans and reasons stay decide()'s, and the fast
    path is taken where the Session keeps the queue itself."""
    taken = []
    alone = Session._decide_alone

    def counted(self: Session, snap: Snapshot) -> object:
        plan = alone(self, snap)
        taken.append(plan is not None)
        return plan

    monkeypatch.setattr(Session, "_decide_alone", counted)
    for seed in range(8):
        for placement in sorted(PLACERS):
            test_session._check(seed, policy, placement, steps=40)
    if Session(make_policy(policy), make_placer("pack")).incremental:
        assert any(taken)


@pytest.mark.parametrize(("policy", "placement"), [("themis", "pack"), ("themis", "synergy"), ("fifo", "locality")])
@pytest.mark.parametrize("path", ["_start_one", "_decide_one"])
def test_full_mode_decides_a_queue_of_one_without_the_walk(policy: str, placement: str, path: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Full mode (themis; a placer whose key moves with time): a queue of one that starts at once is started
    by _start_one (decide.start_alone), any other by _decide_one (decide()'s steps without the alike key),
    whose plans test_session's worlds hold to decide()'s; here each must be taken, and give them too."""
    taken = []
    one = getattr(Session, path)

    def counted(self: Session, snap: Snapshot) -> object:
        plan = one(self, snap)
        taken.append(plan is not None)
        return plan

    monkeypatch.setattr(Session, path, counted)
    for seed in range(6):
        test_session._check(seed, policy, placement, steps=40)
    assert not Session(make_policy(policy), make_placer(placement)).incremental
    assert any(taken)


def test_full_mode_queue_of_one_rejects_waits_and_preempts_as_decide() -> None:
    c = cluster(1, 4)
    running = (JobView(job("r", gpus=4, tenant="A"), 0.0, 1, Allocation("r", (0,), 4, 0.0, 0.0),
                       0.0, 1.0, 0.0, 0.0, 0, 0.0),)
    for waiting in (JobView(JobSpec(job_id="big", tenant="A", submit_time_s=0.0, learners=1, gpus_per_learner=8,
                                    duration_s=10.0), 0.0),
                    JobView(job("w", gpus=4, tenant="B"), 0.0)):
        for clock in (10.0, 5000.0):
            session = Session(make_policy("themis"), make_placer("pack"))
            session.add(waiting)
            plan = session.decide(Snapshot.of_running(clock, c, session.queued, running))
            full = decide(Snapshot.of_running(clock, c, (waiting,), running), make_policy("themis"),
                          make_placer("pack"))
            assert plan == full


@pytest.mark.parametrize("policy", ["fifo", "las", "drf", "fair-fifo", "themis"])
def test_start_or_decide_gives_the_lone_start_without_a_plan(policy: str) -> None:
    """start_or_decide(): decide()'s lone start as (id, allocation), the job out of the queue as remove()
    leaves it; any other plan as decide() gives it."""
    c = cluster(2, 4)
    spec = job("a", gpus=2)
    bare, planned = Session(make_policy(policy), make_placer("pack")), Session(make_policy(policy), make_placer("pack"))
    for session in (bare, planned):
        session.add(JobView(spec, 0.0))
    plan = planned.decide(Snapshot.of_running(0.0, c, planned.queued, ()))
    planned.remove("a")
    got = bare.start_or_decide(Snapshot.of_running(0.0, c, bare.queued, ()))
    assert isinstance(got, tuple)
    assert plan.starts == (Start(*got),) and plan == Plan((Start(*got),))
    assert len(bare) == 0 and not bare.heads() and "a" not in bare
    # A job too large for the free GPUs waits: the walk's plan, the same from both.
    running = (JobView(job("r", gpus=8), 0.0, 1, Allocation("r", (0, 1), 4, 0.0, 0.0), 0.0, 1.0, 0.0, 0.0, 0, 0.0),)
    for session in (bare, planned):
        session.add(JobView(job("w", gpus=4), 1.0))
    waits = planned.decide(Snapshot.of_running(1.0, c, planned.queued, running))
    assert bare.start_or_decide(Snapshot.of_running(1.0, c, bare.queued, running)) == waits
    assert len(bare) == len(planned) == 1
