"""Jobs that can never run on a cluster, whatever else happens: rejected with the reason, not queued forever."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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
    if spec.cpus_per_learner > float(cluster.cpu_capacity[eligible].max()):
        return (f"needs {spec.cpus_per_learner:g} CPUs per learner but no server with {g} GPUs has that many")
    if spec.mem_gb_per_learner > float(cluster.mem_capacity[eligible].max()):
        return (f"needs {spec.mem_gb_per_learner:g} GB per learner but no server with {g} GPUs has that much")
    # Whole learners per server (GPUs, CPUs and memory each bound it): a gang of n needs n such slots, and a
    # gang never mixes GPU types, so within one type's servers. Totals alone are not enough: 2 learners x
    # 2 GPUs never fit on servers of 1 and 3 GPUs.
    slots = np.where(eligible, _learner_slots(spec, cluster), 0)
    if len(cluster.gpu_types) > 1 and g > 0:
        if not any(int(slots[mask].sum()) >= n for t, mask in cluster.type_masks if t not in spec.excluded_types):
            return f"needs {n} learners x {g} GPUs of one GPU type, and no type has that many"
    elif int(slots.sum()) < n:
        return (f"needs {n} learners of {g} GPUs, {spec.cpus_per_learner:g} CPUs, {spec.mem_gb_per_learner:g} GB "
                f"but the cluster's servers hold only {int(slots.sum())} such learners at once")
    return None


def _learner_slots(spec: JobSpec, cluster: Cluster) -> npt.NDArray[np.int64]:
    """How many learners of `spec` each server holds when empty."""
    big = 1 << 40  # "unbounded" that still sums over any cluster without overflow
    slots = np.full(len(cluster.nodes), big, dtype=np.int64)
    for need, cap in ((spec.gpus_per_learner, cluster.gpu_capacity), (spec.cpus_per_learner, cluster.cpu_capacity),
                      (spec.mem_gb_per_learner, cluster.mem_capacity)):
        if need > 0:
            slots = np.minimum(slots, np.floor(np.asarray(cap, dtype=np.float64) / need + 1e-9).astype(np.int64))
    return slots
