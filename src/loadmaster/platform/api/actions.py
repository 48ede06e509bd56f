"""User requests on a job, written to the store in one transaction each (the seam with the control loop):

- a QUEUED (or HALTED) job is moved directly: cancel -> CANCELLED, halt -> HALTED, resume -> QUEUED,
  scale -> its size changes;
- a job whose learners are running (DOWNLOADING/PROCESSING/STORING) gets a request flag
  (cancel_requested, halt_requested, target_learners); the caller wakes the loop, which stops or resizes
  the learners and makes the transition when they have exited.

The control loop changes statuses concurrently, so a request reads the job under a lock (SQLite: the write
lock from the transaction's start; PostgreSQL: the row, SELECT ... FOR UPDATE) and decides on what it read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus
from loadmaster.platform.api.errors import ApiError, store_busy
from loadmaster.platform.store.db import Store, transient
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.platform.store.tenants import Principal

T = TypeVar("T")
S = JobStatus


def in_transaction(store: Store, fn: Callable[[Session], T], *, for_update: bool = False, attempts: int = 2) -> T:
    """Run fn in one transaction (for_update: it reads rows and changes them: lock them as it reads). A store
    that stays busy or unreachable (locks held past their timeout, a lost connection, a deadlock) is 503
    with Retry-After: the transaction rolled back, so the client may repeat the request."""
    for attempt in range(attempts):
        try:
            with store.session(for_update=for_update) as s:
                return fn(s)
        except SQLAlchemyError as err:
            if not transient(err):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise store_busy()


def visible_job(s: Session, who: Principal, job_id: str, *, lock: bool = False) -> tuple[Job, str]:
    """The job and its tenant's name, if this principal may see it; 404 otherwise (whether or not it exists).
    lock: hold the job's row until the transaction ends (PostgreSQL; SQLite's session holds the write lock)."""
    q = select(Job, Tenant.name).join(Tenant, Job.tenant_id == Tenant.id).where(Job.id == job_id)
    if not who.is_admin:
        q = q.where(Job.tenant_id == who.tenant_id)
    if lock:
        q = q.with_for_update(of=Job)
    row = s.execute(q).first()
    if row is None:
        raise ApiError(404, f"no job {job_id!r} for this token; `loadmaster job list` shows your jobs",
                       [("job_id", "unknown job")])
    return row[0], row[1]


def _finished(job: Job, verb: str) -> ApiError:
    return ApiError(409, f"job {job.id} is {job.status} already; there is nothing to {verb}",
                    [("job_id", f"job is {job.status}")])


def cancel(s: Session, job: Job, now: float) -> None:
    status = S(job.status)
    if status is S.CANCELLED:
        return
    if status.terminal:
        raise _finished(job, "cancel")
    if status in (S.QUEUED, S.HALTED):
        transition(s, job, S.CANCELLED, now, "cancelled by the user")
    else:
        job.cancel_requested = True


def halt(s: Session, job: Job, now: float) -> None:
    status = S(job.status)
    if status is S.HALTED:
        return
    if status.terminal:
        raise _finished(job, "halt")
    if status is S.STORING:
        raise ApiError(409, f"job {job.id} is STORING its results and can no longer be halted; wait for it to "
                            "complete, or cancel it", [("job_id", "job is STORING")])
    if status is S.QUEUED:
        transition(s, job, S.HALTED, now, "halted by the user")
    else:
        job.halt_requested = True


def resume(s: Session, job: Job, now: float) -> None:
    status = S(job.status)
    if status is not S.HALTED:
        why = "its halt is still in progress; resume it once it is HALTED" if job.halt_requested else \
            "only a HALTED job can be resumed"
        raise ApiError(409, f"job {job.id} is {job.status}: {why}", [("job_id", f"job is {job.status}")])
    job.halt_requested = False
    transition(s, job, S.QUEUED, now, "resumed by the user")


def scale(s: Session, job: Job, learners: int) -> None:
    """A well-formed size the job cannot take is a conflict with the job (409), not a malformed request: the
    same body is right for another job."""
    elastic = job.manifest.get("elastic")
    if not elastic:
        raise ApiError(409, f"learners: job {job.id} is not elastic (its manifest has no elastic section), so its "
                            "size is fixed; submit it with elastic.min_learners/max_learners",
                       [("learners", f"job {job.id} is not elastic")])
    lo, hi = int(elastic["min_learners"]), int(elastic["max_learners"])
    if not lo <= learners <= hi:
        raise ApiError(409, f"learners: must lie between elastic.min_learners ({lo}) and elastic.max_learners "
                            f"({hi}) of job {job.id}; got {learners}",
                       [("learners", f"outside {lo}..{hi}")])
    status = S(job.status)
    if status.terminal:
        raise _finished(job, "scale")
    if status is S.STORING:
        raise ApiError(409, f"job {job.id} is STORING its results; its learners have finished",
                       [("job_id", "job is STORING")])
    if status in (S.QUEUED, S.HALTED):
        # Pinned: the scheduler starts it at this size, neither growing nor shrinking it.
        job.learners = learners
        job.target_learners = learners
    else:
        job.target_learners = None if learners == job.learners else learners
