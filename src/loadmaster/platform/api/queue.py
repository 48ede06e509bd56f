"""/api/v1/queue: each queued job's position in the policy's order, why it waits, and when it may start.

Positions, reasons and estimates come from the control loop's latest round. A job submitted since that
round is listed after the others with the reason the store holds, until the next round places it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.errors import responses
from loadmaster.platform.api.models import QueueEntryOut, QueueOut, duration_fields
from loadmaster.platform.store.models import Job, Tenant

router = APIRouter(prefix="/api/v1", tags=["queue"])

NOT_YET = "not_yet_considered"


@router.get("/queue", response_model=QueueOut, responses=responses(401, 422),
            summary="Queued jobs in scheduling order, with waiting reason and estimated start")
def queue(ctx: Ctx, who: Who,
          tenant: Annotated[str | None, Query(max_length=64, description="Admin only: one tenant's jobs.")] = None
          ) -> QueueOut:
    entries = list(ctx.loop.queue()) if ctx.loop is not None else []
    q = (select(Job.id, Job.name, Tenant.name, Job.wait_reason, Job.expected_duration_s)
         .join(Tenant, Job.tenant_id == Tenant.id)
         .where(Job.status == JobStatus.QUEUED.value).order_by(Job.queued_since, Job.id))
    if not who.is_admin:
        q = q.where(Job.tenant_id == who.tenant_id)
    elif tenant:
        q = q.where(Tenant.name == tenant)
    with ctx.store.session() as s:
        queued = {job_id: (name, t, reason, expected) for job_id, name, t, reason, expected in s.execute(q)}
    out = []
    for e in entries:
        row = queued.pop(e.job_id, None)
        if row is not None:
            out.append(QueueEntryOut(job_id=e.job_id, name=row[0], tenant=row[1], position=e.position,
                                     wait_reason=e.wait_reason, estimated_start_at=e.estimated_start_at,
                                     **duration_fields(row[3])))
    after = max((e.position for e in entries), default=0)
    for i, (job_id, (name, t, reason, expected)) in enumerate(queued.items(), start=1):
        out.append(QueueEntryOut(job_id=job_id, name=name, tenant=t, position=after + i,
                                 wait_reason=reason or NOT_YET, estimated_start_at=None, **duration_fields(expected)))
    return QueueOut(entries=out)
