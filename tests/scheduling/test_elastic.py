"""Elastic jobs: start between min and max learners, grow into idle GPUs, shrink to admit others."""

from __future__ import annotations

import numpy as np
import pytest

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, decide, make_placer, make_policy
from loadmaster.scheduling.decide import elastic_sizes
from loadmaster.sim.experiment import RunOptions, simulate
from tests.helpers import cluster, job, queued, workload


def test_elastic_sizes_halve_from_max_to_min() -> None:
    assert elastic_sizes(2, 8) == [8, 4, 2]
    assert elastic_sizes(1, 6) == [6, 3, 1]
    assert elastic_sizes(4, 4) == [4]


def test_starts_at_the_largest_size_that_fits() -> None:
    c = cluster(4, 4)
    el = queued(job("e", learners=4, min_learners=2, max_learners=8))
    plan = decide(Snapshot.idle(0, c, (el,)), make_policy("fifo"), make_placer("pack"))
    assert plan.starts[0].allocation.learners == 8
    half = Snapshot.build(0, c, np.array([4, 0]), c.cpu_capacity, c.mem_capacity, (el,), ())
    assert decide(half, make_policy("fifo"), make_placer("pack")).starts[0].allocation.learners == 4
    two = Snapshot.build(0, c, np.array([2, 1]), c.cpu_capacity, c.mem_capacity, (el,), ())
    assert decide(two, make_policy("fifo"), make_placer("pack")).starts[0].allocation.learners == 2


def test_grows_into_idle_gpus_only_when_nobody_waits() -> None:
    c = cluster(4, 4)
    spec = job("e", learners=2, min_learners=1, max_learners=8)
    running = JobView(spec, 0, allocation=Allocation("e", (0, 0), 1, 0, 0), rate=1.0, started_at=0.0)
    idle = Snapshot.build(5, c, np.array([2, 4]), c.cpu_capacity, c.mem_capacity, (), (running,))
    plan = decide(idle, make_policy("fifo"), make_placer("pack"))
    assert [r.job_id for r in plan.resizes] == ["e"] and plan.resizes[0].allocation.learners == 8
    waiting = queued(job("big", learners=2, gpus=4))  # fits the cluster, not the 6 free GPUs: it waits
    busy = Snapshot.build(5, c, np.array([2, 4]), c.cpu_capacity, c.mem_capacity, (waiting,), (running,))
    assert decide(busy, make_policy("fifo"), make_placer("pack")).resizes == ()


def test_fair_shrinks_a_borrowing_elastic_job_instead_of_stopping_it() -> None:
    c = cluster(4, 4)
    quotas = {"A": TenantQuota("A", 4), "B": TenantQuota("B", 4)}
    spec = job("b", learners=8, min_learners=4, max_learners=8, tenant="B")
    running = JobView(spec, 0, allocation=Allocation("b", (0, 0, 0, 0, 1, 1, 1, 1), 1, 0, 0), rate=1.0,
                      started_at=0.0)
    snap = Snapshot.build(10, c, np.array([0, 0]), c.cpu_capacity, c.mem_capacity,
                          (queued(job("a", learners=1, gpus=4, tenant="A")),), (running,), quotas)
    plan = decide(snap, make_policy("fair"), make_placer("pack"))
    assert plan.preempts == ()
    assert [(r.job_id, r.allocation.learners) for r in plan.resizes] == [("b", 4)]
    assert [s.job_id for s in plan.starts] == ["a"]


@pytest.mark.parametrize("policy", ["fifo", "fair"])
def test_elastic_jobs_in_the_simulator_finish_sooner_with_more_learners(policy: str) -> None:
    c = cluster(4, 4)
    opts = RunOptions(policy=policy, locality_model=False)  # 8 learners span two servers: isolate scaling
    rigid = simulate(workload(job("r", learners=2, duration=1000)), c, opts)
    elastic = simulate(workload(job("e", learners=2, min_learners=1, max_learners=8, duration=1000)), c, opts)
    r, e = rigid.result.records[0], elastic.result.records[0]
    assert r.status is e.status is JobStatus.COMPLETED
    # 8 learners instead of 2: four times the speed (linear scaling), no resize needed.
    assert e.jct_s == pytest.approx(250) and r.jct_s == pytest.approx(1000)


def test_resize_keeps_work_and_pays_the_restart() -> None:
    c = cluster(4)
    # Same submit time: "a" is considered first (ties go by id) and takes half the server.
    jobs = workload(job("a", learners=1, gpus=2, duration=100),
                    job("e", learners=2, min_learners=2, max_learners=4, duration=1000))
    out = simulate(jobs, c, RunOptions(policy="fifo", restart_overhead_s=30, locality_model=False))
    e = next(r for r in out.result.records if r.spec.job_id == "e")
    # 0-100 s at 2 learners (rate 1): 100 s of work; then grows to 4 (rate 2) after a 30 s restart:
    # the remaining 900 s of work take 450 s -> finishes at 100 + 30 + 450.
    assert e.resizes == 1 and out.summary["resizes"] == 1
    assert e.finish_s == pytest.approx(580)
