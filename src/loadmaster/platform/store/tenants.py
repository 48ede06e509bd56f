"""Tenants, their GPU quotas, and the API tokens that act for them.

A token is shown once, when it is made, and stored only as its SHA-256: a copy of the database lets nobody
act as a tenant. Tokens are long random strings, so a plain (unsalted) hash is enough and lets a request be
authenticated with one indexed lookup.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from loadmaster.platform.store.models import Tenant, Token

TOKEN_PREFIX = "lm_"
MAX_QUOTA = 1_000_000
TENANT_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_TENANT_NAME = re.compile(TENANT_NAME_PATTERN)


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


def check_limits(gpu_quota: int, borrow_limit: int | None) -> None:
    if not 0 <= gpu_quota <= MAX_QUOTA:
        raise TenantError("gpus", f"gpus (the nominal quota) must be between 0 and {MAX_QUOTA}, got {gpu_quota}")
    if borrow_limit is not None and not 0 <= borrow_limit <= MAX_QUOTA:
        raise TenantError("borrow", f"borrow (the borrowing limit) must be between 0 and {MAX_QUOTA}, or left out "
                                    f"for no limit; got {borrow_limit}")


def create_tenant(s: Session, name: str, gpu_quota: int, borrow_limit: int | None, now: float) -> tuple[Tenant, str]:
    """A new tenant and its first API token (returned in clear text: the only time it exists)."""
    check_name(name)
    check_limits(gpu_quota, borrow_limit)
    if s.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise TenantExists("name", f"tenant {name!r} exists already; choose another name or set its quota")
    tenant = Tenant(name=name, gpu_quota=gpu_quota, borrow_limit=borrow_limit, created_at=now)
    s.add(tenant)
    s.flush()
    return tenant, issue_token(s, tenant.id, now)


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


def issue_token(s: Session, tenant_id: int | None, now: float, *, admin: bool = False) -> str:
    token = new_token()
    s.add(Token(token_hash=hash_token(token), tenant_id=tenant_id, is_admin=admin, created_at=now))
    return token


def authenticate(s: Session, token: str) -> Principal | None:
    """The principal a token acts for, or None for a token nobody issued."""
    row = s.execute(
        select(Token.is_admin, Tenant.id, Tenant.name, Tenant.gpu_quota, Tenant.borrow_limit)
        .outerjoin(Tenant, Token.tenant_id == Tenant.id)
        .where(Token.token_hash == hash_token(token))
    ).first()
    if row is None:
        return None
    is_admin, name, quota, borrow = row[0], row[2], row[3], row[4]
    tenant_id: int | None = row[1]  # an outer join: None when the token has no tenant
    if is_admin:
        return Principal(is_admin=True)
    if tenant_id is None:  # a tenant token whose tenant is gone (cascade should have removed it)
        return None
    return Principal(is_admin=False, tenant_id=tenant_id, tenant=name, gpu_quota=quota, borrow_limit=borrow)


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
