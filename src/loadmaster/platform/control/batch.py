"""One store transaction for a group of hand-offs, and what to do once it has committed (Volcano's
statement: tentative changes, then commit or discard as one).

Every hand-off of the control loop (an attempt starts, ends, is asked to stop; a request is carried out)
is an item of a Batch. An item reads the rows it changes under lock and decides on what it read, writes,
and registers its effects (the loop's memory, signals to learners, launches) with after(); effects run
only once the transaction has committed. So:
- a store error (transient(): locks, a lost connection) fails the whole batch, nothing of it is applied,
  the memory is untouched, and the sources of its items (the executor's unreleased ends, the launcher's
  and the stager's results, the flags in the store) offer them again at the next round: a failed write is
  retried, never dropped;
- any other error in one item (a bug) rolls back that item alone, drops its effects and is logged; the
  others commit. Items run without savepoints first (one write for the whole batch, the cheap common case);
  a batch in which one item fails, or whose write fails, is made again from the start with a savepoint (and
  so a write) per item, which finds the item to blame.

The batch writes its rows itself, as Core statements (store/writes.py), not through the ORM's flush: the
changed columns of the jobs and of the attempts it read, one UPDATE executemany per table, and the rows it
adds (attempts started, history rows: insert(), transition()), one INSERT per table, every job row stamped
with the transaction's change number. A round that ends and starts a few jobs writes each table once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from sqlalchemy import Table, and_, bindparam, select
from sqlalchemy.orm import Session, defer

from loadmaster.core.job import JobStatus
from loadmaster.platform.store.changes import number_now
from loadmaster.platform.store.db import Store, transient
from loadmaster.platform.store.jobs import transition_row
from loadmaster.platform.store.models import Attempt, Job, Tenant, Transition
from loadmaster.platform.store.writes import insert_rows, update_changed

log = logging.getLogger("loadmaster.control")

T = TypeVar("T")
Effect = Callable[[], None]

# Built once: a round's prefetch runs it with its ids (building it anew each round cost more than running it
# for a handful of jobs). The jobs, their tenants and their open attempts in one statement (one round trip on
# PostgreSQL instead of three); only the jobs' rows are locked (FOR UPDATE OF jobs: the outer join's nullable
# side cannot be, and a start reads its tenant's row unlocked, as tenant() does).
# The manifest is not read: no hand-off reads it from the row (the loop keeps every job's, parsed), and decoding
# its JSON was most of the cost of loading a job.
_JOBS = select(Job, Tenant, Attempt).join(Tenant, Tenant.id == Job.tenant_id) \
    .outerjoin(Attempt, and_(Attempt.job_id == Job.id, Attempt.ended_at.is_(None))) \
    .where(Job.id.in_(bindparam("ids", expanding=True))).with_for_update(of=Job) \
    .options(defer(Job.manifest)).execution_options(populate_existing=True)


ATTEMPTS = cast(Table, Attempt.__table__)
TRANSITIONS = cast(Table, Transition.__table__)


class _Careful(Exception):
    """An item failed in a batch made without savepoints: make it again, with them."""


class Batch:
    def __init__(self, s: Session, now: float, careful: bool = True) -> None:
        self.s = s
        self.now = now
        self.careful = careful  # a savepoint per item
        self._effects: list[Effect] = []
        self._claimed: set[str] = set()
        self._fetched: set[str] = set()
        self._rows: list[Job] = []  # the session keeps rows only weakly: prefetched ones are held here
        self._open: dict[tuple[str, int], Attempt] = {}  # prefetched open attempts
        self._tenants: dict[int, Tenant] = {}
        self.failed: list[str] = []  # items rolled back by an error that is not the store's
        self._inserts: dict[Table, list[dict[str, Any]]] = {}  # rows to add, written by write()

    def after(self, effect: Effect) -> None:
        """Run `effect` once the transaction has committed (never if it does not)."""
        self._effects.append(effect)

    def insert(self, table: Table, row: dict[str, Any]) -> None:
        """A row to add, written with the batch's other writes (every row of a table with the same keys)."""
        self._inserts.setdefault(table, []).append(row)

    def transition(self, job: Job, new: JobStatus, reason: str) -> None:
        """Move the job to `new` (store/jobs.py's one transition table) and add its history row."""
        self.insert(TRANSITIONS, transition_row(job, new, self.now, reason))

    def write(self) -> None:
        """Write what the items so far changed and added: the jobs' and attempts' changed columns (one UPDATE
        per table), then the added rows (one INSERT per table). The objects written leave the session: a
        later read in this batch reads them again (locked already)."""
        s = self.s
        dirty = s.dirty  # a new set at each access
        jobs = [o for o in dirty if isinstance(o, Job)]
        if jobs:
            update_changed(s, jobs, {"change_seq": number_now(s)})
            self._fetched.difference_update(j.id for j in jobs if j not in s)
        attempts = [o for o in dirty if isinstance(o, Attempt)]
        if attempts:
            update_changed(s, attempts)
            for a in attempts:
                if a not in s:
                    self._open.pop((a.job_id, a.number), None)
        inserts, self._inserts = self._inserts, {}
        for table, rows in inserts.items():
            insert_rows(s, table, rows)

    def claim(self, job_id: str) -> bool:
        """At most one hand-off per job and batch moves it: the next round sees where the first left it."""
        if job_id in self._claimed:
            return False
        self._claimed.add(job_id)
        return True

    def pass_on(self, job_id: str) -> None:
        """The hand-off that claimed the job lets a second one of the same item move it on from where it left
        it (a launch confirmed and its end recorded together)."""
        self._claimed.discard(job_id)

    def each(self, items: Iterable[T], fn: Callable[[Batch, T], None], what: Callable[[T], str] = str) -> None:
        """fn(batch, item) for every item, each in a savepoint of its own (when careful)."""
        if not self.careful:
            for item in items:
                try:
                    fn(self, item)
                except Exception as err:
                    if transient(err):
                        raise
                    raise _Careful(what(item)) from err
            try:
                self.write()  # every item's writes at once: one statement per table
                self.s.flush()  # anything else the items added through the ORM
            except Exception as err:
                if transient(err):
                    raise
                raise _Careful("the batch's writes") from err
            return
        for item in items:
            mark = len(self._effects)
            claimed = set(self._claimed)
            savepoint = self.s.begin_nested()
            try:
                fn(self, item)
                self.write()
                savepoint.commit()
            except Exception as err:
                if transient(err):
                    raise  # the store is in trouble: the whole batch is tried again at the next round
                # Rolled back even when inactive: a failed flush leaves the savepoint deactivated (not
                # closed), and the session takes no further statement until it is.
                savepoint.rollback()
                self._inserts.clear()
                del self._effects[mark:]
                self._claimed = claimed
                self.failed.append(what(item))
                log.exception("control loop: %s failed and was rolled back; it is tried again at the next round",
                              what(item))

    def prefetch(self, job_ids: Iterable[str]) -> None:
        """Read and lock these jobs' rows now, in a few statements rather than one each."""
        wanted = sorted(set(job_ids) - self._fetched)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for job, tenant, attempt in self.s.execute(_JOBS, {"ids": chunk}):
                self._rows.append(job)
                self._tenants[tenant.id] = tenant
                if attempt is not None:
                    self._open[(attempt.job_id, attempt.number)] = attempt
            self._fetched.update(chunk)

    def job(self, job_id: str) -> Job | None:
        """The job's row, re-read and locked until the transaction ends (PostgreSQL: FOR UPDATE; SQLite: the
        batch holds the database's write lock from its BEGIN)."""
        if job_id in self._fetched:
            return self.s.get(Job, job_id)
        return self.s.execute(select(Job).where(Job.id == job_id).with_for_update().options(defer(Job.manifest))
                              .execution_options(populate_existing=True)).scalar_one_or_none()

    def attempt(self, job_id: str, number: int) -> Attempt | None:
        found = self._open.get((job_id, number))
        if found is not None:
            return found
        return self.s.execute(select(Attempt).where(Attempt.job_id == job_id, Attempt.number == number)
                              ).scalar_one_or_none()

    def tenant(self, tenant_id: int) -> Tenant:
        """The tenant's row, read once per batch however many of its jobs the batch starts (held here: the
        session keeps rows only weakly), without flushing what the batch wrote so far (one flush at the end)."""
        found = self._tenants.get(tenant_id)
        if found is None:
            with self.s.no_autoflush:
                found = self.s.get_one(Tenant, tenant_id)
            self._tenants[tenant_id] = found
        return found

    def run_effects(self) -> None:
        for effect in self._effects:
            try:
                effect()
            except Exception:  # the store has it; reconciliation repairs what the memory missed
                log.exception("control loop: an effect after commit failed")
        self._effects.clear()


def commit(store: Store, now: float, fill: Callable[[Batch], None]) -> Batch:
    """fill() a batch inside one transaction, commit it, then run its effects. Raises the store's error when
    the transaction cannot be made (nothing applied, no effect run)."""
    try:
        batch = _made(store, now, fill, careful=False)
    except _Careful as failed:
        log.warning("control loop: %s failed; its batch is made again item by item", failed)
        batch = _made(store, now, fill, careful=True)
    batch.run_effects()
    return batch


def _made(store: Store, now: float, fill: Callable[[Batch], None], careful: bool) -> Batch:
    with store.session(for_update=True) as s:
        number_now(s)  # its rows are stamped as they are written (store/changes.py)
        batch = Batch(s, now, careful)
        fill(batch)
        try:
            batch.write()  # what fill() changed outside each()
        except Exception as err:
            if transient(err) or careful:
                raise
            raise _Careful("the batch's writes") from err
    return batch
