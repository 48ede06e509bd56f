"""A Session's quiet decisions (Session.decide after a walk that changed nothing) give decide()'s plans.

After a decision that started, displaced and rejected nobody, while the shell passes the same running tuple
(nobody started, ended or moved) and before the policy's answers_hold_until(), a Session visits only the
classes whose first job is new. Worlds here evolve as test_session's do, but the way a simulator under
overload lives: many decisions between two starts or ends (arrivals, the clock moving a little), the same
running tuple and quota mapping passed while nothing ran or ended. At every step the plan must equal decide()
on the whole snapshot (no quiet path there), and its waits exactly the jobs whose reason changed."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import JobSpec
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.policies.srtf import SrtfPolicy
from loadmaster.scheduling.session import Session
from tests.scheduling.test_session import _cluster, _spec, _waits, carry_out

_TICKS = (0.0, 1.0, 20.0, 60.0, 300.0, 900.0, 5000.0)


def _long_spec(rng: random.Random, i: int, clock: float) -> JobSpec:
    """test_session's jobs, some of them long (so running jobs save checkpoints while others wait)."""
    spec = _spec(rng, i, clock)
    if rng.random() < 0.4:
        spec = dataclasses.replace(spec, duration_s=float(rng.randint(2000, 40000)))
    return spec


def _check_quiet(seed: int, policy: str, placement: str, steps: int = 40,
                 make: Callable[[], Policy] | None = None, ticks: Sequence[float] = _TICKS,
                 arrivals: Sequence[int] = (0, 1, 1, 1, 2, 5), ask: bool = False) -> Session:
    """`make`: the policy (two of them: one for the Session, one for decide()); `ticks`: the clock's steps;
    `arrivals`: how many jobs may arrive at a step; `ask`: after a plan that acts on nobody, ask the Session's
    policy next_change_s() as a simulator does (for its timer rounds)."""
    rng = random.Random(seed)
    cluster = _cluster(rng)
    tenants = MappingProxyType({t: TenantQuota(t, rng.randint(0, 8), rng.choice([None, 0, 4])) for t in "ABC"})
    pol_session, pol_full = (make(), make()) if make is not None else (make_policy(policy), make_policy(policy))
    placer_session, placer_full = make_placer(placement), make_placer(placement)
    session = Session(pol_session, placer_session)
    queued: dict[str, JobView] = {}
    running: dict[str, JobView] = {}
    running_t: tuple[JobView, ...] = ()  # passed again, the same object, while nobody starts, ends or moves
    last: dict[str, WaitReason] = {}
    clock = 0.0
    n = 0
    for _ in range(steps):
        for _ in range(rng.choice(arrivals)):
            spec = _long_spec(rng, n, clock)
            n += 1
            queued[spec.job_id] = JobView(spec, clock, as_of=clock, work_done_s=rng.choice([0.0, 0.0, 100.0]))
            session.add(queued[spec.job_id])
        snap = Snapshot.of_running(clock, cluster, tuple(queued.values()), running_t, tenants)
        full = decide(snap, pol_full, placer_full)
        lazy = Snapshot.of_running(clock, cluster, session.queued, running_t, tenants)
        plan = session.decide(lazy)
        assert (plan.starts, plan.preempts, plan.resizes, plan.rejects, plan.migrations) == (
            full.starts, full.preempts, full.resizes, full.rejects, full.migrations)
        assert _waits(plan) == {w.job_id: w.reason for w in full.waits if last.get(w.job_id) is not w.reason}
        if ask and not (plan.starts or plan.preempts or plan.resizes or plan.rejects or plan.migrations):
            pol_session.next_change_s(lazy, session.heads())
        changed = carry_out(plan, session, queued, running, last, clock, rng, start_delays=(0.0, 30.0))
        if running and rng.random() < 0.15:  # an end
            del running[rng.choice(sorted(running))]
            changed = True
        if changed:
            running_t = tuple(running.values())
        clock += rng.choice(ticks)
    return session


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)))
def test_quiet_decisions_give_decides_plans_and_the_changed_reasons(seed: int, policy: str, placement: str) -> None:
    _check_quiet(seed, policy, placement)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((60.0, 200.0, 900.0)))
def test_srtf_quiet_decisions_end_at_a_checkpoint_that_matters(seed: int, interval: float) -> None:
    # Checkpoints often, the clock moving by less: running jobs' gains jump while others wait, and a quiet
    # decision past such a checkpoint would miss a displacement that decide() makes.
    _check_quiet(seed, "srtf", "pack", steps=50, make=lambda: SrtfPolicy(checkpoint_interval_s=interval),
                 ticks=(0.0, 1.0, 7.0, 20.0, 45.0, 130.0))


@pytest.mark.parametrize("policy", ["fifo", "priority", "srtf"])
def test_quiet_decisions_are_made_and_checked(policy: str) -> None:
    # The policies that promise their answers hold (answers_hold_until) make quiet decisions in these worlds:
    # the comparison above is not vacuous for them.
    quiet = 0
    for seed in range(12):
        session = _check_quiet(seed, policy, "pack", steps=60)
        quiet += session.quiet_decisions
    assert quiet >= 20


@pytest.mark.parametrize("policy", ["las", "drf"])
def test_no_quiet_decision_without_a_promise(policy: str) -> None:
    session = _check_quiet(3, policy, "pack", steps=60)
    assert session.quiet_decisions == 0


# Full mode (Themis: no order kept between decisions): a decision while nothing joined or left the queue and
# the same running tuple and free capacity are passed, after one that changed nothing, is known to repeat it
# before the policy's next_change_s for that one, once asked (Session._repeats_last,
# Policy.unchanged_by_time). Worlds where many steps bring nothing new.
_STILL = (0, 0, 0, 0, 1, 3)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(sorted(PLACERS)), st.sampled_from((_TICKS, (0.0, 1.0, 20.0, 60.0))))
def test_repeated_full_mode_decisions_give_decides_plans(seed: int, placement: str, ticks: Sequence[float]) -> None:
    _check_quiet(seed, "themis", placement, steps=50, arrivals=_STILL, ticks=ticks, ask=True)


def test_repeated_full_mode_decisions_are_made_and_checked() -> None:
    # The comparison above is not vacuous: these worlds have decisions that repeat an unchanged one.
    repeated = sum(_check_quiet(seed, "themis", "pack", steps=60, arrivals=_STILL, ask=True).repeated_decisions
                   for seed in range(12))
    assert repeated >= 20
