"""The collector pause around batch simulations (sim/collector.py)."""

from __future__ import annotations

import gc

import pytest

from loadmaster.sim.collector import paused


def test_pause_disables_and_restores() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pause_leaves_it_to_the_outer_one() -> None:
    with paused():
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_restored_after_an_error() -> None:
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_simulation_runs_with_the_collector_paused() -> None:
    from loadmaster.core.job import Allocation, JobSpec
    from loadmaster.core.workload import LoadReport, Workload
    from loadmaster.scheduling.placement import make_placer
    from loadmaster.scheduling.policies import make_policy
    from loadmaster.sim.perf import PerformanceModel
    from loadmaster.sim.simulator import Simulator
    from loadmaster.traces import load_cluster

    seen: list[bool] = []

    class Probe(PerformanceModel):
        def rate(self, spec: JobSpec, alloc: Allocation) -> float:
            seen.append(gc.isenabled())
            return super().rate(spec, alloc)

    cluster = load_cluster("2x4")
    jobs = [JobSpec(job_id=f"j{i}", tenant="t", submit_time_s=float(i), learners=1, gpus_per_learner=1,
                    duration_s=10.0) for i in range(3)]
    sim = Simulator(cluster, make_policy("fifo"), make_placer("pack"), perf=Probe(cluster))
    result = sim.run(Workload(jobs, LoadReport("test")))
    assert seen == [False, False, False]
    assert gc.isenabled()
    assert len(result.records) == 3
