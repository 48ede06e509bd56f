"""Tenants, their GPU quotas, roots and OS users, the API tokens of their named users, and the audit log.

Every request looks its token up in the store (one indexed read, no memo): a revoked, rotated or expired
token, or one deleted by hand, fails at its next request.

A token is shown once, when it is made, and stored only as its SHA-256: a copy of the database lets nobody
act as a tenant. Tokens are long random strings, so a plain (unsalted) hash is enough and lets a request be
authenticated with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, select
from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus
from loadmaster.platform.store.models import Attempt, AuditEntry, Estimate, Job, Tenant, Token, Transition
from loadmaster.platform.store.plain_read import PlainRead

TOKEN_PREFIX = "lm_"
MAX_QUOTA = 1_000_000
TENANT_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_TENANT_NAME = re.compile(TENANT_NAME_PATTERN)
USER_NAME_PATTERN = r"^[a-z0-9][a-z0-9._@-]{0,63}$"
_USER_NAME = re.compile(USER_NAME_PATTERN)
DEFAULT_USER = "default"
MAX_TOKEN_LIFE_S = 10 * 365 * 86400.0


class TenantError(ValueError):
    """A tenant request that cannot be carried out. `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class TenantExists(TenantError):
    pass


class NoSuchTenant(TenantError):
    pass


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for: the admin, or one tenant with its limits as they were when it was read."""

    is_admin: bool
    tenant_id: int | None = None
    tenant: str | None = None
    gpu_quota: int = 0
    borrow_limit: int | None = None
    user: str = ""  # the tenant's named user the token belongs to
    roots: tuple[dict[str, object], ...] = ()  # the tenant's roots as stored (tenancy.Root.from_dict)

    @property
    def actor(self) -> str:
        return "admin" if self.is_admin else f"{self.tenant}/{self.user}"

    @property
    def max_gpus(self) -> int | None:
        """The most GPUs this tenant's jobs may ever hold together (None: no limit beyond the cluster)."""
        return None if self.borrow_limit is None else self.gpu_quota + self.borrow_limit


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    if not _TENANT_NAME.match(name):
        raise TenantError("name", f"tenant name {name!r} is not valid: use 1-64 lower-case letters, digits, '.', "
                                  "'_' or '-', starting with a letter or digit")
    return name


def check_user(user: str) -> str:
    if not _USER_NAME.match(user):
        raise TenantError("user", f"user name {user!r} is not valid: use 1-64 lower-case letters, digits, '.', "
                                  "'_', '@' or '-', starting with a letter or digit")
    return user


def check_limits(gpu_quota: int, borrow_limit: int | None) -> None:
    if not 0 <= gpu_quota <= MAX_QUOTA:
        raise TenantError("gpus", f"gpus (the nominal quota) must be between 0 and {MAX_QUOTA}, got {gpu_quota}")
    if borrow_limit is not None and not 0 <= borrow_limit <= MAX_QUOTA:
        raise TenantError("borrow", f"borrow (the borrowing limit) must be between 0 and {MAX_QUOTA}, or left out "
                                    f"for no limit; got {borrow_limit}")


def create_tenant(s: Session, name: str, gpu_quota: int, borrow_limit: int | None, now: float, *,
                  user: str = DEFAULT_USER, os_user: tuple[str, int, int] | None = None) -> tuple[Tenant, str]:
    """A new tenant and its first user's API token (returned in clear text: the only time it exists).
    os_user: (name, uid, gid) its learners run as when the server runs as root."""
    check_name(name)
    check_limits(gpu_quota, borrow_limit)
    check_user(user)
    if s.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise TenantExists("name", f"tenant {name!r} exists already; choose another name or set its quota")
    tenant = Tenant(name=name, gpu_quota=gpu_quota, borrow_limit=borrow_limit, created_at=now)
    if os_user is not None:
        tenant.os_user, tenant.os_uid, tenant.os_gid = os_user
    s.add(tenant)
    s.flush()
    return tenant, issue_token(s, tenant.id, now, user=user)


def delete_tenant(s: Session, name: str) -> int:
    """Delete a tenant with its tokens and its finished jobs' records; refused while it has unfinished jobs.
    The number of jobs deleted."""
    tenant = get_tenant(s, name)
    terminal = [st.value for st in JobStatus if st.terminal]
    busy = s.scalar(select(Job.id).where(Job.tenant_id == tenant.id, Job.status.not_in(terminal)).limit(1))
    if busy is not None:
        raise TenantError("name", f"tenant {name!r} has unfinished jobs (e.g. {busy}); cancel them first "
                                  "(`loadmaster job cancel`), then delete the tenant")
    jobs = select(Job.id).where(Job.tenant_id == tenant.id).scalar_subquery()
    for table in (Transition, Attempt, Estimate):
        s.execute(delete(table).where(table.job_id.in_(jobs)))
    count = len(s.scalars(select(Job.id).where(Job.tenant_id == tenant.id)).all())
    s.execute(delete(Job).where(Job.tenant_id == tenant.id))
    s.execute(delete(Token).where(Token.tenant_id == tenant.id))
    s.delete(tenant)
    return count


def get_tenant(s: Session, name: str) -> Tenant:
    tenant = s.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise NoSuchTenant("name", f"no tenant named {name!r}; `loadmaster tenant list` shows them")
    return tenant


def list_tenants(s: Session) -> list[Tenant]:
    return list(s.scalars(select(Tenant).order_by(Tenant.name)))


def set_quota(s: Session, name: str, gpu_quota: int | None, borrow_limit: int | None, *,
              clear_borrow_limit: bool = False) -> Tenant:
    """Change a tenant's limits; None leaves a value as it is (clear_borrow_limit: borrow without limit)."""
    tenant = get_tenant(s, name)
    quota = tenant.gpu_quota if gpu_quota is None else gpu_quota
    borrow = None if clear_borrow_limit else (tenant.borrow_limit if borrow_limit is None else borrow_limit)
    check_limits(quota, borrow)
    tenant.gpu_quota, tenant.borrow_limit = quota, borrow
    return tenant


def _expiry(now: float, expires_in_s: float | None) -> float | None:
    if expires_in_s is None:
        return None
    if not 0 < expires_in_s <= MAX_TOKEN_LIFE_S:
        raise TenantError("expires_in_s", f"expires_in_s must be more than 0 and at most {MAX_TOKEN_LIFE_S:g} "
                                          f"(ten years), or left out for a token that lives until revoked; got "
                                          f"{expires_in_s:g}")
    return now + expires_in_s


def issue_token(s: Session, tenant_id: int | None, now: float, *, admin: bool = False, user: str = DEFAULT_USER,
                expires_in_s: float | None = None) -> str:
    token = new_token()
    s.add(Token(token_hash=hash_token(token), tenant_id=tenant_id, is_admin=admin, created_at=now,
                user="admin" if admin else check_user(user), expires_at=_expiry(now, expires_in_s)))
    return token


def revoke_tokens(s: Session, name: str, user: str) -> int:
    """Delete every token of the tenant's user: they fail from the next request on. The number revoked."""
    tenant = get_tenant(s, name)
    found = s.scalars(select(Token.id).where(Token.tenant_id == tenant.id, Token.user == user)).all()
    if not found:
        raise NoSuchTenant("user", f"tenant {name!r} has no user {user!r} with a token; `loadmaster tenant token "
                                   f"list {name}` shows them")
    s.execute(delete(Token).where(Token.id.in_(found)))
    return len(found)


