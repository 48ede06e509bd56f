"""Tenants and tokens in the store: tokens are stored hashed, shown once; the admin token bootstraps once."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Token
from loadmaster.platform.store.tenants import (
    NoSuchTenant,
    TenantError,
    TenantExists,
    audit_log,
    authenticate,
    create_tenant,
    delete_tenant,
    ensure_admin_token,
    hash_token,
    issue_token,
    record,
    revoke_tokens,
    rotate_token,
    set_quota,
)


def test_tokens_are_stored_as_their_hash_and_authenticate_their_tenant(db_url: str) -> None:
    store = Store.open(db_url)
    with store.session() as s:
        tenant, token = create_tenant(s, "vision", 8, 4, now=1.0)
    with store.session() as s:
        stored = s.scalars(select(Token.token_hash)).all()
        assert stored == [hash_token(token)] and token not in stored
        who = authenticate(s, token)
        assert who is not None and not who.is_admin
        assert (who.tenant, who.tenant_id, who.gpu_quota, who.borrow_limit, who.max_gpus) == \
            ("vision", tenant.id, 8, 4, 12)
        assert authenticate(s, token + "x") is None
    store.close()


def test_admin_token_is_generated_once_and_printed_once(db_url: str) -> None:
    store = Store.open(db_url)
    with store.session() as s:
        first = ensure_admin_token(s, None, now=1.0)
    assert first is not None and first.startswith("lm_")
    with store.session() as s:
        assert ensure_admin_token(s, None, now=2.0) is None  # a second start has nothing to print
        who = authenticate(s, first)
        assert who is not None and who.is_admin
    store.close()


def test_admin_token_from_the_environment(db_url: str) -> None:
    store = Store.open(db_url)
    secret = "a-long-admin-secret-from-env"
    with store.session() as s:
        assert ensure_admin_token(s, secret, now=1.0) is None  # nothing generated, nothing printed
    with store.session() as s:
        assert ensure_admin_token(s, secret, now=2.0) is None  # idempotent
        who = authenticate(s, secret)
        assert who is not None and who.is_admin
        assert s.scalars(select(Token).where(Token.is_admin.is_(True))).all()[0].token_hash == hash_token(secret)
    with pytest.raises(TenantError, match="too short"), store.session() as s:
        ensure_admin_token(s, "short", now=3.0)
    store.close()


def test_names_limits_and_duplicates_are_checked(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    with store.session() as s:
        create_tenant(s, "nlp", 2, None, now=1.0)
    for name, gpus, borrow, field in [("NLP Team", 1, None, "name"), ("ok", -1, None, "gpus"),
                                      ("ok", 1, -2, "borrow")]:
        with pytest.raises(TenantError) as err, store.session() as s:
            create_tenant(s, name, gpus, borrow, now=1.0)
        assert err.value.field == field
    with pytest.raises(TenantExists), store.session() as s:
        create_tenant(s, "nlp", 2, None, now=1.0)
    with store.session() as s:
        t = set_quota(s, "nlp", 6, 2)
        assert (t.gpu_quota, t.borrow_limit) == (6, 2)
        t = set_quota(s, "nlp", None, None)  # None leaves both as they are
        assert (t.gpu_quota, t.borrow_limit) == (6, 2)
        t = set_quota(s, "nlp", None, None, clear_borrow_limit=True)
        assert (t.gpu_quota, t.borrow_limit) == (6, None)
    with pytest.raises(NoSuchTenant), store.session() as s:
        set_quota(s, "ghost", 1, None)
    store.close()


def test_users_tokens_expire_rotate_revoke_and_tenants_delete(db_url: str) -> None:
    store = Store.open(db_url)
    with store.session() as s:
        tenant, first = create_tenant(s, "speech", 2, None, now=1.0, user="ana")
        brief = issue_token(s, tenant.id, 1.0, user="bo", expires_in_s=10.0)
        record(s, "admin", "tenant.create", "speech", "", 1.0)
    with store.session() as s:
        who = authenticate(s, first, now=2.0)
        assert who is not None and who.user == "ana" and who.actor == "speech/ana"
        assert authenticate(s, brief, now=10.9) is not None and authenticate(s, brief, now=11.0) is None
        new = rotate_token(s, "speech", "ana", now=3.0)
    with store.session() as s:
        assert authenticate(s, first, now=4.0) is None and authenticate(s, new, now=4.0) is not None
        assert revoke_tokens(s, "speech", "ana") == 1
        with pytest.raises(NoSuchTenant):
            revoke_tokens(s, "speech", "ana")
    with store.session() as s:
        assert authenticate(s, new, now=5.0) is None
        with pytest.raises(TenantError, match="expires_in_s"):
            issue_token(s, tenant.id, 1.0, expires_in_s=-1)
        assert delete_tenant(s, "speech") == 0
    with store.session() as s:
        assert authenticate(s, brief, now=5.0) is None  # its tenant is gone
        assert [e.action for e in audit_log(s, tenant="speech")] == ["tenant.create"]
    store.close()
