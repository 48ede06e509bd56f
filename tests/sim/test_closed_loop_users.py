"""Closed-loop users in the simulator (SimConfig.vc_queue, `sim run --vc-queue Q`): a job is submitted when its
tenant has fewer than Q jobs queued, else held back by its user until it has."""

from __future__ import annotations

import pytest

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import JobSpec
from loadmaster.scheduling import TenantQuota, make_placer, make_policy
from loadmaster.sim.experiment import RunOptions, simulate
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.metrics import summarize
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, SimResult, Simulator
from tests.helpers import cluster, job, workload


def run(c: Cluster, *jobs: JobSpec, policy: str = "fifo", tenants: dict[str, TenantQuota] | None = None,
        **cfg: object) -> SimResult:
    sim = Simulator(c, make_policy(policy), make_placer("pack"), FailureModel(RetryPolicy.TRACE, 3, 0),
                    PerformanceModel(c, locality=False), SimConfig(**cfg), tenants)  # type: ignore[arg-type]
    return sim.run(workload(*jobs))


def times(result: SimResult) -> dict[str, tuple[float, float | None]]:
    return {r.spec.job_id: (r.spec.submit_time_s, r.first_start_s) for r in result.records}


def test_a_full_tenant_takes_a_new_job_only_when_its_queue_is_short() -> None:
    # Two GPUs, six 1-GPU jobs of 100 s all meant for 0, at most one queued: two start, the third queues, the
    # rest are held; each end starts the queued job and lets held ones in (as traces/closed_loop.py times them).
    jobs = [job(f"j{i}") for i in range(6)]
    res = run(cluster(2), *jobs, vc_queue=1)
    got = times(res)
    assert [got[f"j{i}"] for i in range(6)] == [(0, 0), (0, 0), (0, 100), (100, 100), (100, 200), (200, 200)]
    assert res.records[-1].finish_s == 300
    # Three held jobs, held 100 + 100 + 200 s in all, over six jobs.
    assert res.mode_metrics["jobs_held_by_users"] == 3 and res.mode_metrics["avg_user_hold_s"] == pytest.approx(400 / 6)
    # Without the loop everything is submitted at 0 and waits in the queue instead.
    open_loop = times(run(cluster(2), *jobs))
    assert [open_loop[f"j{i}"] for i in range(6)] == [(0, 0), (0, 0), (0, 100), (0, 100), (0, 200), (0, 200)]


def test_a_tenants_queue_holds_back_only_its_own_users() -> None:
    quotas = {"a": TenantQuota("a", 1, 0), "b": TenantQuota("b", 1, 0)}
    jobs = [job("a0", tenant="a"), job("a1", tenant="a"), job("a2", tenant="a"),
            job("b0", tenant="b", submit=10.0), job("b1", tenant="b", submit=20.0)]
    got = times(run(cluster(2), *jobs, policy="fair", tenants=quotas, vc_queue=1))
    assert got["a0"] == (0, 0) and got["a1"] == (0, 100) and got["a2"] == (100, 200)
    # b's queue is its own: b1 queues behind b0 at its trace time (b has nothing queued then).
    assert got["b0"] == (10, 10) and got["b1"] == (20, 110)


def test_a_gate_nobody_reaches_changes_nothing() -> None:
    jobs = [job(f"j{i}", submit=float(7 * i), duration=float(50 + 13 * i), gpus=1 + i % 2) for i in range(12)]
    plain = run(cluster(2, 2), *jobs)
    gated = run(cluster(2, 2), *jobs, vc_queue=len(jobs))
    assert gated.mode_metrics.pop("jobs_held_by_users") == 0 and gated.mode_metrics.pop("avg_user_hold_s") == 0
    assert gated.mode_metrics.pop("vc_queue") == len(jobs)
    assert times(gated) == times(plain)
    a, b = summarize(plain, 0.0), summarize(gated, 0.0)
    assert a == b


def test_jobs_still_held_at_until_are_submitted_then_and_unfinished() -> None:
    res = run(cluster(1), *(job(f"j{i}") for i in range(4)), vc_queue=1, until_s=150.0)
    got = times(res)
    assert len(res.records) == 4
    assert got["j3"] == (150, None) and res.records[-1].finish_s is None


def test_bad_settings_name_the_option() -> None:
    with pytest.raises(ValueError, match="vc_queue must be >= 1"):
        SimConfig(vc_queue=0)
    with pytest.raises(ValueError, match="gang scheduling only"):
        simulate(workload(job("x")), cluster(1), RunOptions(vc_queue=2, gang=False))
