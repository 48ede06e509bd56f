"""Carrying out a Plan: the live counterpart of the simulator's apply().

Preempts and resizes first (their learners are asked to stop), then rejects, then starts. A start whose
GPUs are still held by stopping learners waits as a PendingStart and is launched by a later round as soon
as they have exited; the scheduler counts those GPUs as the new job's meanwhile. Waits update each queued
job's wait_reason, written only where it changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import bindparam, update

from loadmaster.core.job import Allocation, IllegalTransition, JobStatus
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.launch import Reserved, relaunch, reserve
from loadmaster.platform.control.rows import JobRow, lock_job
from loadmaster.platform.control.state import PendingStart, StopIntent, StopKind
from loadmaster.platform.control.stops import request_stop, resize
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Job
from loadmaster.scheduling.plan import Plan


def apply_plan(ctx: Context, plan: Plan, queued: Mapping[str, JobRow]) -> None:
    now = ctx.clock()
    for p in plan.preempts:
        run = ctx.runs.get(p.job_id)
        if run is None:
            # A start still waiting for its GPUs: it simply goes back to waiting.
            if ctx.pending.pop(p.job_id, None) is not None:
                ctx.report.preempted.append(p.job_id)
            continue
        why = f"preempted by {p.for_job}" if p.for_job else p.reason
        if request_stop(ctx, run, StopIntent(StopKind.PREEMPT, why)):
            ctx.report.preempted.append(p.job_id)
    for z in plan.resizes:
        _resize(ctx, z.job_id, z.allocation, now)
    for r in plan.rejects:
        _reject(ctx, r.job_id, r.reason)
    for start in plan.starts:
        ctx.pending[start.job_id] = PendingStart(start.job_id, start.allocation, now)
    launch_pending(ctx)
    changed = [{"jid": w.job_id, "reason": w.reason.value} for w in plan.waits
               if w.job_id in queued and queued[w.job_id].wait_reason != w.reason.value]
    if changed:
        jobs = Job.metadata.tables[Job.__tablename__]
        with ctx.store.session() as s:
            s.connection().execute(
                update(jobs).where(jobs.c.id == bindparam("jid"), jobs.c.status == JobStatus.QUEUED.value)
                .values(wait_reason=bindparam("reason")), changed)


def launch_pending(ctx: Context) -> None:
    """Launch every waiting start whose GPUs are free now (oldest first).

    Learners that ignore SIGTERM are killed after the grace period, so a start never waits much longer;
    one that does (GPUs held by something the scheduler did not count) is dropped, and decided again.
    """
    now = ctx.clock()
    patience = max(60.0, 3 * ctx.grace_s)
    for start in sorted(ctx.pending.values(), key=lambda p: p.since):
        outcome = relaunch(ctx, start.job_id, start.allocation) if start.relaunch else \
            reserve(ctx, start.job_id, start.allocation)
        if outcome is not Reserved.HELD:
            ctx.pending.pop(start.job_id, None)
        elif now - start.since > patience:
            ctx.pending.pop(start.job_id, None)
            ctx.dirty = True
            if start.relaunch:  # a resized job with no learners left: back to the queue
                _requeue(ctx, start.job_id, "requeued: the GPUs of its new size did not become free")


def _resize(ctx: Context, job_id: str, alloc: Allocation, now: float) -> None:
    start = ctx.pending.get(job_id)
    if start is not None:  # not launched yet: it will start at the new size
        ctx.pending[job_id] = PendingStart(job_id, alloc, start.since, start.relaunch)
        ctx.report.resized.append(job_id)
        return
    run = ctx.runs.get(job_id)
    if run is None:
        return
    why = f"resized by the scheduler from {run.allocation.learners} to {alloc.learners} learners"
    if resize(ctx, run, alloc, why):
        ctx.report.resized.append(job_id)


def _reject(ctx: Context, job_id: str, reason: str) -> None:
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status != JobStatus.QUEUED.value:
            return
        try:
            transition(s, job, JobStatus.FAILED, ctx.clock(), f"rejected: {reason}")
        except IllegalTransition:
            return
    ctx.report.rejected.append(job_id)
    ctx.dirty = True


def _requeue(ctx: Context, job_id: str, reason: str) -> None:
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status != JobStatus.PROCESSING.value:
            return
        transition(s, job, JobStatus.QUEUED, ctx.clock(), reason)
    ctx.report.requeued.append(job_id)
