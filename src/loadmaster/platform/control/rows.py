"""Reading the store for one round: the unfinished jobs' scheduling columns, cheaply.

A round reads every job that is not finished (1,200 rows in the benchmark) but never their manifests,
which are parsed once per job and kept (a manifest does not change after submission). Row locking for
the writes that follow is here too, because SQLite and PostgreSQL need different means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, select, update
from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.scheduling.snapshot import TenantQuota

ACTIVE = (JobStatus.QUEUED, JobStatus.DOWNLOADING, JobStatus.PROCESSING, JobStatus.STORING)
ACTIVE_VALUES = tuple(s.value for s in ACTIVE)


_STATUS = {s.value: s for s in JobStatus}


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    tenant_id: int
    status: str
    priority: int
    learners: int
    submitted_at: float
    queued_since: float
    first_started_at: float | None
    attempts: int
    failures: int
    preemptions: int
    allocation: dict[str, Any] | None
    work_done_s: float
    attained_gpu_s: float
    run_started_at: float | None
    last_report_at: float | None
    expected_duration_s: float | None
    halt_requested: bool
    cancel_requested: bool
    target_learners: int | None
    wait_reason: str
    state: JobStatus  # status, parsed once

    def fingerprint(self) -> tuple[object, ...]:
        """What, if changed, may change a decision (progress is not here: it matters only when it moves
        the expected duration, which the monitor reports itself)."""
        return (self.status, self.priority, self.learners, self.halt_requested, self.cancel_requested,
                self.target_learners, self.allocation is None, self.expected_duration_s, self.attempts)


_ALLOCATION = 11  # its position below: read as text and decoded through RowReader's memo
_HALT, _CANCEL = 17, 18
_COLUMNS = (Job.id, Job.tenant_id, Job.status, Job.priority, Job.learners, Job.submitted_at, Job.queued_since,
            Job.first_started_at, Job.attempts, Job.failures, Job.preemptions, cast(Job.allocation, Text),
            Job.work_done_s,
            Job.attained_gpu_s, Job.run_started_at, Job.last_report_at, Job.expected_duration_s,
            Job.halt_requested, Job.cancel_requested, Job.target_learners, Job.wait_reason)
_ACTIVE_QUERY = select(*_COLUMNS).where(Job.status.in_(ACTIVE_VALUES)).order_by(Job.submitted_at, Job.id)


class RowReader:
    """Reads the unfinished jobs for a round. Allocations arrive as JSON text and are decoded once per
    distinct text: most rounds see the same 200 allocations as the last."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._docs: dict[str, dict[str, Any]] = {}
        # The rows of the last read, by their raw values: a row that did not change is the same object
        # (cheap to compare by identity in the snapshot builder's caches).
        self._rows: dict[tuple[Any, ...], JobRow] = {}
        # Compiled once, run as plain SQL: SQLAlchemy's per-row result processing costs more than the
        # query itself at this size (the statement has no parameters, only literal status names).
        self._sql = str(_ACTIVE_QUERY.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}))

    def read(self) -> list[JobRow]:
        """Unfinished jobs (QUEUED, DOWNLOADING, PROCESSING, STORING) in submission order. HALTED jobs wait
        for the user and take no part in scheduling."""
        # Core, not the ORM: a round reads 1,200 rows and needs tuples, not tracked objects.
        with self.store.engine.connect() as conn:
            raw = conn.exec_driver_sql(self._sql).all()
        docs: dict[str, dict[str, Any]] = {}
        rows = []
        seen: dict[tuple[Any, ...], JobRow] = {}
        for r in raw:
            key = tuple(r)
            known = self._rows.get(key)
            if known is not None:
                seen[key] = known
                rows.append(known)
                if known.allocation is not None:
                    docs[key[_ALLOCATION]] = known.allocation
                continue
            values: list[Any] = list(r)
            text = values[_ALLOCATION]
            if text is not None and text != "null":
                doc = self._docs.get(text)
                if doc is None:
                    doc = json.loads(text)
                docs[text] = doc
                values[_ALLOCATION] = doc
            else:
                values[_ALLOCATION] = None
            values[_HALT] = bool(values[_HALT])  # SQLite answers 0/1
            values[_CANCEL] = bool(values[_CANCEL])
            values.append(_STATUS[values[2]])
            row = JobRow(*values)
            seen[key] = row
            rows.append(row)
        self._docs = docs
        self._rows = seen
        return rows


def read_active(store: Store) -> list[JobRow]:
    return RowReader(store).read()


def read_manifests(store: Store, ids: Iterable[str]) -> dict[str, JobManifest]:
    wanted = list(ids)
    out: dict[str, JobManifest] = {}
    with store.session() as s:
        for start in range(0, len(wanted), 500):  # bounded IN lists
            for job_id, doc in s.execute(select(Job.id, Job.manifest).where(Job.id.in_(wanted[start:start + 500]))):
                # Stored manifests were validated at submission; model_construct would skip nested models.
                out[job_id] = JobManifest.model_validate(doc)
    return out


def read_tenants(store: Store) -> tuple[dict[int, str], dict[str, TenantQuota]]:
    with store.session() as s:
        rows = s.execute(select(Tenant.id, Tenant.name, Tenant.gpu_quota, Tenant.borrow_limit)).all()
    names = {tid: name for tid, name, _, _ in rows}
    quotas = {name: TenantQuota(name, int(quota), None if borrow is None else int(borrow))
              for _, name, quota, borrow in rows}
    return names, quotas


def lock_job(s: Session, job_id: str) -> Job | None:
    """The job's row, re-read and locked for the rest of the transaction.

    PostgreSQL: SELECT ... FOR UPDATE. SQLite has no row locks, and its driver starts a transaction only at
    the first write, so a plain read could be stale by the time the write lands: a no-op UPDATE first takes
    the database's write lock, and the read after it sees the latest committed row.
    """
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(Job).where(Job.id == job_id).values(status=Job.status)
                  .execution_options(synchronize_session=False))
    return s.execute(select(Job).where(Job.id == job_id).with_for_update()
                     .execution_options(populate_existing=True)).scalar_one_or_none()
