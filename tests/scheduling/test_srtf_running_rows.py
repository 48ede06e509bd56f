"""SRTF's running jobs' arrays (_Running) kept across tuples: a new tuple takes the rows of the views it shares
with the last one and reads only the others. Step by step over random sequences of tuples (jobs leaving
anywhere, starting at the end as the simulator's tuples do, and tuples in other orders, repeated views, new
views equal to old ones), the arrays and the gains and victim order built from them must be those read from
every view afresh."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import Allocation
from loadmaster.scheduling.policies import srtf
from loadmaster.scheduling.policies.srtf import SrtfPolicy, _Running
from loadmaster.scheduling.snapshot import JobView, Snapshot
from tests.helpers import cluster, job


def _view(rng: random.Random, i: int) -> JobView:
    spec = job(f"r{i}", duration=rng.choice((500.0, 2000.0, 9000.0)))
    nodes = tuple(rng.sample(range(4), rng.randint(1, 2)))
    alloc = Allocation(spec.job_id, nodes, rng.choice((1, 2, 4)), spec.cpus_per_learner, spec.mem_gb_per_learner)
    started = rng.choice((None, 0.0, 50.0, 300.0))
    return JobView(spec, 0.0, allocation=alloc, work_done_s=rng.choice((0.0, 100.0, 899.0)),
                   rate=rng.choice((0.0, 0.5, 1.0)), as_of=rng.choice((0.0, 50.0, 300.0)), started_at=started)


def _fresh(jobs: tuple[JobView, ...]) -> list[list[float]]:
    return [[v.work_done_s for v in jobs], [v.rate for v in jobs], [v.as_of for v in jobs],
            [v.spec.duration_s for v in jobs], [v.started_at or 0.0 for v in jobs]]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 12))
def test_rows_kept_across_tuples_are_those_read_afresh(seed: int, max_gaps: int) -> None:
    rng = random.Random(seed)
    made = 0
    jobs: tuple[JobView, ...] = ()
    prev: _Running | None = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(srtf, "_MAX_GAPS", max_gaps)
        for _ in range(rng.randint(1, 12)):
            kept = [v for v in jobs if rng.random() < 0.8]  # some leave, from anywhere
            for _ in range(rng.randint(0, 4)):  # some start, at the end
                kept.append(_view(rng, made))
                made += 1
            way = rng.random()
            if way < 0.1:
                rng.shuffle(kept)  # another order
            elif way < 0.2 and kept:
                kept.insert(rng.randrange(len(kept)), _view(rng, made))  # a start in the middle
                made += 1
            elif way < 0.25 and kept:
                kept.append(kept[0])  # a view twice
            jobs = tuple(kept)
            running = _Running(jobs, prev)
            got = [running.done.tolist(), running.rate.tolist(), running.as_of.tolist(),
                   running.duration.tolist(), running.started.tolist()]
            assert got == _fresh(jobs)
            prev = running


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9))
def test_gains_and_victim_order_from_kept_rows_are_those_of_a_fresh_policy(seed: int) -> None:
    # One policy decides over a sequence of snapshots (its arrays carried from tuple to tuple); a new policy
    # per snapshot reads every view: the gains, their sorted list and the victim order must be the same.
    rng = random.Random(seed)
    c = cluster(4, 4)
    made = 0
    jobs: tuple[JobView, ...] = ()
    policy = SrtfPolicy()
    clock = 0.0
    for _ in range(rng.randint(1, 10)):
        kept = [v for v in jobs if rng.random() < 0.8]
        for _ in range(rng.randint(0, 3)):
            kept.append(_view(rng, made))
            made += 1
        jobs = tuple(kept)
        clock += rng.choice((0.0, 10.0, 400.0))
        free = c.gpu_capacity.astype(float)
        snap = Snapshot.build(clock, c, free, c.cpu_capacity, c.mem_capacity, (), jobs)
        kept_memo = policy._by_snapshot(snap)
        fresh_memo = SrtfPolicy()._by_snapshot(snap)
        assert np.array_equal(kept_memo.gains, fresh_memo.gains)
        assert np.array_equal(kept_memo.work, fresh_memo.work)
        assert kept_memo.asc == fresh_memo.asc == sorted(fresh_memo.gains.tolist())
        assert kept_memo.order() == fresh_memo.order()
        k = rng.randint(0, len(jobs))
        assert kept_memo.gpus_of_first(k) == fresh_memo.gpus_of_first(k) == sum(
            len(jobs[i].allocation.learner_nodes) * jobs[i].allocation.gpus_per_learner  # type: ignore[union-attr]
            for i in fresh_memo.by_gain(k)[:k])
