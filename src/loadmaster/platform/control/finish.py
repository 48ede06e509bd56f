"""How an attempt ends, and what the job does next.

- Stopped by the platform (the stop's reason is on the attempt row): preempted -> HALTED -> QUEUED (resumes
  from its checkpoint); halted -> HALTED; cancelled -> CANCELLED; resized -> relaunched at the new size;
  out of time (max_runtime_s) -> FAILED.
- Every learner exited 0: STORING (results copied to the manifest's target) -> COMPLETED, or COMPLETED.
- Otherwise a failure: classified from exit codes and the failing learner's log (platform/failures.py),
  then retried (QUEUED) or FAILED, as the manifest's retry policy says.
Each ending is one transaction: the attempt row (exit codes, outcome, class, retry decision), the job's
progress, and its transitions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from loadmaster.core.job import FailureCategory, IllegalTransition, JobStatus
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.rows import lock_job
from loadmaster.platform.control.stages import StageDone, StageKind
from loadmaster.platform.control.state import PendingStart, Phase, RunState, StopIntent, StopKind
from loadmaster.platform.executors.base import AttemptEnded, LearnerExit
from loadmaster.platform.failures import Classification, classify, decide_retry, read_tail
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Attempt, Job
from loadmaster.runtime.checkpoints import checkpoint_step, latest_checkpoint

C = FailureCategory
log = logging.getLogger("loadmaster.control")


@dataclass(frozen=True, slots=True)
class Ending:
    exits: tuple[LearnerExit, ...] = ()
    succeeded: bool = False
    failure: Classification | None = None  # set when it failed (not stopped by the platform)


def attempt_ended(ctx: Context, ended: AttemptEnded) -> None:
    """An attempt the executor reports as over (every learner has exited)."""
    run = ctx.runs.get(ended.job_id)
    if run is None or run.attempt != ended.attempt:
        _record_untracked(ctx, ended)
        return
    if run.phase is Phase.LAUNCHING:
        run.early_end = ended  # handled once the launch itself is collected (PROCESSING first)
        return
    failure = None
    if not ended.succeeded and run.stop is None:
        failing = ended.first_failure or next((e for e in ended.exits if e.exit_code != 0), None)
        tail = read_tail(ctx.dirs.log_file(ended.job_id, ended.attempt, failing.rank)) if failing else ""
        failure = classify(ended, tail)
        if ended.stopped and failing is None:
            failure = Classification(C.INFRASTRUCTURE, "stopped from outside the control loop")
    end_run(ctx, run, Ending(ended.exits, ended.succeeded, failure))


def launch_failed(ctx: Context, run: RunState, message: str) -> None:
    """The executor could not start the gang (nothing of it runs)."""
    lowered = message.lower()
    if "no such file" in lowered or "not found" in lowered:
        failure = Classification(C.INCORRECT_INPUT, f"the learners could not be started: {message}")
    elif "permission denied" in lowered:
        failure = Classification(C.PERMISSION_ERROR, f"the learners could not be started: {message}")
    else:
        failure = Classification(C.INFRASTRUCTURE, f"the learners could not be started: {message}")
    end_run(ctx, run, Ending(failure=failure))


def lost(ctx: Context, run: RunState, why: str) -> None:
    """An attempt the platform cannot account for (after a restart): an infrastructure failure, requeued
    whatever the retry policy says, since the job did nothing wrong; it resumes from its checkpoint."""
    end_run(ctx, run, Ending(failure=Classification(C.INFRASTRUCTURE, why)), force_requeue=True)


def end_run(ctx: Context, run: RunState, ending: Ending, *, force_requeue: bool = False) -> None:
    ctx.runs.pop(run.job_id, None)
    ctx.dirty = True
    try:
        upload = _end(ctx, run, ending, force_requeue)
    except IllegalTransition:
        # Every path above checks the status it moves from, so this is a bug; the transaction rolled back,
        # the attempt stays open in the store, and the next server's recover() settles it.
        log.exception("job %s: ending attempt %d hit an illegal transition", run.job_id, run.attempt)
        return
    if upload is not None:
        number, url = upload
        ctx.stager.upload(run.job_id, number, ctx.dirs.results(run.job_id), url)


def _end(ctx: Context, run: RunState, ending: Ending, force_requeue: bool) -> tuple[int, str] | None:
    step = _checkpoint_step(ctx, run.job_id)
    now = ctx.clock()
    upload: tuple[int, str] | None = None
    with ctx.store.session() as s:
        job = lock_job(s, run.job_id)
        attempt = _attempt(s, run.job_id, run.attempt)
        if job is None or attempt is None:
            return None
        _bank(job, run, now, step)
        attempt.ended_at = now
        attempt.exit_codes = [[e.rank, e.exit_code] for e in ending.exits]
        status = JobStatus(job.status)
        if status not in (JobStatus.QUEUED, JobStatus.DOWNLOADING, JobStatus.PROCESSING):
            attempt.outcome = "stopped"
            attempt.retry_decision = f"stopped: the job was {status.value} meanwhile"
            return None
        if run.stop is not None and not force_requeue:
            _stopped(ctx, s, job, attempt, run, run.stop, now)
        elif ending.succeeded and not force_requeue:
            attempt.outcome = "succeeded"
            upload = _succeeded(ctx, s, job, run, now)
        else:
            failure = ending.failure or Classification(C.INFRASTRUCTURE, "the attempt ended without an exit code")
            _failed(ctx, s, job, attempt, failure, now, force_requeue)
    return upload


def _stopped(ctx: Context, s: Session, job: Job, attempt: Attempt, run: RunState, stop: StopIntent,
             now: float) -> None:
    attempt.outcome = "stopped"
    status = JobStatus(job.status)
    if stop.kind is StopKind.PREEMPT:
        attempt.failure_category = C.PREEMPTED.value
        attempt.retry_decision = f"requeued after preemption ({stop.detail})"
        job.preemptions += 1
        if status is not JobStatus.QUEUED:
            transition(s, job, JobStatus.HALTED, now, stop.detail)
            transition(s, job, JobStatus.QUEUED, now, "requeued after preemption")
        else:
            job.allocation = None
            job.executor_handle = None
        ctx.report.requeued.append(job.id)
    elif stop.kind is StopKind.HALT:
        attempt.retry_decision = f"halted ({stop.detail})"
        transition(s, job, JobStatus.HALTED, now, stop.detail)
        job.halt_requested = False
        ctx.report.halted.append(job.id)
    elif stop.kind is StopKind.CANCEL:
        attempt.retry_decision = f"cancelled ({stop.detail})"
        transition(s, job, JobStatus.CANCELLED, now, stop.detail)
        job.cancel_requested = False
        ctx.report.cancelled.append(job.id)
    elif stop.kind is StopKind.RUNTIME:
        attempt.retry_decision = f"not retried: {stop.detail}"
        transition(s, job, JobStatus.FAILED, now, stop.detail)
        ctx.report.failed.append(job.id)
    elif run.resize_to is not None and status is JobStatus.PROCESSING:
        attempt.retry_decision = f"resized: {stop.detail}"
        job.executor_handle = None
        job.run_started_at = None
        ctx.pending[job.id] = PendingStart(job.id, run.resize_to, now, relaunch=True)
    else:  # a resize whose target was lost with a restart: start again at whatever size fits
        attempt.retry_decision = f"requeued: {stop.detail} (the new size was lost in a restart)"
        transition(s, job, JobStatus.QUEUED, now, "requeued: a resize was cut short by a server restart")
        ctx.report.requeued.append(job.id)


def _succeeded(ctx: Context, s: Session, job: Job, run: RunState, now: float) -> tuple[int, str] | None:
    url = ctx.manifest(job.id).results
    learners = len(run.spec.learners)
    if url:
        job.allocation = None  # the learners are gone: their GPUs are free while the results are copied
        job.executor_handle = None
        transition(s, job, JobStatus.STORING, now, f"all {learners} learner(s) exited 0; copying results to {url}")
        ctx.report.stored.append(job.id)
        return run.attempt, url
    transition(s, job, JobStatus.COMPLETED, now, f"all {learners} learner(s) exited 0")
    ctx.report.completed.append(job.id)
    return None


def _failed(ctx: Context, s: Session, job: Job, attempt: Attempt, failure: Classification, now: float,
            force_requeue: bool) -> None:
    attempt.outcome = "failed"
    attempt.failure_category = failure.category.value
    status = JobStatus(job.status)
    if force_requeue:
        attempt.retry_decision = "requeued: the platform lost the attempt, not the job's fault"
        retry = True
        reason = f"requeued: {failure.evidence}"
    else:
        job.failures += 1
        retry_policy = ctx.manifest(job.id).retry
        decision = decide_retry(retry_policy.policy, failure.category, job.failures, retry_policy.max_attempts)
        attempt.retry_decision = decision.reason
        retry = decision.retry
        reason = f"{failure.category.value}: {failure.evidence}; {decision.reason}"
    if retry:
        if status is JobStatus.QUEUED:  # failed before it left the queue (launch failure)
            job.allocation = None
            job.executor_handle = None
            job.queued_since = now
        else:
            transition(s, job, JobStatus.QUEUED, now, reason)
        (ctx.report.requeued if force_requeue else ctx.report.retried).append(job.id)
    else:
        transition(s, job, JobStatus.FAILED, now, reason)
        ctx.report.failed.append(job.id)


def stage_done(ctx: Context, done: StageDone) -> None:
    ctx.dirty = True
    if done.kind is StageKind.DOWNLOAD:
        run = ctx.runs.get(done.job_id)
        if run is None or run.attempt != done.attempt:
            return  # the job moved on while its data was copied (cancelled, halted, preempted)
        if done.error is None:
            from loadmaster.platform.control.launch import launch  # launch imports this module

            launch(ctx, run)
            return
        category = C.INCORRECT_INPUT if done.error.missing else C.INFRASTRUCTURE
        end_run(ctx, run, Ending(failure=Classification(category, f"staging data failed: {done.error}")))
        return
    now = ctx.clock()
    with ctx.store.session() as s:
        job = lock_job(s, done.job_id)
        if job is None or job.status != JobStatus.STORING.value:
            return  # cancelled while its results were copied
        if done.error is None:
            files = done.staged.files if done.staged is not None else 0
            transition(s, job, JobStatus.COMPLETED, now, f"results copied to {done.url} ({files} files)")
            ctx.report.completed.append(job.id)
        else:
            transition(s, job, JobStatus.FAILED, now, f"storing results failed: {done.error}")
            ctx.report.failed.append(job.id)


def _record_untracked(ctx: Context, ended: AttemptEnded) -> None:
    """An end the loop no longer waits for (its job was handled meanwhile): keep the exit codes anyway."""
    with ctx.store.session() as s:
        attempt = _attempt(s, ended.job_id, ended.attempt)
        if attempt is not None and attempt.ended_at is None:
            attempt.ended_at = ctx.clock()
            attempt.exit_codes = [[e.rank, e.exit_code] for e in ended.exits]
            attempt.outcome = "stopped" if ended.stopped else ("succeeded" if ended.succeeded else "failed")


def _attempt(s: Session, job_id: str, number: int) -> Attempt | None:
    return s.execute(select(Attempt).where(Attempt.job_id == job_id, Attempt.number == number)).scalar_one_or_none()


def _checkpoint_step(ctx: Context, job_id: str) -> int | None:
    found = latest_checkpoint(ctx.dirs.checkpoints(job_id))
    return None if found is None else checkpoint_step(found)


def _bank(job: Job, run: RunState, now: float, step: int | None) -> None:
    """Progress as of the attempt's end, and where its next attempt resumes."""
    if run.running_since is not None:
        span = max(0.0, now - run.as_of)
        job.attained_gpu_s = run.attained_gpu_s + run.allocation.gpus * span
        worked = run.work_done_s + span
    else:
        worked = run.work_done_s
    job.checkpoint_step = step
    rate = run.progress.steps_per_s()
    if step is None:
        # No checkpoint in the job's directory: a next attempt starts from the beginning (as far as the
        # platform can tell; a job checkpointing elsewhere only makes the estimates pessimistic).
        job.work_done_s = 0.0
    elif rate is not None:
        job.work_done_s = step / rate
    else:
        job.work_done_s = worked
    if run.progress.last_step is not None:
        job.last_step = run.progress.last_step

