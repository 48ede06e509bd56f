"""Queue-wait estimates: the simulator run forward from a snapshot (sim/forecast.py), the estimator that
records them (platform/estimates.py), and the error against actual starts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.job import JobStatus as S
from loadmaster.platform.estimates import (
    Estimator,
    coarsen,
    dumps,
    estimation_error,
    forecast_payload,
    quantum_of,
)
from loadmaster.platform.store.models import Estimate, Job
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.placement.per_job import PerJobPlacer
from loadmaster.sim.forecast import forecast
from tests.platform.control_fixtures import Env, learner, make_env

CLUSTER = Cluster((Node("n0", 4, 16.0, 64.0), Node("n1", 4, 16.0, 64.0)))
NOW = 1_000_000.0


def _running(job_id: str, gpus_per_node: int, remaining: float, priority: int = 0) -> JobView:
    spec = JobSpec(job_id, "t", NOW - 500, 2, gpus_per_node, 500.0 + remaining, priority=priority)
    return JobView(spec, NOW - 500, allocation=Allocation(job_id, (0, 1), gpus_per_node, 0.0, 0.0),
                   work_done_s=500.0, rate=1.0, as_of=NOW, started_at=NOW - 500)


def _queued(job_id: str, learners: int, gpus: int, duration: float, at: float, priority: int = 0) -> JobView:
    return JobView(JobSpec(job_id, "t", at, learners, gpus, duration, priority=priority), at)


def _snapshot(running: tuple[JobView, ...], queued: tuple[JobView, ...]) -> Snapshot:
    free = CLUSTER.gpu_capacity.astype(np.float64)
    for view in running:
        assert view.allocation is not None
        for node, count in view.allocation.per_node().items():
            free[node] -= count * view.allocation.gpus_per_learner
    return Snapshot.build(NOW, CLUSTER, free, CLUSTER.cpu_capacity, CLUSTER.mem_capacity, queued, running)


def test_a_queue_behind_a_running_job_starts_as_it_drains() -> None:
    snap = _snapshot((_running("r", 4, 600.0),),
                     (_queued("a", 2, 4, 300.0, NOW - 30), _queued("b", 1, 4, 100.0, NOW - 20),
                      _queued("c", 1, 1, 50.0, NOW - 10)))
    result = forecast(snap, make_policy("fifo"), make_placer("pack"))
    starts = {j: (t - NOW if t is not None else None) for j, t in result.starts.items()}
    # r frees every GPU at +600: a takes all 8; b and c (FIFO order, backfilled) follow a at +900.
    assert starts == {"a": 600.0, "b": 900.0, "c": 900.0}


def test_jobs_that_fit_now_start_now_and_the_horizon_bounds_the_answer() -> None:
    snap = _snapshot((_running("r", 2, 10_000.0),), (_queued("now", 2, 2, 60.0, NOW - 5),
                                                     _queued("later", 2, 4, 60.0, NOW - 1)))
    result = forecast(snap, make_policy("fifo"), make_placer("pack"), horizon_s=3600.0)
    assert result.starts["now"] == NOW
    assert result.starts["later"] is None  # r holds half the cluster beyond the hour asked about


def test_a_preemptive_policy_is_forecast_with_its_preemptions() -> None:
    snap = _snapshot((_running("low", 4, 5000.0, priority=0),), (_queued("vip", 2, 4, 100.0, NOW, priority=5),))
    result = forecast(snap, make_policy("priority"), make_placer("pack"))
    assert result.starts["vip"] == NOW


@pytest.mark.parametrize("name", ["fifo", "fair", "drf", "themis", "las", "srtf", "priority"])
def test_a_forecast_runs_on_a_copy_of_the_live_policy(name: str) -> None:
    snap = _snapshot((_running("r", 4, 600.0),), (_queued("a", 2, 4, 300.0, NOW), _queued("b", 1, 1, 60.0, NOW)))
    # the control loop's placer: each job's own placer by name, made from the registry (a closure in the
    # registry made every estimate fail to pickle, and with it every round that offered one)
    policy, placer = make_policy(name), PerJobPlacer(make_placer("locality"), PLACERS)
    decide(snap, policy, placer)  # the live policy has state and memos of this round
    before = sorted(policy.__dict__)
    done = forecast_payload(dumps(snap, policy, placer), 86400.0, None)
    assert set(done.starts) == {"a", "b"} and done.decisions >= 1
    assert sorted(policy.__dict__) == before


def test_remaining_times_are_rounded_to_the_quantum() -> None:
    snap = _snapshot((_running("r", 4, 601.0),), (_queued("a", 2, 4, 299.0, NOW),))
    assert quantum_of(snap) == pytest.approx(450.0 / 20)
    coarse = coarsen(snap, 100.0)
    assert coarse.running[0].remaining_at(NOW) == 600.0 and coarse.queued[0].remaining_at(NOW) == 300.0
    assert coarse.running[0].allocation == snap.running[0].allocation


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    e = make_env(db_url, tmp_path, cluster=Cluster((Node("n0", 2, 8.0, 32.0),)))
    yield e
    e.close()


def test_live_estimates_are_recorded_and_compared_with_actual_starts(env: Env) -> None:
    began = time.time()
    loop = env.new_loop(estimates=True, estimate_interval_s=0.1)
    # First holds both GPUs until the estimates are in: the estimator's worker processes may take longer to
    # come up on a loaded machine than any fixed run time would last.
    gate = env.tmp / "release-first"
    first = env.submit(learners=2, command=["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'],
                       expected_duration_s=2.0)
    env.until_status(first, S.PROCESSING)
    second = env.submit(learners=2, command=learner("train", 10, 0.02), expected_duration_s=1.0)
    third = env.submit(learners=1, command=learner("train", 10, 0.02), expected_duration_s=1.0)
    env.drive(lambda: all(e.estimated_start_at is not None for e in loop.queue()) and len(loop.queue()) == 2,
              what="estimates for both queued jobs")
    now = time.time()
    entries = {e.job_id: e for e in loop.queue()}
    assert entries[second].position == 1 and entries[third].position == 2
    s2, s3 = entries[second].estimated_start_at, entries[third].estimated_start_at
    assert s2 is not None and s3 is not None
    # Second starts when first ends (expected 2 s; held longer, it is taken to end about now): within a minute,
    # not the 1 h a job without a run time is given. Third needs GPUs only after second (FIFO, 2 GPUs).
    assert now - 1 <= s2 <= now + 60 and s3 >= s2
    assert loop.estimator is not None  # the queue shows no start before now; the estimates themselves are ordered
    raw = loop.estimator.latest
    assert raw[third] is not None and raw[second] is not None and raw[third] >= raw[second] + 0.5
    gate.touch()
    env.drive(lambda: env.status(third) is S.COMPLETED and env.status(second) is S.COMPLETED, what="all done")
    with env.store.session() as s:
        recorded = {r.job_id for r in s.query(Estimate)}
    assert {second, third} <= recorded
    accuracy = estimation_error(env.store)
    assert accuracy.jobs == 2 and {j for j, *_ in accuracy.samples} == {second, third}
    # Each job's first estimate, made before it started, against that start, on the same (wall) clock; the
    # error is the estimate's own, which a loaded machine stretches: bounded by a minute as above.
    assert all(began <= made <= actual <= time.time() for _, made, _, actual in accuracy.samples)
    assert accuracy.mean_abs_error_s == pytest.approx(
        sum(abs(actual - estimated) for _, _, estimated, actual in accuracy.samples) / 2)
    assert accuracy.mean_abs_error_s < 60


def test_estimation_error_uses_each_jobs_first_or_last_estimate(sqlite_url: str, tmp_path: Path) -> None:
    env = make_env(sqlite_url, tmp_path)
    try:
        job = env.submit(command=["true"])
        with env.store.session() as s:
            row = s.get(Job, job)
            assert row is not None
            row.first_started_at = row.submitted_at + 100
            s.add_all([Estimate(job_id=job, made_at=row.submitted_at + 1, estimated_start_at=row.submitted_at + 40),
                       Estimate(job_id=job, made_at=row.submitted_at + 50, estimated_start_at=row.submitted_at + 90),
                       Estimate(job_id=job, made_at=row.submitted_at + 60, estimated_start_at=None),
                       Estimate(job_id=job, made_at=row.submitted_at + 200, estimated_start_at=row.submitted_at)])
        first = estimation_error(env.store, "first")
        last = estimation_error(env.store, "last")
        assert (first.jobs, first.mean_error_s, first.mean_wait_s) == (1, 60.0, 100.0)
        assert (last.jobs, last.mean_error_s) == (1, 10.0)
        with pytest.raises(ValueError, match="'first' or 'last'"):
            estimation_error(env.store, "median")
    finally:
        env.close()


def test_estimator_records_only_estimates_that_moved(sqlite_url: str, tmp_path: Path) -> None:
    env = make_env(sqlite_url, tmp_path)
    try:
        a = env.submit(command=["true"])
        estimator = Estimator(env.store)
        snap = _snapshot((_running("r", 4, 600.0),), (_queued(a, 2, 4, 300.0, NOW),))
        policy, placer = make_policy("fifo"), make_placer("pack")
        # Remaining times are rounded to a quantum (a twentieth of the median: 22.5 s here).
        assert estimator.run_now(snap, policy, placer)[a] == pytest.approx(NOW + 600, abs=22.5)
        estimator.run_now(snap, policy, placer)  # same answer: not recorded again
        nearly = _snapshot((_running("r", 4, 640.0),), (_queued(a, 2, 4, 300.0, NOW),))
        estimator.run_now(nearly, policy, placer)  # moved by less than a tenth of the wait: not recorded
        moved = _snapshot((_running("r", 4, 700.0),), (_queued(a, 2, 4, 300.0, NOW),))
        estimator.run_now(moved, policy, placer)
        with env.store.session() as s:
            made = [(e.estimated_start_at or 0) - NOW for e in s.query(Estimate).order_by(Estimate.id)]
        assert made == pytest.approx([600.0, 700.0], abs=22.5)
    finally:
        env.close()


def test_the_pause_after_a_forecast_grows_with_what_it_cost(sqlite_url: str, tmp_path: Path) -> None:
    env = make_env(sqlite_url, tmp_path)
    try:
        now = [NOW]
        estimator = Estimator(env.store, interval_s=5.0, duty=0.1, clock=lambda: now[0])
        job = env.submit(command=["true"])  # its estimate is recorded against its row
        snap = _snapshot((_running("r", 4, 600.0),), (_queued(job, 2, 4, 300.0, NOW),))
        estimator.run_now(snap, make_policy("fifo"), make_placer("pack"))
        estimator.mark_stale()
        assert estimator.last_cost_s < 0.5  # a forecast this small costs far less than interval_s * duty
        now[0] = NOW + 5.0
        assert estimator.wants(now[0])  # the interval alone paces cheap forecasts
        estimator.last_cost_s = 2.0  # one as costly as 10,000 queued jobs make it
        assert not estimator.wants(now[0])
        now[0] = NOW + 19.0
        assert not estimator.wants(now[0])
        now[0] = NOW + 20.5  # 2 s of cost at a tenth of a core: 20 s
        assert estimator.wants(now[0])
        with pytest.raises(ValueError, match="duty"):
            Estimator(env.store, duty=0.0)
    finally:
        env.close()
