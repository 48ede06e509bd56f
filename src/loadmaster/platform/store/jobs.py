"""The writes every status change goes through: one transition table (core/job.py), persisted with its time
and reason in the same transaction as the change itself.

Only a job whose learners may run (DOWNLOADING, PROCESSING) books GPUs: every other status leaves its
allocation empty, here, whatever the caller forgot (a queued job holds no GPU, ever)."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus, check_transition
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.changes import insert_at_commit
from loadmaster.platform.store.models import Job, Transition

BOOKING = frozenset({JobStatus.DOWNLOADING, JobStatus.PROCESSING})  # the statuses that hold an allocation


def new_job_id() -> str:
    # Random, not sequential: ids are handed to tenants and must not reveal how busy others are.
    return "j-" + secrets.token_hex(6)


def add_job(s: Session, tenant_id: int, manifest: JobManifest, now: float, *, job_id: str | None = None,
            user: str = "") -> Job:
    """A new QUEUED job and its first history entry (job_id: one chosen before, e.g. to check its paths)."""
    job = Job(**_job_values(tenant_id, manifest, now, job_id or new_job_id(), user))
    s.add(job)
    s.add(Transition(**_first_entry(job.id, now)))
    return job


def queue_job(s: Session, tenant_id: int, manifest: JobManifest, now: float, *, job_id: str, user: str) -> Job:
    """add_job for a transaction that adds many (the API's group commit): the rows are written at commit, in
    one INSERT per table with the other jobs the transaction queued (changes.insert_at_commit), which costs
    a fraction of the ORM's flush of each object. The Job returned is the row as it will be written, not in
    the session: a read in the same transaction does not find the job before the commit."""
    return Job(**queue_row(s, tenant_id, manifest, now, job_id=job_id, user=user))


def queue_row(s: Session, tenant_id: int, manifest: JobManifest, now: float, *, job_id: str,
              user: str) -> dict[str, Any]:
    """queue_job() returning the job's row as a dict of column values (the caller must not change it): no
    ORM object is built (that cost as much as the rest of the write, for the submission's answer alone)."""
    values = _job_values(tenant_id, manifest, now, job_id, user)
    insert_at_commit(s, Job, values)
    insert_at_commit(s, Transition, _first_entry(job_id, now))
    return values


def _job_values(tenant_id: int, manifest: JobManifest, now: float, job_id: str, user: str) -> dict[str, Any]:
    return {
        "id": job_id, "tenant_id": tenant_id, "name": manifest.name, "user": user,
        "manifest": manifest.model_dump(mode="json"), "status": JobStatus.QUEUED.value, "status_reason": "submitted",
        "wait_reason": "", "priority": manifest.priority, "learners": manifest.learners, "submitted_at": now,
        "queued_since": now, "attempts": 0, "failures": 0, "preemptions": 0, "work_done_s": 0.0,
        "attained_gpu_s": 0.0, "expected_duration_s": manifest.expected_duration_s or manifest.max_runtime_s,
        "halt_requested": False, "cancel_requested": False,
    }


def _first_entry(job_id: str, now: float) -> dict[str, Any]:
    return {"job_id": job_id, "from_status": None, "to_status": JobStatus.QUEUED.value, "at": now,
            "reason": "submitted"}


def transition(s: Session, job: Job, new: JobStatus, now: float, reason: str) -> None:
    """Move `job` to `new` (IllegalTransition if the table forbids it) and record the change."""
    s.add(Transition(**transition_row(job, new, now, reason)))


def transition_row(job: Job, new: JobStatus, now: float, reason: str) -> dict[str, Any]:
    """transition() for a writer that inserts the history rows itself (the control loop's batches: one INSERT
    for all of a round's): `job` is moved to `new` (IllegalTransition if the table forbids it) and the
    history row to write is returned, not added to a session."""
    old = JobStatus(job.status)
    check_transition(job.id, old, new)
    job.status = new.value
    job.status_reason = reason
    if new is JobStatus.QUEUED:
        job.queued_since = now
    if new not in BOOKING:
        job.allocation = None
        job.executor_handle = None
        job.run_started_at = None
    if new is JobStatus.HALTED:
        job.halt_requested = False
    if new.terminal:
        job.finished_at = now
        job.wait_reason = ""
        job.halt_requested = False
        job.cancel_requested = False
    return {"job_id": job.id, "from_status": old.value, "to_status": new.value, "at": now, "reason": reason}
