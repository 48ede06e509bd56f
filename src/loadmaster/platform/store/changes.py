"""Change numbers: every committed write to a job stamps it with a new number, in commit order.

The control loop keeps the unfinished jobs in memory and, each round, reads only the rows whose number
passed the last one it saw (control/table.py), so a round costs what changed, not the size of the queue.
For that a number must never become visible after a larger one: it is taken from a counter row updated
inside the writing transaction, just before its commit. The counter's row lock orders the writers, so a
reader that sees counter value N sees every transaction numbered up to N committed.

Writers need do nothing: the sessions of Store are tracked here (ORM changes to Job and Tenant rows are
noted at each flush and stamped at commit). A Core UPDATE of jobs must call touch() with the ids it changed
(the control loop's progress updates do not: they are its own, kept in its memory, and not a reason to
re-read the row). Rows given to insert_at_commit() are written at commit, job rows with the number.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import Table, bindparam, event, insert, update
from sqlalchemy.orm import Session, sessionmaker

from loadmaster.platform.store.models import Base, Counter, Job, Tenant

JOBS = "jobs"
TENANTS = "tenants"
_TOUCHED = "loadmaster_touched_jobs"  # Session.info keys
_TENANTS = "loadmaster_touched_tenants"
_SEQ = "loadmaster_change_seq"
_NEW = "loadmaster_new_rows"
_CHUNK = 500


def track(sessions: sessionmaker[Session]) -> None:
    """Stamp every job and tenant change made through sessions of this factory."""
    event.listen(sessions, "before_flush", _note)
    event.listen(sessions, "before_commit", _stamp)
    event.listen(sessions, "after_transaction_end", _forget)


def touch(s: Session, job_ids: Iterable[str]) -> None:
    """Jobs changed by a Core statement in this transaction: stamp them at commit."""
    s.info.setdefault(_TOUCHED, set()).update(job_ids)


def insert_at_commit(s: Session, model: type[Base], row: dict[str, Any]) -> None:
    """A row to INSERT when the transaction commits, in one statement with the other rows queued for its
    table (tables in the order first queued: a parent before its children); a job row is stamped with the
    transaction's change number. Rolled back with the transaction (not with a savepoint: queue none in one)."""
    s.info.setdefault(_NEW, {}).setdefault(model, []).append(row)


def number_now(s: Session) -> int:
    """Take this transaction's change number at once (not at commit): every job row it writes is stamped as
    it is flushed, with no UPDATE at the end. For the control loop's own transactions, which write many rows
    and hold the database's lock anyway; the counter's row stays locked until the transaction ends."""
    seq = s.info.get(_SEQ)
    if seq is None:
        seq = s.info[_SEQ] = bump(s, JOBS)
    return int(seq)


_COUNTERS = cast(Table, Counter.__table__)
# Built once and run as Core on the session's connection: through the ORM (update(Counter) in
# Session.execute) the statement was rebuilt and went through the ORM's bulk-update machinery each time,
# a fifth of the GIL time of a 20-client submission burst on PostgreSQL (every commit that numbers rows).
_BUMP = (update(_COUNTERS).where(_COUNTERS.c.name == bindparam("counter")).values(value=_COUNTERS.c.value + 1)
         .returning(_COUNTERS.c.value))


def bump(s: Session, name: str) -> int:
    """The next value of counter `name` (its row stays locked until this transaction ends). Pending ORM
    rows are not flushed first (see _stamp: they are written after, with the number)."""
    value: int = s.connection().execute(_BUMP, {"counter": name}).scalar_one()
    return value


def _note(session: Session, _context: Any, _instances: Any) -> None:
    seq = session.info.get(_SEQ)
    new = session.new  # a fresh IdentitySet at each access: built once, not once per object (10,000 new jobs
    # in one flush took ~10 s in this loop, quadratic)
    for obj in (*new, *session.dirty):
        if isinstance(obj, Job):
            if obj not in new and not session.is_modified(obj):
                continue
            if seq is not None:  # the flush at commit: stamp the row as it is written
                obj.change_seq = seq
            else:
                session.info.setdefault(_TOUCHED, set()).add(obj.id)
        elif isinstance(obj, Tenant):
            session.info[_TENANTS] = True


def _pending_jobs(session: Session) -> bool:
    return Job in session.info.get(_NEW, {}) or any(isinstance(o, Job) for o in session.new) or any(
        isinstance(o, Job) and session.is_modified(o) for o in session.dirty)


def _stamp(session: Session) -> None:
    info = session.info
    if info.get(_SEQ) is not None:  # numbered at its start (number_now): rows were stamped as they were written
        session.flush()
        _insert_queued(session, info[_SEQ])
        ids = sorted(info.get(_TOUCHED, ()))  # Core writes noted with touch()
        for start in range(0, len(ids), _CHUNK):
            session.execute(update(Job).where(Job.id.in_(ids[start:start + _CHUNK])).values(change_seq=info[_SEQ])
                            .execution_options(synchronize_session=False))
        return
    if session.in_nested_transaction():  # a savepoint's commit: not yet
        return
    if not info.get(_TOUCHED) and not _pending_jobs(session):
        if any(isinstance(o, Tenant) for o in (*session.new, *session.dirty)) or info.pop(_TENANTS, False):
            bump(session, TENANTS)
        if _NEW in info:  # rows of other tables (a job row would be a pending job): nothing to number
            session.flush()  # parents the ORM still holds first
            _insert_queued(session, 0)
        return
    # Taken as late as possible: the counter's row lock orders the writers until this commit is done.
    seq = info[_SEQ] = bump(session, JOBS)
    session.flush()  # what is still pending is written with its number (see _note)
    _insert_queued(session, seq)
    ids = sorted(info.get(_TOUCHED, ()))
    for start in range(0, len(ids), _CHUNK):
        session.execute(update(Job).where(Job.id.in_(ids[start:start + _CHUNK])).values(change_seq=seq)
                        .execution_options(synchronize_session=False))
    if info.pop(_TENANTS, False) or any(isinstance(o, Tenant) for o in session.new):
        bump(session, TENANTS)


def _insert_queued(session: Session, seq: int) -> None:
    for model, rows in session.info.pop(_NEW, {}).items():
        if model is Job:
            for row in rows:
                row["change_seq"] = seq
        # The Core table, not the ORM entity: a plain executemany, no ORM bulk machinery.
        session.execute(insert(cast(Table, model.__table__)), rows)


def _forget(session: Session, transaction: Any) -> None:
    if transaction.parent is not None:  # a savepoint: what the transaction noted so far still counts
        return
    for key in (_TOUCHED, _TENANTS, _SEQ, _NEW):
        session.info.pop(key, None)


def read_counters(conn: Any) -> dict[str, int]:
    """The counters as one connection sees them now."""
    return {str(name): int(value) for name, value in conn.execute(Counter.__table__.select())}
