"""Smoke test first (`sim run --smoke-test S`): each attempt of a multi-GPU job first runs S seconds on one GPU,
so an attempt that fails early costs one GPU instead of its gang."""

from __future__ import annotations

import pytest

from loadmaster.core.job import JobStatus
from loadmaster.scheduling import make_placer, make_policy
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, SimResult, Simulator
from tests.helpers import cluster, job, workload


def run(smoke: float, *jobs: object) -> SimResult:
    c = cluster(4, 4)
    sim = Simulator(c, make_policy("fifo"), make_placer("pack"), FailureModel(seed=0),
                    PerformanceModel(c, locality=False), SimConfig(smoke_test_s=smoke))
    return sim.run(workload(*jobs))  # type: ignore[arg-type]


def test_an_early_failure_costs_one_gpu_and_a_survivor_then_runs_as_a_gang() -> None:
    flaky = job("flaky", learners=2, gpus=2, duration=1000, failed_attempts_s=(50.0,))
    plain = run(0.0, flaky).records[0]
    assert plain.finish_s == pytest.approx(1050) and plain.gpu_s == pytest.approx(4 * 1050)
    res = run(120.0, flaky)
    rec = res.records[0]
    assert rec.status is JobStatus.COMPLETED
    # Attempt 1 fails 50 s into its smoke test (1 GPU); attempt 2 passes its 120 s test, then runs 1,000 s on 4.
    assert rec.finish_s == pytest.approx(50 + 120 + 1000)
    assert rec.gpu_s == pytest.approx(50 + 120 + 4 * 1000)
    assert rec.gpu_s_failed == pytest.approx(50)
    m = res.mode_metrics
    assert m["smoke_tests"] == 2 and m["failures_caught_by_smoke_test"] == 1
    assert m["gpu_hours_smoke_tests"] == pytest.approx(170 / 3600)
    assert m["gpu_hours_failures_caught_would_have_held"] == pytest.approx(4 * 50 / 3600)


def test_single_gpu_jobs_and_runs_without_smoke_tests_are_untouched() -> None:
    one = job("one", duration=300, failed_attempts_s=(10.0,))
    assert run(120.0, one).records[0].finish_s == pytest.approx(310)
    assert "smoke_tests" not in run(0.0, job("g", learners=2, gpus=2)).mode_metrics


def test_the_gang_keeps_its_place_behind_nobody_else() -> None:
    # Two gangs that fit together: both smoke-test at once, then both run; nothing is lost or doubled.
    jobs = [job(f"g{i}", learners=2, gpus=2, duration=500) for i in range(2)]
    res = run(60.0, *jobs)
    assert [r.finish_s for r in res.records] == [pytest.approx(560), pytest.approx(560)]
    assert res.busy_gpu_s == pytest.approx(2 * (60 + 4 * 500))
