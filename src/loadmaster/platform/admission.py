"""Admission at submission: a job that can never run is rejected with the reason, never queued forever.

Two bounds, both checked for the smallest size the job may run at (an elastic job's min_learners):
- its tenant's limits: the nominal quota plus the borrowing limit is the most GPUs the tenant's jobs may
  ever hold together (no limit when the tenant may borrow without one);
- the cluster: scheduling.feasibility, the very check decide() applies, on the live Cluster.
This is cheap (the feasibility verdict is memoised per job shape on the immutable Cluster), so it runs
inline on the submission path.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import JobSpec
from loadmaster.platform.manifest import JobManifest
from loadmaster.scheduling.feasibility import never_fits


@dataclass(frozen=True, slots=True)
class Rejection:
    field: str  # the manifest field to change
    reason: str  # what is wrong and what to do


def smallest_learners(manifest: JobManifest) -> int:
    return manifest.elastic.min_learners if manifest.elastic else manifest.learners


def type_speed(manifest: JobManifest, cluster: Cluster) -> tuple[tuple[str, float], ...] | None:
    """resources.gpu_type as the core's per-type speed: full speed on that type, none on the others (the
    placers then offer only that type's nodes; feasibility rejects a cluster without it)."""
    wanted = manifest.resources.gpu_type
    if wanted is None:
        return None
    return tuple((t, 1.0 if t == wanted else 0.0) for t in dict.fromkeys((*cluster.gpu_types, wanted)))


def feasibility_spec(manifest: JobManifest, tenant: str, learners: int, cluster: Cluster) -> JobSpec:
    """The manifest as the scheduling core's JobSpec, for the shape checks only (duration is unknown here)."""
    r = manifest.resources
    return JobSpec(job_id="admission", tenant=tenant, submit_time_s=0.0, learners=learners,
                   gpus_per_learner=r.gpus, duration_s=0.0, cpus_per_learner=r.cpus, mem_gb_per_learner=r.memory_gb,
                   type_speed=type_speed(manifest, cluster))


def check_tenant_limits(manifest: JobManifest, tenant: str, max_gpus: int | None) -> Rejection | None:
    n = smallest_learners(manifest)
    per = manifest.resources.gpus
    if max_gpus is None or n * per <= max_gpus:
        return None
    size = f"{n} learners x {per} GPUs = {n * per} GPUs"
    if manifest.elastic:
        size = f"at its smallest (elastic.min_learners) {size}"
    field = "resources.gpus" if per > max_gpus else ("elastic.min_learners" if manifest.elastic else "learners")
    return Rejection(field, f"the job needs {size}, but tenant {tenant!r} may hold at most {max_gpus} GPUs "
                            f"(quota plus borrowing limit); ask for fewer GPUs or ask the admin to raise the "
                            f"quota (`loadmaster tenant set-quota {tenant} --gpus N --borrow N`)")


def check_cluster(manifest: JobManifest, tenant: str, cluster: Cluster) -> Rejection | None:
    n = smallest_learners(manifest)
    r = manifest.resources
    if r.gpu_type is not None and r.gpu_type not in cluster.gpu_types:
        have = ", ".join(cluster.gpu_types) or "none"
        return Rejection("resources.gpu_type", f"this cluster has no {r.gpu_type!r} GPUs (its types: {have}); ask "
                                               "for one of those, or leave gpu_type out to run on any")
    reason = never_fits(feasibility_spec(manifest, tenant, n, cluster), cluster, n)
    if reason is None:
        return None
    # Name the field by the same quantities the verdict came from, so the user knows what to change.
    eligible = cluster.gpu_capacity >= r.gpus
    if r.gpus > int(cluster.gpu_capacity.max()):
        field, fix = "resources.gpus", f"ask for at most {int(cluster.gpu_capacity.max())} GPUs per learner"
    elif eligible.any() and r.cpus > float(cluster.cpu_capacity[eligible].max()):
        field, fix = "resources.cpus", f"ask for at most {float(cluster.cpu_capacity[eligible].max()):g} CPUs"
    elif eligible.any() and r.memory_gb > float(cluster.mem_capacity[eligible].max()):
        field, fix = "resources.memory_gb", f"ask for at most {float(cluster.mem_capacity[eligible].max()):g} GB"
    else:
        field = "elastic.min_learners" if manifest.elastic else "learners"
        fix = "ask for fewer learners or fewer GPUs per learner"
        if r.gpu_type is not None:
            fix += f", or leave resources.gpu_type ({r.gpu_type}) out"
    return Rejection(field, f"the job can never run on this cluster ({cluster.describe()}): {reason}; {fix}")


def admit(manifest: JobManifest, tenant: str, max_gpus: int | None, cluster: Cluster) -> Rejection | None:
    """Why the job can never run for this tenant on this cluster, or None if it may queue."""
    return check_tenant_limits(manifest, tenant, max_gpus) or check_cluster(manifest, tenant, cluster)
