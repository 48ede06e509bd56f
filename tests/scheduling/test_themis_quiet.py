"""ThemisPolicy.next_change_s (policies/themis_quiet.py) on hand-made snapshots: never later than the change."""

from __future__ import annotations

from loadmaster.scheduling import Snapshot, decide, make_placer
from loadmaster.scheduling.policies.themis import ThemisPolicy
from tests.helpers import cluster, job, queued
from tests.scheduling.test_themis import running, snapshot


def _quiet(p: ThemisPolicy, snap: Snapshot) -> float:
    plan = decide(snap, p, make_placer("pack"))
    assert not (plan.starts or plan.preempts)
    return p.next_change_s(snap, list(snap.queued))


def test_a_lease_expiring_under_a_worse_off_job_bounds_the_quiet() -> None:
    c = cluster(4)
    holder = running(job("r", gpus=4, duration=10_000.0), 0, started=0.0)
    waiter = queued(job("q", gpus=4, duration=100.0))
    p = ThemisPolicy()
    until = _quiet(p, snapshot(c, 100.0, (waiter,), (holder,)))
    assert until <= 600.0  # here the clock itself: the next round (at 700) comes after the change anyway
    # At the lease's end the waiting job (rho 3.5 against ~0.5) displaces the holder: the change was there.
    assert decide(snapshot(c, 600.0, (waiter,), (holder,)), ThemisPolicy(), make_placer("pack")).preempts


def test_a_job_better_off_than_every_victim_lets_rounds_pass_until_it_catches_up() -> None:
    # Preempted now, the running job (rho ~0.528) would be worse off than the waiting one (~0.503): nobody
    # moves. Its rho if preempted stays ~flat (checkpoints take back what it climbs) while the waiting
    # job's climbs by 1 / 400,000 a second: rounds are skipped, and the bound comes before the crossing.
    c = cluster(4)
    holder = running(job("r", gpus=4, duration=100_000.0), 0, started=5_000.0)
    waiter = queued(job("q", gpus=4, duration=200_000.0, submit=9_000.0))
    p = ThemisPolicy()
    clock = 10_000.0
    until = _quiet(p, snapshot(c, clock, (waiter,), (holder,)))
    assert clock + p.round_s < until < clock + 11_000.0
    t = until - 1.0
    assert not decide(snapshot(c, t, (waiter,), (holder,)), ThemisPolicy(), make_placer("pack")).preempts
    late = clock + 12_000.0
    assert decide(snapshot(c, late, (waiter,), (holder,)), ThemisPolicy(), make_placer("pack")).preempts


def test_a_snapshot_decide_did_not_rank_answers_its_clock() -> None:
    c = cluster(4)
    holder = running(job("r", gpus=4, duration=10_000.0), 0, started=0.0)
    waiter = queued(job("q", gpus=4, duration=100.0))
    p = ThemisPolicy()
    _quiet(p, snapshot(c, 100.0, (waiter,), (holder,)))
    other = snapshot(c, 200.0, (waiter,), (holder,))
    assert p.next_change_s(other, [waiter]) == 200.0
