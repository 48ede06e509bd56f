"""/api/v1/cluster: the nodes, their GPUs used and free, and the running jobs the token may see."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.errors import responses
from loadmaster.platform.api.models import ClusterOut, NodeOut, RunningJobOut, gpus_per_learner
from loadmaster.platform.store.models import Job, Tenant

router = APIRouter(prefix="/api/v1", tags=["cluster"])

HOLDING = (JobStatus.DOWNLOADING.value, JobStatus.PROCESSING.value, JobStatus.STORING.value)


@router.get("/cluster", response_model=ClusterOut, responses=responses(401),
            summary="Nodes with GPUs used and free, and running jobs")
def cluster(ctx: Ctx, who: Who) -> ClusterOut:
    nodes = ctx.cluster.nodes
    index = {n.name: i for i, n in enumerate(nodes)}
    gpus = [0] * len(nodes)
    cpus = [0.0] * len(nodes)
    mem = [0.0] * len(nodes)
    on_node: list[list[str]] = [[] for _ in nodes]
    running, others = [], 0
    q = (select(Job, Tenant.name).join(Tenant, Job.tenant_id == Tenant.id).where(Job.status.in_(HOLDING))
         .order_by(Job.first_started_at, Job.id))
    with ctx.store.session() as s:
        rows = list(s.execute(q))
    for job, tenant in rows:
        visible = who.is_admin or job.tenant_id == who.tenant_id
        per = gpus_per_learner(job)
        learners = (job.allocation or {}).get("learners") or []
        used_nodes: list[str] = []
        for learner in learners:
            i = index.get(str(learner.get("node")))
            if i is None:
                continue
            gpus[i] += len(learner.get("gpu_ids") or ()) or per
            cpus[i] += float(learner.get("cpus") or 0.0)
            mem[i] += float(learner.get("mem_gb") or 0.0)
            if visible and job.id not in on_node[i]:
                on_node[i].append(job.id)
            if nodes[i].name not in used_nodes:
                used_nodes.append(nodes[i].name)
        if visible:
            running.append(RunningJobOut(id=job.id, name=job.name, tenant=tenant, status=JobStatus(job.status),
                                         learners=len(learners) or job.learners,
                                         gpus=per * (len(learners) or job.learners), nodes=used_nodes))
        else:
            others += 1
    out_nodes = [NodeOut(name=n.name, gpu_type=n.gpu_type, rack=n.rack, gpus=n.gpus, gpus_used=gpus[i],
                         gpus_free=max(0, n.gpus - gpus[i]), cpus=n.cpus, cpus_used=cpus[i], mem_gb=n.mem_gb,
                         mem_used_gb=mem[i], jobs=on_node[i]) for i, n in enumerate(nodes)]
    used = sum(gpus)
    total = ctx.cluster.total_gpus
    return ClusterOut(name=ctx.cluster.name, description=ctx.cluster.describe(), total_gpus=total, gpus_used=used,
                      gpus_free=max(0, total - used), nodes=out_nodes, running=running, other_running=others)
