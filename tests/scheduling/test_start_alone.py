"""decide.start_alone, the lone arrival's path without a round (Session._decide_alone takes it): where it
gives an allocation, decide() on the same snapshot starts the job there and does nothing else; where it
gives None for a job that is not elastic, decide() does not start the job cleanly (it rejects it, leaves it
waiting, or starts it only by displacing someone)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import JobSpec
from loadmaster.scheduling import JobView, Plan, Snapshot, TenantQuota, decide, make_placer, make_policy
from loadmaster.scheduling.decide import start_alone
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.plan import Start
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.policies.base import Policy
from tests.scheduling.test_session import _cluster, _spec


def _world(seed: int, policy: str, placement: str) -> tuple[Snapshot, JobView]:
    """A cluster partly filled by decide() itself (non-elastic running jobs: start_alone's precondition),
    quotas, and one queued job arriving later."""
    rng = random.Random(seed)
    cluster = _cluster(rng)
    tenants = {t: TenantQuota(t, rng.randint(0, 8), rng.choice([None, 0, 4])) for t in "ABC"}
    running: dict[str, JobView] = {}
    clock = 0.0
    for i in range(rng.randint(0, 8)):
        spec = _spec(rng, i, clock)
        if spec.elastic:
            continue
        snap = Snapshot.of_running(clock, cluster, (JobView(spec, clock),), tuple(running.values()), tenants)
        plan = decide(snap, make_policy(policy), make_placer(placement))
        for s in () if plan.preempts or plan.resizes else plan.starts:  # a start that displaces: not kept
            running[s.job_id] = JobView(spec, clock, 1, s.allocation, 0.0, rng.choice([1.0, 0.5]), clock, 0.0, 0,
                                        clock)
        clock += rng.choice([1.0, 60.0, 5000.0])
    spec = _spec(rng, 99, clock)
    lone = JobView(spec, clock, as_of=clock, attained_gpu_s=rng.choice([0.0, 5000.0]),
                   work_done_s=rng.choice([0.0, 100.0]))
    return Snapshot.of_running(clock, cluster, (lone,), tuple(running.values()), tenants), lone


def _agrees(seed: int, policy: str, placement: str) -> bool:
    """Checks one world; returns whether start_alone answered it (gave an allocation)."""
    snap, lone = _world(seed, policy, placement)
    alloc = start_alone(snap, make_policy(policy), make_placer(placement), lone)
    full = decide(snap, make_policy(policy), make_placer(placement))
    if alloc is not None:
        assert full == Plan(starts=(Start(lone.job_id, alloc),))
    elif not lone.spec.elastic:
        clean = bool(full.starts) and not (full.preempts or full.resizes or full.migrations)
        assert not clean, full
    return alloc is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)))
def test_start_alone_is_decides_plan_for_a_lone_job(seed: int, policy: str, placement: str) -> None:
    _agrees(seed, policy, placement)


def test_start_alone_answers_most_worlds_and_leaves_some_to_decide() -> None:
    """The property above means something only if both answers occur for every policy and placer."""
    for policy in sorted(POLICIES):
        for placement in sorted(PLACERS):
            answered = [_agrees(seed, policy, placement) for seed in range(40)]
            assert any(answered) and not all(answered), (policy, placement)


def test_an_elastic_job_is_left_to_the_round() -> None:
    spec = JobSpec(job_id="e", tenant="A", submit_time_s=0.0, learners=2, gpus_per_learner=1, duration_s=10.0,
                   min_learners=1, max_learners=4)
    snap = Snapshot.of_running(0.0, _cluster(random.Random(1)), (JobView(spec, 0.0),), ())
    assert start_alone(snap, make_policy("fifo"), make_placer("pack"), JobView(spec, 0.0)) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(POLICIES)), st.booleans())
def test_admits_alone_is_the_gates_answer(seed: int, policy: str, behind: bool) -> None:
    """A policy's admits_alone() (fair's and fair-fifo's answer from the snapshot, without a gate) is what a
    gate made for the snapshot answers, also where the job is not its tenant's head of queue (`behind`: an
    earlier job of its tenant is queued too, whose quota fair-fifo keeps)."""
    snap, lone = _world(seed, policy, "pack")
    if behind:
        ahead = JobView(replace(lone.spec, job_id="ahead", submit_time_s=max(0.0, lone.spec.submit_time_s - 1.0),
                                learners=1, gpus_per_learner=random.Random(seed).choice([1, 4, 16]),
                                min_learners=None, max_learners=None), snap.clock)
        snap = Snapshot.of_running(snap.clock, snap.cluster, (ahead, lone), snap.running, snap.tenants)
    pol = make_policy(policy)
    assert pol.admits_alone(snap, lone) == Policy.admits_alone(pol, snap, lone)
