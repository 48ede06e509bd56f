from __future__ import annotations

import pytest

from loadmaster.core.job import IllegalTransition, JobStatus
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store, StoreError
from loadmaster.platform.store.jobs import add_job, transition
from loadmaster.platform.store.models import Job, Tenant, Transition


def _tenant(store: Store) -> int:
    with store.session() as s:
        t = Tenant(name="vision", gpu_quota=8, borrow_limit=None, created_at=0.0)
        s.add(t)
        s.flush()
        return t.id


def test_migrations_create_every_table_and_are_idempotent(db_url: str) -> None:
    store = Store.open(db_url)
    expected = {"tenants", "tokens", "jobs", "transitions", "attempts", "estimates", "alembic_version"}
    assert expected <= set(store.tables())
    store.close()
    Store.open(db_url).close()  # a second start migrates nothing and fails nothing


def test_the_migrations_make_the_schema_the_models_describe(db_url: str) -> None:
    # Every model column, index and type has its migration (0007: jobs.smoke_passed, attempts.smoke_test_s),
    # and the migrations make nothing the models lack.
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from loadmaster.platform.store.models import Base

    store = Store.open(db_url)
    try:
        with store.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata) == []
    finally:
        store.close()


def test_every_status_change_is_recorded_with_time_and_reason(db_url: str) -> None:
    store = Store.open(db_url)
    tid = _tenant(store)
    m = parse_manifest({"name": "resnet", "command": "python train.py", "learners": 2})
    with store.session() as s:
        job_id = add_job(s, tid, m, now=10.0).id
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobStatus.PROCESSING, 12.0, "started on node-0")
        transition(s, job, JobStatus.COMPLETED, 20.0, "all learners exited 0")
    with store.session() as s:
        rows = s.query(Transition).filter_by(job_id=job_id).order_by(Transition.id).all()
        assert [(r.from_status, r.to_status, r.at) for r in rows] == [
            (None, "QUEUED", 10.0), ("QUEUED", "PROCESSING", 12.0), ("PROCESSING", "COMPLETED", 20.0)]
        job = s.get(Job, job_id)
        assert job is not None and job.finished_at == 20.0 and job.manifest["learners"] == 2
    store.close()


def test_an_illegal_transition_changes_nothing(db_url: str) -> None:
    store = Store.open(db_url)
    tid = _tenant(store)
    with store.session() as s:
        job_id = add_job(s, tid, parse_manifest({"name": "x", "command": ["true"]}), now=1.0).id
    with pytest.raises(IllegalTransition), store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobStatus.CANCELLED, 2.0, "user")
        transition(s, job, JobStatus.PROCESSING, 3.0, "illegal: CANCELLED is terminal")
    with store.session() as s:  # the whole transaction rolled back: still QUEUED, one history row
        job = s.get(Job, job_id)
        assert job is not None and job.status == "QUEUED"
        assert s.query(Transition).filter_by(job_id=job_id).count() == 1
    store.close()


def test_a_bad_url_names_the_fix() -> None:
    with pytest.raises(StoreError, match="sqlite:///PATH or postgresql://"):
        Store.open("not a url")
    with pytest.raises(StoreError, match="only sqlite:// and postgresql://"):
        Store.open("mysql://localhost/x")
    with pytest.raises(StoreError, match="cannot open the store"):
        Store.open("postgresql://postgres@127.0.0.1:1/nothing")


def test_read_modify_write_sessions_lose_no_update(db_url: str) -> None:
    import threading

    from sqlalchemy import select

    store = Store.open(db_url)
    tid = _tenant(store)
    with store.session() as s:
        job_id = add_job(s, tid, parse_manifest({"name": "x", "command": ["true"]}), now=1.0).id

    def bump() -> None:
        for _ in range(20):
            with store.session(for_update=True) as s:
                job = s.scalars(select(Job).where(Job.id == job_id).with_for_update()).one()
                job.preemptions = job.preemptions + 1

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.preemptions == 80 and job.allocation is None
        assert s.scalars(select(Job.id).where(Job.allocation.is_(None))).all() == [job_id]  # SQL NULL, not 'null'
    store.close()


def test_a_pooled_postgresql_connection_idle_past_the_limit_is_pinged_and_replaced(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """store/db._ping_when_idle: a connection that waited in the pool is pinged before use (a lost one is
    replaced, nobody sees an error); one just handed back is not, and if it was lost meanwhile its
    transaction fails with a transient() error, after which the pool has dropped the stale connections."""
    from sqlalchemy import select, text
    from sqlalchemy.exc import SQLAlchemyError

    from loadmaster.platform.store import db

    store = Store.open(pg_url)

    def kill_connections() -> None:  # from outside the pool: every pooled connection is lost
        killer = Store.open(pg_url, migrate_schema=False)
        with killer.engine.connect() as c:
            c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND pid <> pg_backend_pid()"))
        killer.close()

    def one() -> int | None:
        with store.session() as s:
            return s.scalar(select(1))

    assert one() == 1
    monkeypatch.setattr(db, "IDLE_PING_S", 0.0)  # every pooled connection counts as idle: pinged
    kill_connections()
    assert one() == 1
    monkeypatch.setattr(db, "IDLE_PING_S", 3600.0)  # none counts as idle: not pinged
    kill_connections()
    with pytest.raises(SQLAlchemyError) as lost:
        one()
    assert db.transient(lost.value)
    assert one() == 1  # the stale connections were dropped with the failure
    store.close()


def test_reads_without_a_transaction_see_each_commit_and_keep_the_lock_timeout(pg_url: str) -> None:
    store = Store.open(pg_url)
    try:
        with store.reading() as conn:
            # Autocommit: no transaction held open between the loop's reads (no BEGIN, no ROLLBACK round trip).
            assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == "5s"
            assert conn.exec_driver_sql("SELECT count(*) FROM tenants").scalar() == 0
            with store.session() as s:
                s.add(Tenant(name="t", gpu_quota=1, created_at=0.0))
            assert conn.exec_driver_sql("SELECT count(*) FROM tenants").scalar() == 1
            assert conn.connection.driver_connection.autocommit  # type: ignore[union-attr]
    finally:
        store.close()
