"""Pure data: resources, nodes, clusters, job specs, statuses and allocations. Knows no policy."""

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import (
    Allocation,
    FailureCategory,
    FinalStatus,
    IllegalTransition,
    JobSpec,
    JobStatus,
    check_transition,
)
from loadmaster.core.workload import LoadReport, Workload

__all__ = [
    "Allocation",
    "Cluster",
    "FailureCategory",
    "FinalStatus",
    "IllegalTransition",
    "JobSpec",
    "JobStatus",
    "LoadReport",
    "Node",
    "Workload",
    "check_transition",
]
