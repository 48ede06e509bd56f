"""The writes every status change goes through: one transition table (core/job.py), persisted with its time
and reason in the same transaction as the change itself.

Only a job whose learners may run (DOWNLOADING, PROCESSING) books GPUs: every other status leaves its
allocation empty, here, whatever the caller forgot (a queued job holds no GPU, ever)."""

from __future__ import annotations

import secrets

from sqlalchemy.orm import Session

from loadmaster.core.job import JobStatus, check_transition
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.models import Job, Transition

BOOKING = frozenset({JobStatus.DOWNLOADING, JobStatus.PROCESSING})  # the statuses that hold an allocation


def new_job_id() -> str:
    # Random, not sequential: ids are handed to tenants and must not reveal how busy others are.
    return "j-" + secrets.token_hex(6)


def add_job(s: Session, tenant_id: int, manifest: JobManifest, now: float, job_id: str | None = None) -> Job:
    """A new QUEUED job and its first history entry."""
    job = Job(
        id=job_id or new_job_id(), tenant_id=tenant_id, name=manifest.name,
        manifest=manifest.model_dump(mode="json"), status=JobStatus.QUEUED.value, status_reason="submitted",
        wait_reason="", priority=manifest.priority, learners=manifest.learners, submitted_at=now, queued_since=now,
        attempts=0, failures=0, preemptions=0, work_done_s=0.0, attained_gpu_s=0.0,
        expected_duration_s=manifest.expected_duration_s or manifest.max_runtime_s,
        halt_requested=False, cancel_requested=False,
    )
    s.add(job)
    s.add(Transition(job_id=job.id, from_status=None, to_status=JobStatus.QUEUED.value, at=now, reason="submitted"))
    return job


def transition(s: Session, job: Job, new: JobStatus, now: float, reason: str) -> None:
    """Move `job` to `new` (IllegalTransition if the table forbids it) and record the change."""
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
    s.add(Transition(job_id=job.id, from_status=old.value, to_status=new.value, at=now, reason=reason))
