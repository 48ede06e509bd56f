"""/api/v1/queue: each queued job's position in the policy's order, why it waits, and when it may start.

Positions, reasons and estimates come from the control loop's latest round (kept in its memory); the store
gives the jobs' names and run times, and the jobs queued since that round (listed after the others with the
reason the store holds, until the next round places them). Pages: `limit` (default 1000) from `offset`;
`next_offset` says where the next one starts.

The store is read once per request, every queued row of the token's view in one indexed scan (status): the
jobs queued since the round must be looked for among all of them anyway (no index on queued_since), and one
scan of 10,000 rows costs less than looking up a page of them by id in bounded IN lists. The answer is
written as plain JSON, not through a pydantic model per entry (10,000 of them cost ~3x the rest of the
request); QueueOut stays the response's schema, and tests hold the answer to it.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.errors import responses
from loadmaster.platform.api.models import QueueOut, duration_fields
from loadmaster.platform.store.models import Job, Tenant

router = APIRouter(prefix="/api/v1", tags=["queue"])

NOT_YET = "not_yet_considered"
# A job queued this long before the loop's latest queue was made may still be missing from it (the round's
# read came before its commit): it is looked for in the store as well.
_OVERLAP_S = 5.0
_QUEUED = (select(Job.id, Job.name, Job.expected_duration_s, Tenant.name, Job.wait_reason, Job.queued_since)
           .join(Tenant, Job.tenant_id == Tenant.id)
           .where(Job.status == JobStatus.QUEUED.value))


def _finite(x: float | None) -> float | None:
    """As pydantic writes floats in JSON: inf and NaN as null (json.dumps would write invalid JSON)."""
    return x if x is None or math.isfinite(x) else None


def _entry(job_id: str, name: str, tenant: str, position: int, reason: str, start: float | None,
           expected: float | None) -> dict[str, Any]:
    """One QueueEntryOut, its fields in the model's order."""
    out = {"job_id": job_id, "name": name, "tenant": tenant, "position": position, "wait_reason": reason,
           "estimated_start_at": _finite(start)}
    out.update(duration_fields(_finite(expected)))
    return out


def _json(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), allow_nan=False), media_type="application/json")


@router.get("/queue", response_model=QueueOut, responses=responses(401, 422),
            summary="Queued jobs in scheduling order, with waiting reason and estimated start (paginated)")
def queue(ctx: Ctx, who: Who,
          tenant: Annotated[str | None, Query(max_length=64, description="Admin only: one tenant's jobs.")] = None,
          limit: Annotated[int, Query(ge=1, le=10_000, description="Entries per page.")] = 1000,
          offset: Annotated[int, Query(ge=0, le=10_000_000, description="Entries to skip.")] = 0,
          ) -> Response:
    loop = ctx.loop
    entries = list(loop.queue()) if loop is not None else []
    wanted = who.tenant if not who.is_admin else tenant
    if wanted:
        entries = [e for e in entries if e.tenant == wanted]
    since = loop.queue_made_at() - _OVERLAP_S if loop is not None else 0.0
    read = _QUEUED.where(Tenant.name == wanted) if wanted else _QUEUED
    with ctx.store.session() as s:
        # Core rows on the session's connection: the ORM's result machinery would double the read's cost.
        rows = {r[0]: (r[1], r[2], r[3], r[4], r[5]) for r in s.connection().execute(read)}
    known = {e.job_id for e in entries}
    late = sorted((queued_since, job_id) for job_id, (_, _, _, _, queued_since) in rows.items()
                  if queued_since >= since and job_id not in known)
    # A job of the round's queue that has left it since (started, cancelled) is left out of its page.
    out = [_entry(e.job_id, rows[e.job_id][0], e.tenant, e.position, e.wait_reason, e.estimated_start_at,
                  rows[e.job_id][1])
           for e in entries[offset:offset + limit] if e.job_id in rows]
    first_late = max(0, offset - len(entries))
    wanted_late = max(0, offset + limit - len(entries)) - first_late
    out += [_entry(j, rows[j][0], rows[j][2], i, rows[j][3] or NOT_YET, None, rows[j][1])
            for i, (_, j) in enumerate(late[first_late:first_late + wanted_late], start=len(entries) + first_late + 1)]
    total = len(entries) + len(late)
    following = offset + limit
    return _json({"entries": out, "total": total, "offset": offset, "limit": limit,
                  "next_offset": following if following < total else None})