def rotate_token(s: Session, name: str, user: str, now: float, expires_in_s: float | None = None) -> str:
    """A new token for the user, its old ones revoked in the same transaction."""
    tenant = get_tenant(s, name)
    revoke_tokens(s, name, user)
    return issue_token(s, tenant.id, now, user=user, expires_in_s=expires_in_s)


def list_users(s: Session, name: str) -> list[Token]:
    tenant = get_tenant(s, name)
    return list(s.scalars(select(Token).where(Token.tenant_id == tenant.id).order_by(Token.user, Token.id)))


def record(s: Session, actor: str, action: str, tenant: str, detail: str, now: float) -> None:
    """Append an admin action to the audit log (in the transaction of the action itself)."""
    s.add(AuditEntry(at=now, actor=actor, action=action, tenant=tenant, detail=detail))


def audit_log(s: Session, *, tenant: str | None = None, limit: int = 100) -> list[AuditEntry]:
    q = select(AuditEntry).order_by(AuditEntry.at.desc(), AuditEntry.id.desc()).limit(limit)
    if tenant is not None:
        q = q.where(AuditEntry.tenant == tenant)
    return list(s.scalars(q))


# Built once: every request reads it (its construction cost more than the indexed read itself).
_BY_HASH = (select(Token.is_admin, Tenant.id, Tenant.name, Tenant.gpu_quota, Tenant.borrow_limit, Token.user,
                   Token.expires_at, Tenant.roots)
            .outerjoin(Tenant, Token.tenant_id == Tenant.id)
            .where(Token.token_hash == bindparam("digest")))


