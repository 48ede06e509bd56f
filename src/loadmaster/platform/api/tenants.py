"""/api/v1/tenants (the admin's): create a tenant (its token is shown once), list, set quota, new token.
/api/v1/whoami: what a token acts for."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Admin, Ctx, Who
from loadmaster.platform.api.cluster import HOLDING
from loadmaster.platform.api.errors import ApiError, responses
from loadmaster.platform.api.models import (
    QuotaIn,
    TenantCreated,
    TenantIn,
    TenantList,
    TenantOut,
    TokenOut,
    WhoAmI,
    gpus_per_learner,
    tenant_out,
)
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.platform.store.tenants import create_tenant, get_tenant, issue_token, list_tenants, set_quota

router = APIRouter(prefix="/api/v1", tags=["tenants"])

TenantName = Annotated[str, Path(min_length=1, max_length=64, description="The tenant's name.")]


def _usage(s: Session, tenant_ids: list[int]) -> tuple[Counter[int], Counter[int], Counter[int]]:
    """GPUs held, jobs queued and jobs running, per tenant id."""
    gpus: Counter[int] = Counter()
    running: Counter[int] = Counter()
    queued: Counter[int] = Counter()
    for job in s.scalars(select(Job).where(Job.status.in_(HOLDING), Job.tenant_id.in_(tenant_ids))):
        gpus[job.tenant_id] += gpus_per_learner(job) * job.learners
        running[job.tenant_id] += 1
    for tid, n in s.execute(select(Job.tenant_id, func.count()).where(
            Job.status == JobStatus.QUEUED.value, Job.tenant_id.in_(tenant_ids)).group_by(Job.tenant_id)):
        queued[tid] = n
    return gpus, queued, running


def _out(s: Session, tenants: list[Tenant]) -> list[TenantOut]:
    gpus, queued, running = _usage(s, [t.id for t in tenants])
    return [tenant_out(t, gpus[t.id], queued[t.id], running[t.id]) for t in tenants]


@router.get("/tenants", response_model=TenantList, responses=responses(401),
            summary="Tenants with quotas and usage (a tenant's token sees its own)")
def tenants(ctx: Ctx, who: Who) -> TenantList:
    with ctx.store.session() as s:
        rows = list_tenants(s) if who.is_admin else [t for t in [s.get(Tenant, who.tenant_id)] if t is not None]
        return TenantList(tenants=_out(s, rows))


@router.post("/tenants", status_code=201, response_model=TenantCreated, responses=responses(400, 401, 403, 409, 422),
             summary="Create a tenant; the answer carries its API token, shown this once")
def create(body: TenantIn, ctx: Ctx, _who: Admin) -> TenantCreated:
    try:
        with ctx.store.session() as s:
            tenant, token = create_tenant(s, body.name, body.gpus, body.borrow, ctx.clock())
            out = _out(s, [tenant])[0]
    except IntegrityError:  # created concurrently under the same name
        raise ApiError(409, f"tenant {body.name!r} exists already", [("name", "taken")]) from None
    return TenantCreated(tenant=out, token=token)


@router.patch("/tenants/{name}", response_model=TenantOut, responses=responses(400, 401, 403, 404, 422),
              summary="Set a tenant's quota and borrowing limit (borrow: null means no limit)")
def update_quota(name: TenantName, body: QuotaIn, ctx: Ctx, _who: Admin) -> TenantOut:
    with ctx.store.session() as s:
        tenant = set_quota(s, name, body.gpus, body.borrow,
                           clear_borrow_limit="borrow" in body.model_fields_set and body.borrow is None)
        out = _out(s, [tenant])[0]
    ctx.auth.forget_tenants()  # the memo holds limits; the next request reads the new ones
    ctx.wake()  # the scheduler's quotas changed
    return out


@router.post("/tenants/{name}/tokens", status_code=201, response_model=TokenOut,
             responses=responses(401, 403, 404, 422), summary="Issue another token for a tenant (shown this once)")
def new_token(name: TenantName, ctx: Ctx, _who: Admin) -> TokenOut:
    with ctx.store.session() as s:
        tenant = get_tenant(s, name)
        token = issue_token(s, tenant.id, ctx.clock())
    return TokenOut(tenant=name, token=token)


@router.get("/whoami", response_model=WhoAmI, responses=responses(401), summary="What this token acts for")
async def whoami(who: Who) -> WhoAmI:
    return WhoAmI(admin=who.is_admin, tenant=who.tenant, gpu_quota=None if who.is_admin else who.gpu_quota,
                  borrow_limit=who.borrow_limit)
