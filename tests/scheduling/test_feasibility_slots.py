"""never_fits counts whole learners per server, not just total GPUs."""

from __future__ import annotations

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobSpec
from loadmaster.scheduling.feasibility import never_fits


def _cluster(*gpus: int, cpus: float = 64.0) -> Cluster:
    return Cluster(tuple(Node(name=f"n{i}", gpus=g, cpus=cpus, mem_gb=256.0) for i, g in enumerate(gpus)))


def _job(learners: int, gpus: int, cpus: float = 0.0) -> JobSpec:
    return JobSpec(job_id="j", tenant="t", submit_time_s=0.0, learners=learners, gpus_per_learner=gpus,
                   duration_s=10.0, cpus_per_learner=cpus)


def test_a_gang_whose_learners_do_not_divide_into_the_servers_never_fits() -> None:
    # 4 GPUs in total, but servers of 1 and 3 GPUs hold only one 2-GPU learner.
    reason = never_fits(_job(2, 2), _cluster(1, 3))
    assert reason is not None and "hold only 1" in reason
    assert never_fits(_job(2, 2), _cluster(2, 3)) is None


def test_cpus_bound_the_learners_per_server() -> None:
    assert never_fits(_job(3, 1, cpus=40.0), _cluster(4, 4)) is not None  # one 40-CPU learner per 64-CPU server
    assert never_fits(_job(2, 1, cpus=40.0), _cluster(4, 4)) is None


def test_cpu_only_jobs_fit_anywhere() -> None:
    assert never_fits(_job(1000, 0), _cluster(0, 8)) is None