def authenticate(s: Session | Connection, token: str, now: float | None = None) -> Principal | None:
    """The principal a token acts for, or None for a token nobody issued, revoked or expired (as of `now`,
    default the time now). `s`: a session, or a plain connection."""
    return _principal(s.execute(_BY_HASH, {"digest": hash_token(token)}).first(), now)


def token_reader(engine: Engine) -> PlainRead:
    """The token check as a PlainRead (the API's per-request check: no pool, no ORM; authenticate_by)."""
    return PlainRead(engine, _BY_HASH)


def authenticate_by(reader: PlainRead, token: str, now: float | None = None) -> Principal | None:
    """authenticate() through token_reader()'s read: one indexed read that sees every commit before it."""
    return authenticate_digest(reader, hash_token(token), now)


def authenticate_digest(reader: PlainRead, digest: str, now: float | None = None) -> Principal | None:
    """authenticate_by() for a token already hashed (hash_token): one read answers every request with it."""
    return _principal(reader.first({"digest": digest}), now)


def _principal(row: Sequence[Any] | None, now: float | None) -> Principal | None:
    if row is None:
        return None
    now = time.time() if now is None else now
    is_admin, name, quota, borrow, user, expires_at, roots = row[0], row[2], row[3], row[4], row[5], row[6], row[7]
    tenant_id: int | None = row[1]  # an outer join: None when the token has no tenant
    if expires_at is not None and expires_at <= now:
        return None
    if is_admin:
        return Principal(is_admin=True, user="admin")
    if tenant_id is None:  # a tenant token whose tenant is gone (cascade should have removed it)
        return None
    return Principal(is_admin=False, tenant_id=tenant_id, tenant=name, gpu_quota=quota, borrow_limit=borrow,
                     user=user, roots=tuple(roots or ()))


def ensure_admin_token(s: Session, from_env: str | None, now: float) -> str | None:
    """Make sure an admin token exists. With `from_env` (LOADMASTER_ADMIN_TOKEN) that token is an admin token
    (stored hashed, added if new). Without it, the first start generates one and returns it so that the
    server prints it once; later starts return None (the hash alone is kept, the token cannot be shown again).
    """
    if from_env is not None:
        if len(from_env) < 16:
            raise TenantError("LOADMASTER_ADMIN_TOKEN", "LOADMASTER_ADMIN_TOKEN is too short to be a secret: use "
                                                        "at least 16 random characters (or unset it to have one "
                                                        "generated)")
        digest = hash_token(from_env)
        existing = s.scalar(select(Token).where(Token.token_hash == digest))
        if existing is None:
            s.add(Token(token_hash=digest, tenant_id=None, is_admin=True, created_at=now))
        elif not existing.is_admin:
            raise TenantError("LOADMASTER_ADMIN_TOKEN", "LOADMASTER_ADMIN_TOKEN equals a tenant's token: choose "
                                                        "another secret for the admin")
        return None
    if s.scalar(select(Token.id).where(Token.is_admin.is_(True)).limit(1)) is not None:
        return None
    return issue_token(s, None, now, admin=True)
