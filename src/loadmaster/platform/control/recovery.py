"""recover(): rebuild the loop's memory from the store at start, before anything is decided; and adopt(),
which recovery and reconciliation share.

For every attempt the store says is open (outcome launching, running or stopping), the executor looks for
its learners: through the handle stored when the launch was confirmed, or, for a launch a crash cut short
before that, through the attempt's identity (its files, its actors' names), fencing ranks that never
started so that they never will. Learners found are watched again (a stop that was under way is asked for
again); an attempt whose learners cannot be accounted for ends as Lost (requeued, not counted against the
job, resumed from its checkpoint), and one whose launch never began as NotLaunched. So a command never
runs twice for one attempt, and a job is never started twice beside itself.

DOWNLOADING attempts are restaged (the copy redone), STORING copies redone, and a PROCESSING job without
an open attempt (a resize's relaunch cut short) is requeued. Then reconciliation (reconcile.py) checks the
three truths once before the first round.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform.control import events as ev
from loadmaster.platform.control.allocation import learners_of, to_allocation, to_document
from loadmaster.platform.control.batch import commit
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.outcomes import Lost, NotLaunched, Stopped
from loadmaster.platform.control.reports import RecoveryReport
from loadmaster.platform.control.router import route_all
from loadmaster.platform.control.starting import attempt_spec, prior_runtime
from loadmaster.platform.control.state import Phase, RunState, StopIntent
from loadmaster.platform.control.table import ACTIVE_VALUES
from loadmaster.platform.executors.base import LiveAttempt
from loadmaster.platform.store.models import Attempt, Job

S = JobStatus
OPEN = ("launching", "running", "stopping")
log = logging.getLogger("loadmaster.control")


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """An attempt the store says is open, with what adopting it needs."""

    job_id: str
    number: int
    status: JobStatus
    outcome: str
    retry_decision: str | None
    started_at: float
    allocation: dict[str, Any]
    handle: dict[str, Any] | None
    work_done_s: float
    attained_gpu_s: float
    run_started_at: float | None
    last_report_at: float | None
    prior_runtime_s: float
    current: bool  # the job's latest attempt
    smoke_test_s: float | None = None  # the attempt is the job's smoke test of this many seconds


def open_attempts(ctx: Context, job_ids: list[str] | None = None) -> list[OpenAttempt]:
    """Open attempts (of these jobs), read with their jobs in one transaction."""
    with ctx.store.session() as s:
        q = select(Attempt, Job).join(Job, Job.id == Attempt.job_id).where(Attempt.ended_at.is_(None))
        if job_ids is not None:
            q = q.where(Attempt.job_id.in_(job_ids))
        found = []
        for attempt, job in s.execute(q).all():
            found.append(OpenAttempt(
                job.id, attempt.number, S(job.status), attempt.outcome, attempt.retry_decision, attempt.started_at,
                dict(job.allocation or attempt.allocation or {}), job.executor_handle, job.work_done_s,
                job.attained_gpu_s, job.run_started_at, job.last_report_at, prior_runtime(s, job.id),
                attempt.number == job.attempts, attempt.smoke_test_s))
    return found


def adopt(ctx: Context, found: OpenAttempt) -> tuple[RunState | None, ev.Event | None]:
    """Watch an open attempt again, or say how it ended: (the run to keep, the event to route)."""
    manifest = ctx.manifest(found.job_id)
    learners = learners_of(found.allocation)
    alloc = to_allocation(found.job_id, found.allocation, ctx.node_index)
    port = int(found.allocation.get("master_port", 0))
    spec = attempt_spec(ctx, found.job_id, found.number, manifest, learners, port)
    stop = StopIntent.decode(found.retry_decision) if found.outcome == "stopping" else None
    # An allocation on nodes this server's cluster lacks (--nodes changed) cannot be re-attached.
    held = alloc or Allocation(found.job_id, (), 0, 0.0, 0.0)
    downloading = found.status is S.DOWNLOADING
    run = RunState(found.job_id, found.number, spec, held, Phase.DOWNLOADING if downloading else Phase.RUNNING,
                   found.started_at, prior_runtime_s=found.prior_runtime_s, stop=stop,
                   as_of=max(found.run_started_at or found.started_at, found.last_report_at or 0.0),
                   work_done_s=found.work_done_s, attained_gpu_s=found.attained_gpu_s, smoke_s=found.smoke_test_s)
    if not found.current or found.status not in (S.DOWNLOADING, S.PROCESSING, S.QUEUED):
        return None, ev.End(found.job_id, found.number, Lost(f"attempt left open while the job was "
                                                               f"{found.status.value}"), run)
    if downloading:
        if manifest.data and alloc is not None:
            return run, None  # the copy is redone (the caller starts it)
        return None, ev.End(found.job_id, found.number, Lost("DOWNLOADING without a data source after a restart"), run)
    if alloc is not None and ctx.executor.reattach(spec, found.handle):
        run.running_since = found.run_started_at or found.started_at
        return run, ev.Adopted(run, found.status, found.handle is None)
    if alloc is None:
        # Its nodes are not all in the cluster any more (a node vanished, --nodes changed): what survives
        # of the gang elsewhere must not run beside the job's next attempt.
        ctx.executor.terminate(LiveAttempt(found.job_id, found.number))
    if stop is not None:
        # What was asked for (halt, cancel, preemption) is done: nothing runs.
        return None, ev.End(found.job_id, found.number, Stopped(stop), run)
    if found.outcome == "launching" and found.handle is None:
        return None, ev.End(found.job_id, found.number,
                            NotLaunched("its launch was cut short by a server restart; nothing of it ran"), run)
    return None, ev.End(found.job_id, found.number,
                        Lost("its learners could not be accounted for after a server restart"), run)


def recover(ctx: Context) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport()
    events: list[ev.Event] = []
    kept: list[RunState] = []
    found = open_attempts(ctx)
    ctx.load_manifests(sorted({f.job_id for f in found}))
    for attempt in found:
        run, event = adopt(ctx, attempt)
        if run is not None:
            kept.append(run)
            (report.restaged if run.phase is Phase.DOWNLOADING else report.reattached).append(attempt.job_id)
        if event is not None:
            events.append(event)
            if isinstance(event, ev.End):
                if isinstance(event.outcome, NotLaunched) or attempt.status is S.QUEUED:
                    report.interrupted_launches.append(attempt.job_id)
                elif not isinstance(event.outcome, Stopped):
                    report.requeued.append(attempt.job_id)
    open_jobs = {f.job_id for f in found}
    with ctx.store.session() as s:
        storing = s.execute(select(Job.id, Job.attempts).where(Job.status == S.STORING.value)).all()
        stranded = s.scalars(select(Job.id).where(Job.status.in_([S.DOWNLOADING.value, S.PROCESSING.value]))).all()
        # Smoke tests passed before the restart (--smoke-test): those jobs are not tested again.
        passed = s.execute(select(Job.id, Job.smoke_passed).where(Job.smoke_passed.is_not(None),
                                                                  Job.status.in_(ACTIVE_VALUES))).all()
    ctx.smoke_passed.update({job_id: failures for job_id, failures in passed if failures is not None})
    for job_id in stranded:
        if job_id not in open_jobs:
            events.append(ev.Unbook(job_id, "requeued at restart: no attempt of it was running"))
            report.requeued.append(job_id)
    if events:  # the store first: a store error here leaves the memory empty, and recover() is tried again
        commit(ctx.store, ctx.clock(), lambda b: route_all(b, ctx, events))
    for job_id, number in storing:
        if ctx.results_url(job_id):
            ctx.upload(job_id, number)
            report.restored.append(job_id)
    for run in kept:
        ctx.runs[run.job_id] = run
        ctx.bookings.book(run.job_id, to_document(list(run.spec.learners), run.spec.master_port))
        if run.phase is Phase.DOWNLOADING:
            ctx.download(run.job_id, run.attempt)
        elif run.stop is not None:
            ctx.executor.stop(run.job_id, run.attempt, ctx.grace_s)  # the executor's deadline died with the server
    ctx.dirty = True
    report.duration_s = time.perf_counter() - started
    return report
