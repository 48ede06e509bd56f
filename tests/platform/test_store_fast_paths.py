"""The store's fast paths for submissions: the token check's PlainRead and rows inserted at commit
(store/plain_read.py, changes.insert_at_commit, jobs.queue_job), against what the ORM paths give."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from loadmaster.platform.api.batching import GroupCommit
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.changes import read_counters
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job, queue_job
from loadmaster.platform.store.models import Job, Transition
from loadmaster.platform.store.tenants import (
    authenticate,
    authenticate_by,
    create_tenant,
    ensure_admin_token,
    get_tenant,
    revoke_tokens,
    set_quota,
    token_reader,
)

MANIFEST = parse_manifest({"name": "resnet", "command": ["python", "train.py"], "learners": 2,
                           "resources": {"gpus": 2}, "max_runtime_s": 600})


def _tenant(store: Store, name: str = "vision") -> tuple[int, str]:
    with store.session() as s:
        tenant, token = create_tenant(s, name, 8, 2, time.time())
        return tenant.id, token


def test_plain_read_gives_what_the_orm_read_gives_and_sees_every_commit(db_url: str) -> None:
    store = Store.open(db_url)
    _, token = _tenant(store)
    with store.session() as s:
        admin = ensure_admin_token(s, None, time.time())
    assert admin is not None
    reader = store.plain_read(token_reader)
    for t in (token, admin, "lm_nobody"):
        with store.session() as s:
            assert authenticate_by(reader, t) == authenticate(s, t)
    with store.session() as s:  # roots (JSON) and limits changed: the next read has them
        set_quota(s, "vision", 4, 2)
        get_tenant(s, "vision").roots = [{"path": "/srv/data", "writable": False}]
    who = authenticate_by(reader, token)
    assert who is not None and who.gpu_quota == 4 and who.roots == ({"path": "/srv/data", "writable": False},)
    with store.session() as s:
        revoke_tokens(s, "vision", "default")
    assert authenticate_by(reader, token) is None  # revoked: refused at the very next read
    store.close()


def test_plain_read_survives_a_lost_connection_and_closes_with_the_store(pg_url: str) -> None:
    store = Store.open(pg_url)
    _, token = _tenant(store)
    reader = store.plain_read(token_reader)
    assert authenticate_by(reader, token) is not None

    def readers() -> list[int]:
        with store.engine.connect() as c:
            return list(c.scalars(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND pid <> pg_backend_pid()")))

    with store.engine.connect() as c:  # the database restarted, as far as the reader's connection knows
        c.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()"))
    assert authenticate_by(reader, token) is not None  # tried again on a new connection
    assert readers()
    store.close()
    probe = Store.open(pg_url)
    with probe.engine.connect() as c:
        left = c.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND pid <> pg_backend_pid()"))
    probe.close()
    assert left == 0


def _columns(job: Job) -> dict[str, object]:
    return {c.key: getattr(job, c.key) for c in Job.__table__.columns if c.key not in ("id", "change_seq")}


def test_queued_jobs_are_the_rows_add_job_writes_numbered_at_commit(db_url: str) -> None:
    store = Store.open(db_url)
    tid, _ = _tenant(store)
    with store.session() as s:
        reference = add_job(s, tid, MANIFEST, 5.0, job_id="j-orm", user="ann").id
    with store.session() as s:
        returned = [queue_job(s, tid, MANIFEST, 5.0, job_id=f"j-q{i}", user="ann") for i in range(3)]
        assert s.get(Job, "j-q0") is None  # written at commit, not before
    with store.session() as s:
        want = _columns(s.get(Job, reference))  # type: ignore[arg-type]
        counter = read_counters(s.connection())["jobs"]
        for r in returned:
            row = s.get(Job, r.id)
            assert row is not None and _columns(row) == want and _columns(r) == want
            assert row.change_seq == counter  # the batch's number: the control loop reads it in its next round
            history = s.scalars(select(Transition).where(Transition.job_id == r.id)).all()
            assert [(h.from_status, h.to_status, h.at, h.reason) for h in history] == [
                (None, "QUEUED", 5.0, "submitted")]
    store.close()


def test_queued_rows_roll_back_with_their_transaction(db_url: str) -> None:
    store = Store.open(db_url)
    tid, _ = _tenant(store)
    with pytest.raises(RuntimeError), store.session() as s:
        queue_job(s, tid, MANIFEST, 1.0, job_id="j-gone", user="")
        raise RuntimeError("the request failed after queueing")
    with store.session() as s:  # nothing of it, and a later transaction does not write it either
        queue_job(s, tid, MANIFEST, 2.0, job_id="j-kept", user="")
    with store.session() as s:
        assert s.get(Job, "j-gone") is None and s.get(Job, "j-kept") is not None
        assert s.scalar(select(Transition.job_id).where(Transition.job_id == "j-gone")) is None
    store.close()


def test_a_bad_row_in_a_batch_fails_only_its_own_submission(db_url: str) -> None:
    """The rows are written at commit, so one that the database refuses (here a tenant deleted meanwhile)
    fails the batch's commit; each submission is then retried alone and only the bad one fails."""
    store = Store.open(db_url)
    tid, _ = _tenant(store)
    woken: list[int] = []
    commit: GroupCommit[str] = GroupCommit(store, lambda: woken.append(1))

    def good(job_id: str):  # type: ignore[no-untyped-def]
        return lambda s: queue_job(s, tid, MANIFEST, 1.0, job_id=job_id, user="").id

    def bad(s):  # type: ignore[no-untyped-def]
        return queue_job(s, tid + 1000, MANIFEST, 1.0, job_id="j-bad", user="").id

    async def run() -> list[object]:
        return await asyncio.gather(commit.submit(good("j-a")), commit.submit(bad), commit.submit(good("j-b")),
                                    return_exceptions=True)

    a, b, c = asyncio.run(run())
    assert (a, c) == ("j-a", "j-b") and isinstance(b, IntegrityError) and woken
    with store.session() as s:
        assert sorted(s.scalars(select(Job.id))) == ["j-a", "j-b"]
    store.close()


