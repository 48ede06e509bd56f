"""LAS keeps each running view's numbers once (ViewRows) instead of rebuilding arrays for every tuple of running
views: the kept arrays, the displaceable mask, releasable_gpus and next_change_s equal the plain computations
whatever order of tuples, clocks and settings a policy has seen before."""

from __future__ import annotations

import dataclasses
import math
import random
from operator import attrgetter

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.scheduling import Snapshot, make_policy
from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.policies.view_rows import ViewRows
from tests.scheduling.test_fast_paths import _busy_world


class _V:
    """A stand-in view: ViewRows needs only identity."""

    def __init__(self, k: int) -> None:
        self.k = k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 19), max_size=12), max_size=12), st.integers(1, 16))
def test_view_rows_gather_each_views_numbers_computing_each_once_between_resets(
        tuples: list[list[int]], capacity: int) -> None:
    pool = [_V(k) for k in range(20)]
    calls: list[int] = []

    def fill(v: object) -> tuple[float, float]:
        assert isinstance(v, _V)
        calls.append(v.k)
        return (float(v.k), -2.0 * v.k)

    rows = ViewRows(2, fill, capacity)  # type: ignore[arg-type]
    for t in tuples:
        views = [pool[k] for k in t]
        got = rows.gather(views)  # type: ignore[arg-type]
        assert got.shape == (2, len(views))
        assert got.tolist() == [[float(k) for k in t], [-2.0 * k for k in t]]
    # A view's numbers are computed again only after the store started afresh (it was full).
    assert len(calls) <= sum(len(t) for t in tuples)
    if capacity >= 20:
        assert sorted(calls) == sorted(set(calls))


def test_view_rows_reject_an_empty_shape() -> None:
    with pytest.raises(ValueError, match="rows"):
        ViewRows(0, lambda v: ())


def _plain(pol: LasPolicy, snap: Snapshot) -> dict[str, npt.NDArray[np.float64]]:
    """The running views' numbers computed view by view, the way the policy computed them before ViewRows."""
    running = snap.running
    n = len(running)

    def col(get: attrgetter[float]) -> npt.NDArray[np.float64]:
        return np.fromiter(map(get, running), np.float64, n)

    done, rate, as_of, attained = (col(attrgetter(a)) for a in ("work_done_s", "rate", "as_of", "attained_gpu_s"))
    ckpt = pol.checkpoint_interval_s
    held = np.array([float(v.allocation.gpus) if v.allocation else 0.0 for v in running])
    gang = np.array([float(v.spec.gpus) for v in running])
    base = np.array([pol.service_before_run(v) if v.started_at is not None
                     and pol._starving(v, v.started_at - v.queued_since) else 0.0 for v in running])
    reach = []
    for threshold in pol.thresholds:
        with np.errstate(divide="ignore", invalid="ignore"):
            if isinstance(pol, HetLasPolicy):
                at = as_of + ((threshold + base) / gang - done) / rate
                ok = (gang > 0) & (rate > 0)
            else:
                at = as_of + (threshold + base - attained) / held
                ok = held > 0
            reach.append(np.where(ok, np.where(np.isfinite(at), at - np.abs(at) * 1e-12 - 1e-9, at), math.inf))
    return {"done": done, "rate": rate, "as_of": as_of, "attained": attained,
            "checkpoints": np.floor(done / ckpt) if ckpt > 0 else done, "held": held, "gang": gang, "base": base,
            "reach": np.array(reach).reshape(len(pol.thresholds), n)}


def _shuffled(snap: Snapshot, rng: random.Random, clock: float) -> Snapshot:
    """The same world at another clock with some running views dropped and the rest in another order."""
    running = [v for v in snap.running if rng.random() < 0.8]
    rng.shuffle(running)
    return Snapshot.of_running(clock, snap.cluster, snap.queued, tuple(running), snap.tenants)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("policy", ["las", "las-het"])
