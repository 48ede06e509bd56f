"""/api/v1/cluster: the nodes (with their state: alive, dead, draining), their GPUs used and free, and the
running jobs the token may see; /api/v1/cluster/nodes/NODE/drain (admin): drain or undrain a node."""

from __future__ import annotations

import time

from fastapi import APIRouter
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Admin, Ctx, Who
from loadmaster.platform.api.errors import field_error, responses
from loadmaster.platform.api.models import ClusterOut, DrainOut, NodeOut, RunningJobOut, gpus_per_learner
from loadmaster.platform.store.models import Job, NodeDrain, Tenant

router = APIRouter(prefix="/api/v1", tags=["cluster"])

HOLDING = (JobStatus.DOWNLOADING.value, JobStatus.PROCESSING.value, JobStatus.STORING.value)


@router.get("/cluster", response_model=ClusterOut, responses=responses(401),
            summary="Nodes with GPUs used and free, and running jobs")
def cluster(ctx: Ctx, who: Who) -> ClusterOut:
    live = ctx.live_cluster()
    nodes = live.nodes
    states = ctx.nodes.states() if ctx.nodes is not None else {}
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
    with ctx.store.session() as s:
        drained = set(s.scalars(select(NodeDrain.node)).all())
    out_nodes = []
    for i, n in enumerate(nodes):
        st = states.get(n.name)
        state = st.state if st is not None else ("draining" if n.name in drained else "alive")
        up = state == "alive"
        out_nodes.append(NodeOut(
            name=n.name, gpu_type=n.gpu_type, rack=n.rack, gpus=n.gpus, gpus_used=gpus[i],
            gpus_free=max(0, n.gpus - gpus[i]) if up else 0, cpus=n.cpus, cpus_used=cpus[i], mem_gb=n.mem_gb,
            mem_used_gb=mem[i], jobs=on_node[i], state=state, node_id=st.node_id if st else "",
            address=st.address if st else "", labels=dict(st.labels) if st else {},
            last_heartbeat_at=st.last_seen_at if st else None))
    used = sum(gpus)
    total = sum(n.gpus for n, o in zip(nodes, out_nodes, strict=True) if o.state == "alive")
    return ClusterOut(name=live.name, description=live.describe(), total_gpus=total, gpus_used=used,
                      gpus_free=max(0, total - used), nodes=out_nodes, running=running, other_running=others)


def _set_drain(ctx: Ctx, node: str, drain: bool) -> DrainOut:
    names = [n.name for n in ctx.live_cluster().nodes]
    if node not in names:
        raise field_error(404, "node", f"no node {node!r} in the cluster (nodes: {', '.join(names)}); "
                                       "see `loadmaster cluster`")
    try:
        with ctx.store.session(for_update=True) as s:
            present = s.get(NodeDrain, node) is not None
            if drain and not present:
                s.add(NodeDrain(node=node, drained_at=time.time()))
            elif not drain and present:
                s.execute(delete(NodeDrain).where(NodeDrain.node == node))
    except IntegrityError:
        pass  # drained by a request beside this one: drained all the same
    with ctx.store.session() as s:
        draining = sorted(s.scalars(select(NodeDrain.node)).all())
    if ctx.loop is not None:
        ctx.loop.nodes_changed()
    return DrainOut(node=node, state="draining" if drain else "alive", draining=draining)


@router.post("/cluster/nodes/{node}/drain", response_model=DrainOut, responses=responses(401, 403, 404),
             summary="Drain a node: nothing new lands there, running jobs move off it (elastic ones shrink)")
def drain(node: str, ctx: Ctx, _admin: Admin) -> DrainOut:
    return _set_drain(ctx, node, True)


@router.post("/cluster/nodes/{node}/undrain", response_model=DrainOut, responses=responses(401, 403, 404),
             summary="Undrain a node: it takes work again")
def undrain(node: str, ctx: Ctx, _admin: Admin) -> DrainOut:
    return _set_drain(ctx, node, False)