def test_requests_that_ask_together_share_one_token_read_made_after_they_asked(db_url: str) -> None:
    """Authenticator.shared: one read per distinct token for the requests that ask in the same turn of the
    event loop, each answered as its own read would; a revoke before the next turn holds at its requests."""
    from loadmaster.platform.api.context import Authenticator

    store = Store.open(db_url)
    _, token = _tenant(store)
    _, other = _tenant(store, "speech")
    auth = Authenticator(store)
    reads: list[dict[str, object]] = []
    first = auth.reader.first

    def counted(params: dict[str, object]) -> tuple[object, ...] | None:
        reads.append(params)
        return first(params)

    auth.reader.first = counted  # type: ignore[method-assign]

    async def together(*tokens: str) -> list[object]:
        return list(await asyncio.gather(*(auth.shared(t) for t in tokens)))

    answers = asyncio.run(together(*[token] * 10, *[other] * 3, "lm_nobody", "lm_nobody"))
    assert len(reads) == 3  # one per distinct token, not one per request
    assert answers == [authenticate_by(auth.reader, t) for t in [*[token] * 10, *[other] * 3, "lm_nobody", "lm_nobody"]]
    assert answers[0] is not None and answers[10] is not None and answers[-1] is None
    with store.session() as s:
        revoke_tokens(s, "vision", "default")
    assert asyncio.run(together(token, token, other)) == [None, None, answers[10]]  # a new read: the revoke holds

    def broken(params: dict[str, object]) -> None:
        raise OperationalError("SELECT", params, Exception("the store went away"))

    auth.reader.first = broken  # type: ignore[method-assign]

    async def each(*tokens: str) -> list[object]:
        return list(await asyncio.gather(*(auth.shared(t) for t in tokens), return_exceptions=True))

    failed = asyncio.run(each(token, token, other))
    assert all(isinstance(e, OperationalError) for e in failed)  # each request answers the store's error (503)
    store.close()


def test_a_submissions_answer_built_from_its_row_is_the_stored_jobs_summary(db_url: str) -> None:
    """api/models.submitted(): the answer built from queue_row()'s dict, before the commit, says what the job
    read back after it says (the listing's summary of the same job)."""
    from loadmaster.platform.api.models import Submitted, submitted, summary
    from loadmaster.platform.store.jobs import queue_row

    store = Store.open(db_url)
    tid, _ = _tenant(store)
    array = parse_manifest({"name": "sweep", "command": ["python", "train.py"], "array": "0-2",
                            "resources": {"gpus": 3}})
    with store.session() as s:
        single = submitted(queue_row(s, tid, MANIFEST, 5.0, job_id="j-one", user="ann"), "vision", [])
        first = queue_row(s, tid, array.model_copy(update={"array_index": 0, "array_job": "j-arr"}), 6.0,
                          job_id="j-arr", user="")
        in_array = submitted(first, "vision", ["j-arr", "j-arr1"])
    with store.session() as s:
        for answer, job_id, tasks in ((single, "j-one", []), (in_array, "j-arr", ["j-arr", "j-arr1"])):
            stored = s.get(Job, job_id)
            assert stored is not None
            assert answer == Submitted(**summary(stored, "vision").model_dump(), array_tasks=tasks)
    assert single.gpus == 4 and single.user == "ann" and in_array.array_index == 0 and in_array.gpus == 3
    store.close()
