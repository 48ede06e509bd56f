"""Small builders shared by the tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.scheduling.snapshot import JobView


def cluster(*gpus: int, cpus: float = 32, mem: float = 256, racks: int = 1, gpu_type: str = "gpu") -> Cluster:
    return Cluster(tuple(
        Node(f"n{i}", g, cpus, mem, gpu_type=gpu_type, rack=f"r{i % racks}") for i, g in enumerate(gpus)
    ))


def job(job_id: str, learners: int = 1, gpus: int = 1, duration: float = 100.0, submit: float = 0.0,
        tenant: str = "t", **kw: object) -> JobSpec:
    return JobSpec(job_id=job_id, tenant=tenant, submit_time_s=submit, learners=learners,
                   gpus_per_learner=gpus, duration_s=duration, **kw)  # type: ignore[arg-type]


def queued(spec: JobSpec) -> JobView:
    return JobView(spec, queued_since=spec.submit_time_s, as_of=spec.submit_time_s)


def workload(*jobs: JobSpec) -> Workload:
    return Workload(list(jobs), LoadReport("test"))


def counting(calls: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, counting its calls under name: a check of work done where a wall-clock bound would be a timed test."""
    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)
    return call
