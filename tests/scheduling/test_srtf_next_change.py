"""SRTF's next_change_s: after a decision that changed nothing, the earliest clock at which time alone can make
SRTF decide differently (a running job's checkpoint that may let a waiting job displace it). The simulator
counts, without deciding, the loop passes before it that changed nothing but the clock (simulator._Run.run's
stale passes). A bound later than the first clock at which decide() on the same state gives another plan would
change a result: decide() is asked at clocks just before the bound, at every running job's next checkpoints
and just after them, and must repeat the plan wherever the bound says it does."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling import make_placer
from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.plan import Plan
from loadmaster.scheduling.policies.srtf import SrtfPolicy
from loadmaster.scheduling.policies.windows import next_checkpoint_at
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.snapshot import JobView, Snapshot
from tests.helpers import cluster, job, queued
from tests.scheduling.test_displacement_bounds import _running_world


def _at(snap: Snapshot, clock: float) -> Snapshot:
    """The same state at another clock."""
    return Snapshot.build(clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem, snap.queued,
                          snap.running)


def _what(plan: Plan) -> tuple[object, ...]:
    """What a plan does and why each job waits."""
    return (plan.starts, plan.preempts, plan.resizes, plan.rejects, plan.migrations,
            sorted((w.job_id, w.reason.value) for w in plan.waits))


def _probes(snap: Snapshot, bound: float, interval: float) -> list[float]:
    """Clocks to decide at: just before the bound, and around the next checkpoints of every running job."""
    clock = snap.clock
    out = [clock + (bound - clock) * f for f in (0.5, 0.999, 1.0 - 1e-9)] if bound < math.inf else []
    for v in snap.running:
        at = clock
        for _ in range(3):
            at = next_checkpoint_at(v, at, interval)
            if at == math.inf:
                break
            out += [at, at + 1e-6, at + 1e-3, at + 1.0]
            at += 1e-3
    return [t for t in out if t >= clock]


def _world(seed: int) -> tuple[Snapshot, list[JobView]]:
    """_running_world's running jobs, and a few waiting gangs of mixed sizes and remaining work."""
    rng = random.Random(seed)
    snap, _ = _running_world(seed)
    waiting = [queued(job(f"w{i}", learners=rng.choice((1, 1, 2)), gpus=rng.choice((1, 2, 4)),
                          duration=rng.choice((10.0, 300.0, 1000.0, 4000.0))))
               for i in range(rng.randint(1, 6))]
    return Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem, tuple(waiting),
                          snap.running), waiting


def _check(snap: Snapshot, waiting: list[JobView], interval: float) -> tuple[float, int]:
    """Ask the bound as the simulator does (the Session's heads, after its decision changed nothing) and check
    every probe; returns the bound and how many probes gave another plan."""
    placer = make_placer("pack")
    session = Session(SrtfPolicy(checkpoint_interval_s=interval), placer)
    for view in waiting:
        session.add(view)
    decided = _at(snap, snap.clock)
    if not session.decide(decided).empty:
        return -math.inf, 0
    bound = session.policy.next_change_s(decided, session.heads())
    now = _what(decide(snap, SrtfPolicy(checkpoint_interval_s=interval), placer))
    differ = 0
    for t in _probes(snap, bound, interval):
        then = _what(decide(_at(snap, t), SrtfPolicy(checkpoint_interval_s=interval), placer))
        if then != now:
            differ += 1
            assert bound <= t, (bound, t)
    return bound, differ


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((60.0, 200.0, 900.0)))
def test_no_decision_differs_before_the_bound(seed: int, interval: float) -> None:
    snap, waiting = _world(seed)
    _check(snap, waiting, interval)


def test_the_bound_is_the_checkpoint_that_lets_a_waiting_job_displace() -> None:
    # One server, held by a job whose work since its last checkpoint makes displacing it cost more than it
    # gains; at its next checkpoint that cost drops to nothing and the waiting job displaces it. The bound must
    # be that checkpoint (a millisecond early), and the comparison above is not vacuous.
    c = cluster(4)
    spec = job("long", gpus=4, duration=5000.0)
    running = JobView(spec, 0.0, allocation=Allocation("long", (0,), 4, spec.cpus_per_learner,
                                                       spec.mem_gb_per_learner),
                      work_done_s=0.0, rate=1.0, as_of=0.0, started_at=0.0)
    waiting = [queued(job("short", gpus=4, duration=4000.0))]
    # At 800 s: 4200 s left but 800 at stake (gain 4200 - 800 - 30 < 4000); at 900 s: 4100 - 0 - 30 > 4000.
    snap = Snapshot.build(800.0, c, c.gpu_capacity.astype(float) * 0, c.cpu_capacity, c.mem_capacity,
                          tuple(waiting), (running,))
    bound, differ = _check(snap, waiting, 900.0)
    assert 899.0 < bound <= 900.0
    assert differ > 0
