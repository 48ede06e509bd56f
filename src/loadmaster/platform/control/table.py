"""The unfinished jobs as the control loop knows them: a copy of their scheduling columns, kept current by
reading only the rows changed since the last read.

Every committed change to a job stamps it with a change number (store/changes.py); the table remembers the
highest number it has read and, each round, asks the counter first: an idle round costs one tiny query, and
a round after changes reads those rows alone (10,000 queued jobs are read once, at start). A row that left
the unfinished statuses leaves the table. Manifests are not columns here: they are parsed once per job and
kept (a manifest does not change after submission).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Text, bindparam, cast, select

from loadmaster.core.job import JobStatus
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.changes import JOBS, TENANTS, read_counters
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Counter, Job, Tenant
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

    @property
    def requested(self) -> bool:
        """A user's request waits for the loop: a cancel, a halt, or a size."""
        return self.cancel_requested or self.halt_requested or self.target_learners is not None


_ALLOCATION = 11  # its position below: read as text and decoded through the table's memo
_HALT, _CANCEL = 17, 18
_COLUMNS = (Job.id, Job.tenant_id, Job.status, Job.priority, Job.learners, Job.submitted_at, Job.queued_since,
            Job.first_started_at, Job.attempts, Job.failures, Job.preemptions, cast(Job.allocation, Text),
            Job.work_done_s, Job.attained_gpu_s, Job.run_started_at, Job.last_report_at, Job.expected_duration_s,
            Job.halt_requested, Job.cancel_requested, Job.target_learners, Job.wait_reason)
_ACTIVE_QUERY = select(*_COLUMNS).where(Job.status.in_(ACTIVE_VALUES)).order_by(Job.submitted_at, Job.id)
_COUNTERS = Counter.__table__.alias("jobs_counter")
_TENANTS_COUNTER = select(Counter.value).where(Counter.name == TENANTS).scalar_subquery()
# The counters and the rows numbered above the last read in one statement, so one snapshot: a row numbered k
# is visible only once its transaction committed, after it set the counter to k under the counter's row lock,
# so every row at or below the counter read here is read here too. One round trip instead of two each round
# (the join's empty side, id NULL, is the row an unchanged table answers).
_SYNC_QUERY = (select(_COUNTERS.c.value, _TENANTS_COUNTER, *_COLUMNS)
               .select_from(_COUNTERS.outerjoin(Job.__table__, Job.change_seq > bindparam("seq")))
               .where(_COUNTERS.c.name == JOBS).order_by(Job.change_seq))


@dataclass
class Delta:
    """What one sync() found."""

    changed: list[str] = field(default_factory=list)  # rows added or changed, still unfinished
    gone: list[str] = field(default_factory=list)  # rows that left the unfinished statuses
    tenants: int | None = None  # the tenants' counter when it moved (their limits changed): see tenants_read()
    read: int = 0  # rows read

    @property
    def empty(self) -> bool:
        return not (self.changed or self.gone or self.tenants is not None)


class JobTable:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.rows: dict[str, JobRow] = {}
        self.requested: set[str] = set()  # ids of rows with a user's request pending (JobRow.requested)
        self.seq = -1  # the highest change number read; -1: never read
        self.tenants_seq = -1
        self._docs: dict[str, dict[str, Any]] = {}  # allocation text -> document
        # Compiled once, run as plain SQL: SQLAlchemy's per-row result processing costs more than the
        # query itself for thousands of rows (the statement has no parameters, only literal status names).
        self._active_sql = str(_ACTIVE_QUERY.compile(dialect=store.engine.dialect,
                                                     compile_kwargs={"literal_binds": True}))

    def sync(self) -> Delta:
        """Bring the table up to date: every unfinished row at the first call, the changed ones after."""
        delta = Delta()
        raw: list[Any]
        with self.store.reading() as conn:
            if self.seq < 0:
                # The counters first: every change numbered up to what they say has committed, so nothing
                # numbered at or below them is missed by the read that follows (a newer row read early is
                # read again next time, harmlessly).
                counters = read_counters(conn)
                seq, tenants = counters.get(JOBS, 0), counters.get(TENANTS, 0)
                raw = list(conn.exec_driver_sql(self._active_sql).all())
                self.rows.clear()
                self.requested.clear()
            else:
                found = conn.execute(_SYNC_QUERY, {"seq": self.seq}).all()
                if not found:
                    raise RuntimeError("the store has no 'jobs' counter row (its migration 0003 inserts it)")
                seq, tenants = int(found[0][0]), int(found[0][1] or 0)
                raw = [r[2:] for r in found if r[2] is not None]
        delta.read = len(raw)
        for values in raw:
            row = self._row(values)
            if row.state in ACTIVE:
                self.rows[row.id] = row
                delta.changed.append(row.id)
                if row.requested:
                    self.requested.add(row.id)
                else:
                    self.requested.discard(row.id)
            elif self.rows.pop(row.id, None) is not None:
                self.requested.discard(row.id)
                delta.gone.append(row.id)
        self.seq = seq
        if tenants != self.tenants_seq:
            delta.tenants = tenants
        return delta

    def tenants_read(self, seq: int) -> None:
        """The caller has read the tenants as of counter `seq` (until then every sync reports them moved)."""
        self.tenants_seq = seq

    def note_wait_reasons(self, reasons: dict[str, str]) -> None:
        """The loop wrote these wait reasons (unstamped: store/changes.py): keep the copy equal to the store."""
        for job_id, reason in reasons.items():
            row = self.rows.get(job_id)
            if row is not None and row.state is JobStatus.QUEUED:
                self.rows[job_id] = replace(row, wait_reason=reason)

    def _row(self, raw: Any) -> JobRow:
        values: list[Any] = list(raw)
        text = values[_ALLOCATION]
        if text is not None and text != "null":
            doc = self._docs.get(text)
            if doc is None:
                if len(self._docs) > 50_000:  # bounded: allocations of jobs long gone are not kept
                    self._docs.clear()
                doc = self._docs[text] = json.loads(text)
            values[_ALLOCATION] = doc
        else:
            values[_ALLOCATION] = None
        values[_HALT] = bool(values[_HALT])  # SQLite answers 0/1
        values[_CANCEL] = bool(values[_CANCEL])
        values.append(_STATUS[values[2]])
        return JobRow(*values)


def read_manifests(store: Store, ids: Iterable[str]) -> dict[str, JobManifest]:
    wanted = list(ids)
    out: dict[str, JobManifest] = {}
    with store.reading() as conn:
        for start in range(0, len(wanted), 500):  # bounded IN lists
            for job_id, doc in conn.execute(select(Job.id, Job.manifest).where(Job.id.in_(wanted[start:start + 500]))):
                # Stored manifests were validated at submission; model_construct would skip nested models.
                out[job_id] = JobManifest.model_validate(doc)
    return out


def read_tenants(store: Store) -> tuple[dict[int, str], dict[str, TenantQuota]]:
    with store.reading() as conn:
        rows = conn.execute(select(Tenant.id, Tenant.name, Tenant.gpu_quota, Tenant.borrow_limit)).all()
    names = {tid: name for tid, name, _, _ in rows}
    quotas = {name: TenantQuota(name, int(quota), None if borrow is None else int(borrow))
              for _, name, quota, borrow in rows}
    return names, quotas
