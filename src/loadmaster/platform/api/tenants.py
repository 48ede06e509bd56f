"""/api/v1/tenants (the admin's): create a tenant (its first user's token is shown once), list, set quota and
roots, delete; its users' tokens: issue, list, rotate, revoke. /api/v1/audit: the admin actions, each
recorded in the transaction of the action itself. /api/v1/whoami: what a token acts for."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Path, Query
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.auth import Admin, Ctx, Who
from loadmaster.platform.api.cluster import HOLDING
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import ApiError, responses
from loadmaster.platform.api.models import (
    AuditList,
    AuditOut,
    QuotaIn,
    Revoked,
    TenantCreated,
    TenantDeleted,
    TenantIn,
    TenantList,
    TenantOut,
    TokenIn,
    TokenOut,
    UserList,
    UserOut,
    WhoAmI,
    gpus_per_learner,
    tenant_out,
)
from loadmaster.platform.manifest import ManifestError
from loadmaster.platform.store.models import Job, Tenant, Token
from loadmaster.platform.store.tenants import (
    USER_NAME_PATTERN,
    NoSuchTenant,
    TenantError,
    audit_log,
    create_tenant,
    delete_tenant,
    get_tenant,
    issue_token,
    list_tenants,
    list_users,
    record,
    revoke_tokens,
    rotate_token,
    set_quota,
)
from loadmaster.platform.tenancy import Root, check_roots, os_user

router = APIRouter(prefix="/api/v1", tags=["tenants"])

TenantName = Annotated[str, Path(min_length=1, max_length=64, description="The tenant's name.")]
UserName = Annotated[str, Path(pattern=USER_NAME_PATTERN, description="The tenant's named user.")]


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


def _second_tenant_gate(ctx: ApiContext) -> None:
    iso = ctx.isolation
    if iso is None or iso.sandbox is not None or iso.insecure_shared_user:
        return
    with ctx.store.session() as s:
        if s.scalar(select(func.count()).select_from(Tenant)):
            raise ApiError(409, "this server has no sandbox (bubblewrap is not installed or cannot run here): a "
                                "second tenant's jobs could read and change the first's files; install bubblewrap "
                                "and restart the server, or restart it with --insecure-shared-user to accept that",
                           [("name", "a second tenant needs a sandbox or --insecure-shared-user")])


def _os_user(ctx: ApiContext, name: str | None) -> tuple[str, int, int] | None:
    if name is None:
        return None
    try:
        found = os_user(name)
    except ValueError as err:
        # The request is well-formed; the machine has no such user (yet): a conflict with its state.
        raise ApiError(409, f"os_user: {err}", [("os_user", str(err))]) from None
    return name, found.uid, found.gid


@router.post("/tenants", status_code=201, response_model=TenantCreated, responses=responses(400, 401, 403, 409, 422),
             summary="Create a tenant; the answer carries its first user's API token, shown this once")
def create(body: TenantIn, ctx: Ctx, who: Admin) -> TenantCreated:
    mapped = _os_user(ctx, body.os_user)
    _second_tenant_gate(ctx)
    try:
        with ctx.store.session(for_update=True) as s:
            tenant, token = create_tenant(s, body.name, body.gpus, body.borrow, ctx.clock(), user=body.user,
                                          os_user=mapped)
            record(s, who.actor, "tenant.create", body.name, f"gpus={body.gpus} borrow={body.borrow} "
                                                             f"user={body.user} os_user={body.os_user}", ctx.clock())
            out = _out(s, [tenant])[0]
    except IntegrityError:  # created concurrently under the same name
        raise ApiError(409, f"tenant {body.name!r} exists already", [("name", "taken")]) from None
    return TenantCreated(tenant=out, token=token)


@router.patch("/tenants/{name}", response_model=TenantOut, responses=responses(400, 401, 403, 404, 422),
              summary="Set a tenant's quota, borrowing limit (borrow: null means no limit) or roots")
def update_quota(name: TenantName, body: QuotaIn, ctx: Ctx, who: Admin) -> TenantOut:
    roots = None if body.roots is None else [Root(r.path, r.writable) for r in body.roots]
    if roots is not None:
        try:
            check_roots(roots)
        except ManifestError as err:
            raise ApiError(422, str(err), list(err.problems)) from None
    with ctx.store.session(for_update=True) as s:
        tenant = set_quota(s, name, body.gpus, body.borrow,
                           clear_borrow_limit="borrow" in body.model_fields_set and body.borrow is None)
        if roots is not None:
            tenant.roots = [r.to_dict() for r in roots]
        record(s, who.actor, "tenant.update", name, body.model_dump_json(exclude_unset=True), ctx.clock())
        out = _out(s, [tenant])[0]
    ctx.wake()  # the scheduler's quotas changed
    return out


@router.delete("/tenants/{name}", response_model=TenantDeleted, responses=responses(401, 403, 404, 409, 422),
               summary="Delete a tenant, its tokens and its finished jobs' records (refused while jobs run)")
def delete(name: TenantName, ctx: Ctx, who: Admin) -> TenantDeleted:
    try:
        with ctx.store.session(for_update=True) as s:
            count = delete_tenant(s, name)
            record(s, who.actor, "tenant.delete", name, f"{count} finished jobs' records deleted", ctx.clock())
    except NoSuchTenant:
        raise
    except TenantError as err:
        raise ApiError(409, str(err), [(err.field, str(err))]) from None
    ctx.wake()
    return TenantDeleted(tenant=name, jobs_deleted=count)


@router.post("/tenants/{name}/tokens", status_code=201, response_model=TokenOut,
             responses=responses(400, 401, 403, 404, 422),
             summary="Issue a token for one of a tenant's users (a new user, or another token); shown this once")
def new_token(name: TenantName, ctx: Ctx, who: Admin, body: TokenIn | None = None) -> TokenOut:
    body = body or TokenIn()
    now = ctx.clock()
    with ctx.store.session(for_update=True) as s:
        tenant = get_tenant(s, name)
        token = issue_token(s, tenant.id, now, user=body.user, expires_in_s=body.expires_in_s)
        record(s, who.actor, "token.issue", name, f"user={body.user} expires_in_s={body.expires_in_s}", now)
    expires = None if body.expires_in_s is None else now + body.expires_in_s
    return TokenOut(tenant=name, token=token, user=body.user, expires_at=expires)


@router.get("/tenants/{name}/tokens", response_model=UserList, responses=responses(401, 403, 404, 422),
            summary="A tenant's users and their tokens (never the tokens themselves)")
def users(name: TenantName, ctx: Ctx, _who: Admin) -> UserList:
    with ctx.store.session() as s:
        rows = list_users(s, name)
    by_user: dict[str, list[Token]] = {}
    for row in rows:
        by_user.setdefault(row.user, []).append(row)
    return UserList(tenant=name, users=[
        UserOut(user=u, tokens=len(ts), created_at=max(t.created_at for t in ts),
                expires_at=max(ts, key=lambda t: t.created_at).expires_at) for u, ts in by_user.items()])


@router.post("/tenants/{name}/tokens/{user}/rotate", status_code=201, response_model=TokenOut,
             responses=responses(400, 401, 403, 404, 422),
             summary="Replace a user's tokens by a new one (the old fail from the next request)")
def rotate(name: TenantName, user: UserName, ctx: Ctx, who: Admin, body: TokenIn | None = None) -> TokenOut:
    expires_in = body.expires_in_s if body is not None else None
    now = ctx.clock()
    with ctx.store.session(for_update=True) as s:
        token = rotate_token(s, name, user, now, expires_in)
        record(s, who.actor, "token.rotate", name, f"user={user} expires_in_s={expires_in}", now)
    return TokenOut(tenant=name, token=token, user=user, expires_at=None if expires_in is None else now + expires_in)


@router.delete("/tenants/{name}/tokens/{user}", response_model=Revoked, responses=responses(401, 403, 404, 422),
               summary="Revoke every token of a tenant's user: they fail from the next request")
def revoke(name: TenantName, user: UserName, ctx: Ctx, who: Admin) -> Revoked:
    with ctx.store.session(for_update=True) as s:
        count = revoke_tokens(s, name, user)
        record(s, who.actor, "token.revoke", name, f"user={user} tokens={count}", ctx.clock())
    return Revoked(tenant=name, user=user, revoked=count)


@router.get("/audit", response_model=AuditList, responses=responses(401, 403, 422),
            summary="The admin actions, newest first")
def audit(ctx: Ctx, _who: Admin,
          tenant: Annotated[str | None, Query(max_length=64, description="Only this tenant's.")] = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> AuditList:
    with ctx.store.session() as s:
        rows = audit_log(s, tenant=tenant, limit=limit)
        return AuditList(entries=[AuditOut(at=r.at, actor=r.actor, action=r.action, tenant=r.tenant, detail=r.detail)
                                  for r in rows])


@router.get("/whoami", response_model=WhoAmI, responses=responses(401), summary="What this token acts for")
async def whoami(who: Who) -> WhoAmI:
    return WhoAmI(admin=who.is_admin, tenant=who.tenant, user=who.user or None,
                  gpu_quota=None if who.is_admin else who.gpu_quota, borrow_limit=who.borrow_limit)
