"""/api/v1/usage: GPU-hours used, failed and preempted per day, tenant, user or job (platform/usage.py), and busy
GPUs over time (the dashboard's utilisation chart). A tenant's token sees its own; the admin's, every
tenant's or one's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from loadmaster.platform import usage
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import ApiError, field_error, responses
from loadmaster.platform.store.tenants import Principal, get_tenant

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])

DAY_S = 86400.0
MAX_POINTS = 2000


class UsageRow(BaseModel):
    key: str  # the day (YYYY-MM-DD, UTC), the tenant's name, tenant/user or the job's id
    name: str | None = None  # by job: the job's name
    gpu_hours: float
    failed_gpu_hours: float  # attempts that failed or were lost
    preempted_gpu_hours: float  # attempts a preemption ended
    lost_gpu_hours: float  # of those, the GPU-hours after the job's last checkpoint: redone
    attempts: int
    jobs: int


class UsageOut(BaseModel):
    since: float
    until: float
    by: usage.UsageBy
    tenant: str | None
    rows: list[UsageRow]
    total: UsageRow


class TimelineOut(BaseModel):
    since: float
    until: float
    step_s: float
    total_gpus: int  # the cluster's
    busy_gpus: list[float]  # per step, averaged over it (the tenant's own jobs for a tenant's token)


Since = Annotated[float | None, Query(ge=0, description="UNIX seconds; default: 7 days before `until`.")]
Until = Annotated[float | None, Query(ge=0, description="UNIX seconds; default: now.")]
TenantQ = Annotated[str | None, Query(max_length=64, description="Admin: one tenant's (a tenant's token: its "
                                                                "own, always).")]


def _window(ctx: ApiContext, since: float | None, until: float | None) -> tuple[float, float]:
    end = ctx.clock() if until is None else until
    start = end - 7 * DAY_S if since is None else since
    if start >= end:
        raise field_error(422, "since", f"since ({start:g}) must come before until ({end:g})")
    return start, end


def _tenant(ctx: ApiContext, who: Principal, tenant: str | None) -> tuple[int | None, str | None]:
    if not who.is_admin:
        if tenant and tenant != who.tenant:
            raise ApiError(403, f"this token sees tenant {who.tenant!r}'s usage only", [("tenant", "another tenant")])
        return who.tenant_id, who.tenant
    if not tenant:
        return None, None
    with ctx.store.session() as s:
        return get_tenant(s, tenant).id, tenant


@router.get("", response_model=UsageOut, responses=responses(401, 403, 404, 422),
            summary="GPU-hours used, failed, preempted and lost to preemption, by day, tenant, user or job "
                    "(Slurm's sacct)")
def usage_report(ctx: Ctx, who: Who, since: Since = None, until: Until = None, tenant: TenantQ = None,
                 by: Annotated[usage.UsageBy, Query(description="Group by day (UTC), tenant, user (keyed "
                                                                "tenant/user) or job.")] = usage.UsageBy.DAY
                 ) -> UsageOut:
    start, end = _window(ctx, since, until)
    tenant_id, tenant_name = _tenant(ctx, who, tenant)
    with ctx.store.session() as s:
        holds = list(usage.held(s, start, end, tenant_id))
    rows, total = usage.summarise(holds, by)
    names = {h.job_id: h.job_name for h in holds} if by is usage.UsageBy.JOB else {}
    return UsageOut(since=start, until=end, by=by, tenant=tenant_name,
                    rows=[_row(r, names.get(r.key)) for r in rows], total=_row(total, None))


def _row(row: usage.Usage, name: str | None) -> UsageRow:
    return UsageRow(key=row.key, name=name, gpu_hours=row.gpu_hours, failed_gpu_hours=row.failed_gpu_hours,
                    preempted_gpu_hours=row.preempted_gpu_hours, lost_gpu_hours=row.lost_gpu_hours,
                    attempts=row.attempts, jobs=row.jobs)


@router.get("/timeline", response_model=TimelineOut, responses=responses(401, 403, 404, 422),
            summary="Busy GPUs over time (averaged per step)")
def usage_timeline(ctx: Ctx, who: Who, since: Since = None, until: Until = None, tenant: TenantQ = None,
                   step_s: Annotated[float | None, Query(gt=0, le=30 * DAY_S, description="Seconds per point; "
                                                         "default: the window in 200 points.")] = None
                   ) -> TimelineOut:
    start, end = _window(ctx, since, until)
    step = step_s if step_s is not None else (end - start) / 200
    if (end - start) / step > MAX_POINTS:
        raise field_error(422, "step_s", f"{step:g} s makes more than {MAX_POINTS} points over the window: give a "
                                         "larger step_s or a shorter window")
    tenant_id, _ = _tenant(ctx, who, tenant)
    with ctx.store.session() as s:
        holds = list(usage.held(s, start, end, tenant_id))
    return TimelineOut(since=start, until=end, step_s=step, total_gpus=ctx.cluster.total_gpus,
                       busy_gpus=usage.timeline(holds, start, end, step))