def test_kept_rows_equal_the_plain_arrays_and_answers_of_a_fresh_policy(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    world = _busy_world(seed, queued=40)
    pol = make_policy(policy)
    assert isinstance(pol, LasPolicy)
    for step in range(12):
        if step == 6:
            pol.thresholds = (1000.0, 5000.0)  # settings changed on a policy in use: the kept rows follow
            pol.checkpoint_interval_s = 600.0
        snap = _shuffled(world, rng, world.clock + rng.uniform(0, 3000))
        arrays = pol._run_arrays(snap.running)
        for name, want in _plain(pol, snap).items():
            assert np.array_equal(getattr(arrays, name), want), name
        fresh = make_policy(policy)
        assert isinstance(fresh, LasPolicy)
        fresh.thresholds, fresh.checkpoint_interval_s = pol.thresholds, pol.checkpoint_interval_s
        assert pol._displaceable_all(snap, snap.running) == [fresh.displaceable(snap, v) for v in snap.running]
        heads = list(snap.queued[:10])
        assert pol.next_change_s(snap, heads) == fresh.next_change_s(snap, heads)
        gate = pol.gate(snap)
        for job in heads:
            want = sum(v.allocation.gpus for v in snap.running if v.allocation is not None
                       and fresh.queue(snap, v) > fresh.queue(snap, job) and fresh.displaceable(snap, v))
            assert pol.releasable_gpus(snap, gate, job) == want


def _demoted_world(seed: int) -> tuple[Snapshot, random.Random]:
    """_busy_world with waiting jobs that have run before: some in the first queue, some demoted, some of them
    close to starving at the clocks asked (attained service just past the first threshold)."""
    rng = random.Random(seed)
    world = _busy_world(seed % 4, queued=40)
    waiting = []
    for v in world.queued:
        attained = rng.choice([0.0, 1000.0, 3300.0, 4000.0, 12_000.0])
        waiting.append(dataclasses.replace(v, queued_since=float(rng.randint(0, 6000)), attained_gpu_s=attained,
                                           work_done_s=attained / max(1, v.spec.gpus) * rng.choice([0.5, 1.0])))
    return Snapshot.of_running(world.clock, world.cluster, tuple(waiting), world.running, world.tenants), rng


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["las", "las-het"]), st.sampled_from([None, 0.5, 2.0, 100.0]))
def test_queues_kept_across_snapshots_and_the_victim_order_equal_a_fresh_policys(seed: int, policy: str,
                                                                                starve: float | None) -> None:
    # Waiting jobs' queues are kept from one snapshot to the next until they may starve (order_until), and the
    # displaceable victims are ordered from the running jobs' queues read off arrays. At clocks that go back and
    # forth across promotions, with the settings changed on the policy in use, every answer equals a fresh
    # policy's, whose queue() computes each job afresh and whose victim order is victim_key()'s sort.
    world, rng = _demoted_world(seed)
    pol = make_policy(policy)
    assert isinstance(pol, LasPolicy)
    pol.starve_factor = starve
    for step in range(10):
        if step == 5:
            pol.thresholds = (2000.0, 5000.0)
            pol.starve_factor = None if starve is None else starve * 2
        snap = _shuffled(world, rng, world.clock + rng.choice([0.0, 1.0, 500.0, 5000.0, 40_000.0, 200_000.0]))
        fresh = make_policy(policy)
        assert isinstance(fresh, LasPolicy)
        fresh.thresholds, fresh.starve_factor = pol.thresholds, pol.starve_factor
        for job in rng.sample(list(snap.queued), 20):
            assert pol.queue(snap, job) == fresh._queue(snap, job), job.job_id
        assert [v.job_id for v in pol.rank(snap)] == [v.job_id for v in fresh.rank(snap)]
        _, minus, jobs, _ = pol._displaceable_run(snap)
        want = sorted((v for v in snap.running if fresh.displaceable(snap, v)), key=lambda v: fresh.victim_key(snap, v))
        assert [v.job_id for v in jobs] == [v.job_id for v in want]
        assert minus == [-fresh.queue(snap, v) for v in want]
