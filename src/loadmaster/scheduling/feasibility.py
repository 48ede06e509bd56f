"""Jobs that can never run on a cluster, whatever else happens: rejected with the reason, not queued forever."""

from __future__ import annotations

import numpy as np

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import JobSpec


def never_fits(spec: JobSpec, cluster: Cluster, learners: int | None = None) -> str | None:
    """Why `spec` can never run on `cluster` (None if it can). Memoised per shape on the cluster."""
    n = spec.learners if learners is None else learners
    key = (n, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner, spec.excluded_types)
    cache = cluster.fit_cache
    if key not in cache:
        cache[key] = _never_fits(spec, cluster, n)
    return cache[key]


def _never_fits(spec: JobSpec, cluster: Cluster, n: int) -> str | None:
    g = spec.gpus_per_learner
    caps = cluster.gpu_capacity
    if g > int(caps.max()):
        return f"needs {g} GPUs per learner but the largest server has {int(caps.max())}"
    if n * g > cluster.total_gpus:
        return f"needs {n * g} GPUs but the cluster has {cluster.total_gpus}"
    eligible = caps >= g
    if spec.type_speed is not None and g > 0:
        names = [node.gpu_type for node in cluster.nodes]
        eligible &= [spec.speed_on(t) != 0 for t in names]
        if not eligible.any():
            return "runs on none of the cluster's GPU types (zero throughput on each)"
    if g > 0 and len(cluster.gpu_types) > 1:
        # A gang never mixes GPU types, so it must fit within one type's servers.
        fits_a_type = False
        for t, mask in cluster.type_masks:
            if t in spec.excluded_types:
                continue
            per_node = np.floor_divide(caps[mask], g)
            if int(per_node.sum()) >= n:
                fits_a_type = True
                break
        if not fits_a_type:
            return f"needs {n} learners x {g} GPUs of one GPU type, and no type has that many"
    if spec.cpus_per_learner > float(cluster.cpu_capacity[eligible].max()):
        return (f"needs {spec.cpus_per_learner:g} CPUs per learner but no server with {g} GPUs has that many")
    if spec.mem_gb_per_learner > float(cluster.mem_capacity[eligible].max()):
        return (f"needs {spec.mem_gb_per_learner:g} GB per learner but no server with {g} GPUs has that much")
    return None
