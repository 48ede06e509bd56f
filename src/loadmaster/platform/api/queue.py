"""/api/v1/queue: each queued job's position in the policy's order, why it waits, and when it may start.

Positions, reasons and estimates come from the control loop's latest round (kept in its memory); the store
is asked only for the names of the page's jobs and for jobs queued since that round (listed after the
others with the reason the store holds, until the next round places them). So a page costs the page,
whatever the length of the queue. Pages: `limit` (default 1000) from `offset`; `next_offset` says where the
next one starts.
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
# A job queued this long before the loop's latest queue was made may still be missing from it (the round's
# read came before its commit): it is looked for in the store as well.
_OVERLAP_S = 5.0


@router.get("/queue", response_model=QueueOut, responses=responses(401, 422),
            summary="Queued jobs in scheduling order, with waiting reason and estimated start (paginated)")
def queue(ctx: Ctx, who: Who,
          tenant: Annotated[str | None, Query(max_length=64, description="Admin only: one tenant's jobs.")] = None,
          limit: Annotated[int, Query(ge=1, le=10_000, description="Entries per page.")] = 1000,
          offset: Annotated[int, Query(ge=0, le=10_000_000, description="Entries to skip.")] = 0,
          ) -> QueueOut:
    loop = ctx.loop
    entries = list(loop.queue()) if loop is not None else []
    wanted = who.tenant if not who.is_admin else tenant
    if wanted:
        entries = [e for e in entries if e.tenant == wanted]
    since = loop.queue_made_at() - _OVERLAP_S if loop is not None else 0.0
    recent = (select(Job.id, Job.name, Tenant.name, Job.wait_reason, Job.expected_duration_s)
              .join(Tenant, Job.tenant_id == Tenant.id)
              .where(Job.status == JobStatus.QUEUED.value, Job.queued_since >= since)
              .order_by(Job.queued_since, Job.id))
    if wanted:
        recent = recent.where(Tenant.name == wanted)
    known = {e.job_id for e in entries}
    page = entries[offset:offset + limit]
    ids = [e.job_id for e in page]
    names: dict[str, tuple[str, float | None]] = {}
    with ctx.store.session() as s:
        late = [(j, name, t, reason, expected) for j, name, t, reason, expected in s.execute(recent)
                if j not in known]
        for start in range(0, len(ids), 500):  # bounded IN lists; a job that left the queue is left out
            chunk = select(Job.id, Job.name, Job.expected_duration_s).where(
                Job.id.in_(ids[start:start + 500]), Job.status == JobStatus.QUEUED.value)
            names.update((j, (n, x)) for j, n, x in s.execute(chunk))
    out = [QueueEntryOut(job_id=e.job_id, name=names[e.job_id][0], tenant=e.tenant, position=e.position,
                         wait_reason=e.wait_reason, estimated_start_at=e.estimated_start_at,
                         **duration_fields(names[e.job_id][1]))
           for e in page if e.job_id in names]
    first_late = max(0, offset - len(entries))
    wanted_late = max(0, offset + limit - len(entries)) - first_late
    for i, (job_id, name, t, reason, expected) in enumerate(late[first_late:first_late + wanted_late],
                                                            start=len(entries) + first_late + 1):
        out.append(QueueEntryOut(job_id=job_id, name=name, tenant=t, position=i, wait_reason=reason or NOT_YET,
                                 estimated_start_at=None, **duration_fields(expected)))
    total = len(entries) + len(late)
    following = offset + limit
    return QueueOut(entries=out, total=total, offset=offset, limit=limit,
                    next_offset=following if following < total else None)
