"""recover(): rebuild the loop's memory from the store at start, before anything is decided.

For every job that was in flight when the previous server stopped (or was killed):
- PROCESSING with a running attempt and an executor handle: the executor re-attaches to its learners
  (those that exited meanwhile are known by their exit files), and the attempt is watched as before; a
  stop that was under way (the attempt row says so) is asked for again. If the executor cannot account
  for them (a reboot, a handle of another executor), the attempt ends as an infrastructure failure and
  the job is requeued: it resumes from its checkpoint.
- PROCESSING without a running attempt (a resize's relaunch cut short): requeued.
- DOWNLOADING: the copy is redone from scratch. STORING: the results copy is redone.
- QUEUED with an allocation: its launch was cut short before PROCESSING; the attempt ends as an
  infrastructure failure and the job stays queued.
"""

from __future__ import annotations

import time

from sqlalchemy import and_, or_, select

from loadmaster.core.job import Allocation, FailureCategory, JobStatus
from loadmaster.platform.control.allocation import learners_of, to_allocation
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.finish import Ending, end_run, lost
from loadmaster.platform.control.launch import attempt_spec, prior_runtime
from loadmaster.platform.control.reports import RecoveryReport
from loadmaster.platform.control.rows import lock_job
from loadmaster.platform.control.state import Phase, RunState, StopIntent
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Attempt, Job

S = JobStatus
OPEN = ("running", "stopping")


def recover(ctx: Context) -> RecoveryReport:
    started = time.perf_counter()
    report = RecoveryReport()
    with ctx.store.session() as s:
        # QUEUED jobs count when their latest attempt is still open: a launch a crash cut short.
        open_attempt = select(Attempt.id).where(Attempt.job_id == Job.id, Attempt.number == Job.attempts,
                                                Attempt.outcome.in_(OPEN)).exists()
        jobs = s.execute(select(Job).where(or_(
            Job.status.in_([S.DOWNLOADING.value, S.PROCESSING.value, S.STORING.value]),
            and_(Job.status == S.QUEUED.value, open_attempt)))).scalars().all()
        found = [(j.id, JobStatus(j.status), j.attempts) for j in jobs]
        numbers = {j.id: j.attempts for j in jobs}
        latest = {a.job_id: a for a in s.execute(select(Attempt).where(Attempt.job_id.in_(list(numbers))))
                  .scalars() if a.number == numbers[a.job_id]} if numbers else {}
    ctx.load_manifests([job_id for job_id, _, _ in found])
    for job_id, status, number in found:
        attempt = latest.get(job_id)
        if status is S.STORING:
            url = ctx.manifest(job_id).results
            if url:
                ctx.stager.upload(job_id, number, ctx.dirs.results(job_id), url)
                report.restored.append(job_id)
        elif status is S.QUEUED:
            _interrupted_launch(ctx, job_id)
            report.interrupted_launches.append(job_id)
        elif attempt is None or attempt.outcome not in OPEN:
            _requeue(ctx, job_id, "requeued at restart: no attempt of it was running")
            report.requeued.append(job_id)
        elif _adopt(ctx, job_id, attempt, status):
            (report.restaged if status is S.DOWNLOADING else report.reattached).append(job_id)
        else:
            report.requeued.append(job_id)
    ctx.dirty = True
    report.duration_s = time.perf_counter() - started
    return report


def _adopt(ctx: Context, job_id: str, attempt: Attempt, status: JobStatus) -> bool:
    """Watch an attempt of the previous server again. False if it was lost (and the job requeued)."""
    with ctx.store.session() as s:
        job = s.get(Job, job_id)
        if job is None or job.allocation is None:
            return False
        doc, handle = job.allocation, job.executor_handle
        work, attained = job.work_done_s, job.attained_gpu_s
        run_started, last_report = job.run_started_at, job.last_report_at
        prior = prior_runtime(s, job_id)
    manifest = ctx.manifest(job_id)
    learners = learners_of(doc)
    alloc = to_allocation(job_id, doc, ctx.node_index)
    spec = attempt_spec(ctx, job_id, attempt.number, manifest, learners, int(doc.get("master_port", 0)))
    phase = Phase.DOWNLOADING if status is S.DOWNLOADING else Phase.RUNNING
    as_of = max(run_started or attempt.started_at, last_report or 0.0)
    stop = StopIntent.decode(attempt.retry_decision) if attempt.outcome == "stopping" else None
    # An allocation on nodes this server's cluster lacks (--nodes changed) cannot be re-attached.
    held = alloc or Allocation(job_id, (), 0, 0.0, 0.0)
    run = RunState(job_id, attempt.number, spec, held, phase, attempt.started_at, prior_runtime_s=prior, stop=stop,
                   as_of=as_of, work_done_s=work, attained_gpu_s=attained)
    ctx.runs[job_id] = run
    if phase is Phase.DOWNLOADING:
        if manifest.data:
            ctx.stager.download(job_id, attempt.number, manifest.data, ctx.dirs.data(job_id))
            return True
        lost(ctx, run, "DOWNLOADING without a data source after a restart")
        return False
    if alloc is not None and handle and ctx.executor.reattach(spec, handle):
        run.running_since = run_started
        if stop is not None:
            ctx.executor.stop(job_id, attempt.number, ctx.grace_s)  # the executor's deadline died with the server
        return True
    if stop is not None:
        end_run(ctx, run, Ending())  # what was asked for (halt, cancel, preemption) is done: nothing runs
    else:
        lost(ctx, run, "its learners could not be accounted for after a server restart")
    return False


def _interrupted_launch(ctx: Context, job_id: str) -> None:
    now = ctx.clock()
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status != S.QUEUED.value:
            return
        attempt = s.execute(select(Attempt).where(Attempt.job_id == job_id, Attempt.number == job.attempts)
                            ).scalar_one_or_none()
        if attempt is not None and attempt.outcome in OPEN:
            attempt.ended_at = now
            attempt.outcome = "failed"
            attempt.failure_category = FailureCategory.INFRASTRUCTURE.value
            attempt.retry_decision = "requeued: its launch was cut short by a server restart"
        job.allocation = None
        job.executor_handle = None


def _requeue(ctx: Context, job_id: str, reason: str) -> None:
    now = ctx.clock()
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status not in (S.DOWNLOADING.value, S.PROCESSING.value):
            return
        transition(s, job, S.QUEUED, now, reason)
        job.allocation = None
        job.executor_handle = None
