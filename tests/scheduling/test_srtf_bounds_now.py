"""SRTF's displacement bound as the decide() call goes on (SrtfPolicy._room, _fits_now) and the per-snapshot
room it starts from (_Gains.room: from the shell's free-GPU buckets).

The bound must stay a necessary condition at every point of a decision: once jobs have started or victims
were displaced in the call, it counts the call's free GPUs as they are plus the candidates not displaced yet.
A Session's walk asks it (room_by_displacing) before it attempts a preemptor whose gang exceeds the free GPUs,
so a bound that said "no room" where a search would succeed would change a plan: the simulations below are
compared with runs whose gate keeps no books (no bound at all, every displacement walked to its end)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling import make_placer
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.srtf import SrtfPolicy, _DisplacementGate
from loadmaster.scheduling.snapshot import FreeLedger, Snapshot
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces.synth import synthesize
from tests.helpers import cluster, job, queued
from tests.scheduling.test_displacement_bounds import _running_world


class _SrtfWithoutBound(SrtfPolicy):
    def gate(self, snap: Snapshot) -> Gate:
        return Gate(snap)  # keeps no books: no bound, every displacement is walked to its end


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((1, 2, 3, 4)))
def test_the_room_from_the_free_gpu_buckets_is_the_count_over_every_server(seed: int, per: int) -> None:
    snap, _ = _running_world(seed)
    ledger = FreeLedger(snap.free_gpus, snap.free_cpus, snap.free_mem)
    with_buckets = Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem, (),
                                  snap.running, free_buckets=ledger.buckets)
    want = sum(int((g + 1e-9) // per) for g in snap.free_gpus.tolist())
    for s in (snap, with_buckets):
        memo = SrtfPolicy()._by_snapshot(s)
        assert memo.room(per) == want
        assert memo.free()[1] == float(snap.free_gpus.sum())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from((0.0, 400.0, 5000.0)),
       st.sampled_from(((1, 4), (2, 4), (1, 2), (3, 1), (2, 2), (1, 1))))
def test_the_bound_now_counts_the_free_gpus_as_they_are_and_the_candidates_left(
        seed: int, remaining: float, shape: tuple[int, int]) -> None:
    # A decide() call in the middle: some gangs started (their GPUs taken), some victims displaced (released
    # for good: given back to the free arrays, booked in the gate). The answer must be that of counting every
    # server with the candidates not displaced yet released, and never "room" where the snapshot's bound (which
    # counts more) says none.
    rng = random.Random(seed)
    snap, views = _running_world(seed)
    learners, per = shape
    policy = SrtfPolicy()
    waiting = queued(job("w", learners=learners, gpus=per, duration=remaining))
    gate = _DisplacementGate(snap)
    free = FreeCapacity(snap)
    gate.watch(free)
    for i in range(rng.randint(0, 3)):  # gangs started in this call, on servers with free GPUs
        nodes = [n for n, g in enumerate(free.gpus.tolist()) if g >= 1]
        if not nodes:
            break
        started = Allocation(f"s{i}", (rng.choice(nodes),), 1, 0.0, 0.0)
        free.take(started)
        gate.add(queued(job(f"s{i}")), 1)
    for v in rng.sample(views, min(len(views), rng.randint(0, 2))):  # victims displaced in this call
        assert v.allocation is not None
        gate.remove(v)
        free.give(v.allocation, grow=False)
    if rng.random() < 0.3:
        free.version += 1  # a displacement succeeded earlier in the call
    candidates = [v for v in views if policy.may_preempt(snap, gate, waiting, v) and v.job_id not in gate.released]
    gpus = free.gpus.tolist()
    for v in candidates:
        assert v.allocation is not None
        for n in v.allocation.learner_nodes:
            gpus[n] += v.allocation.gpus_per_learner
    fits = (free.total_gpus + sum(v.allocation.gpus for v in candidates if v.allocation) + 1e-9 >= learners * per
            and sum(int((g + 1e-9) // per) for g in gpus) >= learners)
    memo = policy._by_snapshot(snap)
    k = memo.above(waiting.remaining_at(snap.clock))
    now = policy._fits_now(free, gate, waiting, memo, k)
    assert now == fits
    assert policy._room(gate, waiting, memo, k) == (policy._may_fit(gate, waiting, memo, k) and now)
    assert policy.room_by_displacing(snap, gate, waiting) == (policy._may_fit(gate, waiting, memo, k) and now)
    assert not now or policy._may_fit(gate, waiting, memo, k)  # the snapshot's bound counts at least as much
    got = list(policy.victim_candidates(snap, gate, waiting, lambda: ()))
    assert (got != []) == (k > 0 and policy._room(gate, waiting, memo, k))


def test_a_gate_no_decision_watches_uses_the_snapshots_bound() -> None:
    snap, _ = _running_world(3)
    policy = SrtfPolicy()
    waiting = queued(job("w", learners=1, gpus=1, duration=0.0))
    gate = _DisplacementGate(snap)
    memo = policy._by_snapshot(snap)
    k = memo.above(0.0)
    assert gate.free is None
    assert policy._room(gate, waiting, memo, k) == policy._may_fit(gate, waiting, memo, k)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(sorted(PLACERS)))
def test_simulations_are_those_of_walking_every_displacement(seed: int, placement: str) -> None:
    # The simulator's snapshots carry its free-GPU buckets (the room's source) and its frame's running tuple;
    # offered three times what the cluster holds, srtf displaces dozens of times a run and most searches end on
    # the bound as it stands in the middle of a decision (jobs started, victims displaced).
    c = cluster(4, 4, 4, 4, 2)
    w = synthesize("philly", 200, seed, cluster_gpus=18, load=3.0)

    def run(policy: SrtfPolicy) -> tuple[int, list[tuple[str, float | None, float | None]]]:
        sim = Simulator(c, policy, make_placer(placement), FailureModel(RetryPolicy.TRACE, 3, seed),
                        PerformanceModel(c, locality=False), SimConfig())
        res = sim.run(w)
        return res.preemptions, [(r.spec.job_id, r.first_start_s, r.finish_s) for r in res.records]

    assert run(SrtfPolicy()) == run(_SrtfWithoutBound())


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from(((1, 4), (2, 4), (1, 2), (1, 1))))
def test_the_last_bound_is_asked_again_once_the_call_started_or_released_anyone(seed: int,
                                                                               shape: tuple[int, int]) -> None:
    # The gate keeps the last answer for one job at one point of the call; a start or a release told to the
    # gate, or a capacity that grew (version), is another point: the answer must be that of a fresh gate there.
    rng = random.Random(seed)
    snap, views = _running_world(seed)
    learners, per = shape
    policy = SrtfPolicy()
    waiting = queued(job("w", learners=learners, gpus=per, duration=0.0))
    gate = _DisplacementGate(snap)
    free = FreeCapacity(snap)
    gate.watch(free)
    for step in range(4):
        got = policy.room_by_displacing(snap, gate, waiting)
        fresh = _DisplacementGate(snap)
        fresh.watch(free)
        fresh.started_gpus, fresh.released = gate.started_gpus, dict(gate.released)
        assert got == policy.room_by_displacing(snap, fresh, waiting)
        k = policy._by_snapshot(snap).above(0.0)
        assert (got and k > 0) == (list(policy.victim_candidates(snap, gate, waiting, lambda: ())) != [])
        nodes = [n for n, g in enumerate(free.gpus.tolist()) if g >= 1]
        if step % 2 == 0 and nodes:
            free.take(Allocation(f"s{step}", (rng.choice(nodes),), 1, 0.0, 0.0))
            gate.add(queued(job(f"s{step}")), 1)
        elif views:
            v = views[step % len(views)]
            if v.job_id not in gate.released and v.allocation is not None:
                gate.remove(v)
                free.give(v.allocation, grow=False)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9), st.lists(st.tuples(st.integers(0, 16), st.sampled_from((1, 2, 4)),
                                                 st.integers(1, 8)), min_size=1, max_size=8))
def test_the_walks_that_stop_once_they_reach_the_gang_answer_as_the_whole_walks(
        seed: int, asks: list[tuple[int, int, int]]) -> None:
    # _may_fit() asks gpus_of_first(k, GPUs short) and room_with_first(per, k, learners): each walk along the
    # prefix may stop once its count reaches what the gang needs, and later asks (other k, other gangs, the same
    # per-snapshot walks) go on from there. Each answer must be the exact count where it is below `enough`, and
    # at least `enough` otherwise.
    snap, _ = _running_world(seed)
    memo = SrtfPolicy()._by_snapshot(snap)
    fresh = SrtfPolicy()._by_snapshot(snap)
    n = len(memo.jobs)
    for k, per, enough in asks:
        k = min(k, n)
        exact = fresh.room_with_first(per, k)
        got = memo.room_with_first(per, k, enough)
        assert got == exact if exact < enough else got >= enough
        gpus = fresh.gpus_of_first(k)
        got_gpus = memo.gpus_of_first(k, 2 * enough)  # the GPUs in all, walked as far as they reach `enough`
        assert got_gpus == gpus if gpus < 2 * enough else got_gpus >= 2 * enough
