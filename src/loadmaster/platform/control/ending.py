"""The one place an attempt ends, and what the job does next (outcomes.py has the table).

end() is idempotent: an attempt whose end is recorded already is left as it is (a retried batch, a second
report), and the loop's memory and the executor are settled all the same. In one transaction: the attempt
row (exit codes, outcome, failure class, retry decision), the job's progress, its transitions, and its
allocation given back. After the commit: the executor is told the end is recorded (release), the loop's
memory drops the attempt, and the GPUs are free for the next start.

A user's request wins over what the scheduler or the outcome would do: a job the user cancelled or halted
while its attempt was ending ends CANCELLED or HALTED, not requeued.
"""

from __future__ import annotations

import logging

from loadmaster.core.job import FailureCategory, JobStatus
from loadmaster.platform.control.allocation import to_document
from loadmaster.platform.control.batch import Batch
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.outcomes import (
    Failed,
    Lost,
    NotLaunched,
    Outcome,
    Stopped,
    Succeeded,
    exits_of,
    stored_outcome,
)
from loadmaster.platform.control.stages import StageDone
from loadmaster.platform.control.state import CANCELLED_BY_USER, HALTED_BY_USER, PendingStart, RunState, StopKind
from loadmaster.platform.failures import decide_retry
from loadmaster.platform.store.jobs import BOOKING
from loadmaster.platform.store.models import Attempt, Job
from loadmaster.platform.usage import PREEMPTED
from loadmaster.runtime.checkpoints import checkpoint_step, latest_checkpoint

C = FailureCategory
log = logging.getLogger("loadmaster.control")

LAUNCH_BACKOFF_S = (1.0, 300.0)  # a launch that could not be made is tried again after 1 s, 2 s, ... 5 min


def end(b: Batch, ctx: Context, job_id: str, number: int, outcome: Outcome, run: RunState | None = None) -> bool:
    """Record that attempt `number` of `job_id` ended with `outcome`. False if it was recorded already."""
    if not b.claim(job_id):
        return False  # another hand-off moved the job in this batch: the next round ends it
    run = run if run is not None and run.attempt == number else ctx.runs.get(job_id)
    run = run if run is not None and run.attempt == number else None
    job = b.job(job_id)
    attempt = b.attempt(job_id, number)
    b.after(lambda: _settle(ctx, job_id, number, run))
    if job is None or attempt is None or attempt.ended_at is not None:
        return False
    now = b.now
    step, _ = _checkpoint(ctx, job_id)
    if run is not None:
        _bank(job, run, now, step)
    else:
        job.checkpoint_step = step
    attempt.ended_at = now
    attempt.exit_codes = [[e.rank, e.exit_code] for e in exits_of(outcome)]
    attempt.outcome = stored_outcome(outcome)
    if isinstance(outcome, Lost | NotLaunched):
        attempt.failure_category = C.INFRASTRUCTURE.value
    status = JobStatus(job.status)
    if job.attempts != number or status not in BOOKING:
        # Not the job's current attempt, or the job moved on (a store that a bug or an older version left
        # so): close the attempt; a job that may not book GPUs books none.
        attempt.retry_decision = f"closed: the job is {status.value}"
        if status not in BOOKING:
            job.allocation = None
            job.executor_handle = None
        return True
    job.executor_handle = None
    job.run_started_at = None
    _next(b, ctx, job, attempt, outcome, run)
    b.after(lambda: _count(ctx, outcome))
    return True


def _settle(ctx: Context, job_id: str, number: int, run: RunState | None) -> None:
    """After the end is committed: the memory and the executor let the attempt go."""
    current = ctx.runs.get(job_id)
    if current is not None and current.attempt == number:
        del ctx.runs[job_id]
        ctx.bookings.release(job_id, to_document(list(current.spec.learners), current.spec.master_port))
    ctx.executor.release(job_id, number)
    ctx.launcher.forget((job_id, number))
    ctx.changed(job_id)


def _next(b: Batch, ctx: Context, job: Job, attempt: Attempt, outcome: Outcome, run: RunState | None) -> None:
    """The job's next status."""
    now, report = b.now, ctx.report
    if job.cancel_requested and not isinstance(outcome, Succeeded):
        attempt.retry_decision = f"cancelled ({CANCELLED_BY_USER})"
        b.transition(job, JobStatus.CANCELLED, CANCELLED_BY_USER)
        report.cancelled.append(job.id)
        return
    if job.halt_requested and not isinstance(outcome, Succeeded) and not (
            isinstance(outcome, Stopped) and outcome.intent.kind in (StopKind.CANCEL, StopKind.RUNTIME)):
        attempt.retry_decision = f"halted ({HALTED_BY_USER})"
        b.transition(job, JobStatus.HALTED, HALTED_BY_USER)
        report.halted.append(job.id)
        return
    if isinstance(outcome, Succeeded) and attempt.smoke_test_s is not None:
        # A job that ends within its test ran on one GPU only as a test: its gang runs it for real.
        _smoke_passed(b, ctx, job, attempt, f"exited 0 within its {attempt.smoke_test_s:g} s on one GPU")
        return
    match outcome:
        case Succeeded():
            _succeeded(b, ctx, job, run)
        case Failed(failure=failure):
            attempt.failure_category = failure.category.value
            job.failures += 1
            policy = ctx.manifest(job.id).retry
            decision = decide_retry(policy.policy, failure.category, job.failures, policy.max_attempts)
            attempt.retry_decision = decision.reason
            reason = f"{failure.category.value}: {failure.evidence}; {decision.reason}"
            if decision.retry:
                b.transition(job, JobStatus.QUEUED, reason)
                report.retried.append(job.id)
                b.after(ctx.metrics.retries.inc)
            else:
                b.transition(job, JobStatus.FAILED, reason)
                report.failed.append(job.id)
        case Stopped():
            _stopped(b, ctx, job, attempt, outcome, run)
        case Lost(why=why):
            attempt.failure_category = C.INFRASTRUCTURE.value
            attempt.retry_decision = "requeued: the platform lost the attempt, not the job's fault"
            b.transition(job, JobStatus.QUEUED, f"requeued: {why}")
            report.requeued.append(job.id)
        case NotLaunched(why=why):
            attempt.failure_category = C.INFRASTRUCTURE.value
            attempt.retry_decision = "not launched: not the job's failure; it waits in the queue and is tried again"
            b.transition(job, JobStatus.QUEUED, f"not launched: {why}")
            job.wait_reason = "launch_failed"
            report.requeued.append(job.id)
            b.after(lambda: _back_off(ctx, job.id, now))


def _succeeded(b: Batch, ctx: Context, job: Job, run: RunState | None, why: str | None = None) -> None:
    """COMPLETED (through STORING when the manifest names where results go); `why`: an early stop's reason."""
    url = ctx.results_url(job.id)
    learners = len(run.spec.learners) if run is not None else job.learners
    why = why or f"all {learners} learner(s) exited 0"
    if url:
        # The learners are gone: their GPUs are free while the results are copied.
        b.transition(job, JobStatus.STORING, f"{why}; copying results to {url}")
        ctx.report.stored.append(job.id)
        job_id, number = job.id, job.attempts
        b.after(lambda: ctx.upload(job_id, number))
        return
    b.transition(job, JobStatus.COMPLETED, why)
    ctx.report.completed.append(job.id)


def _stopped(b: Batch, ctx: Context, job: Job, attempt: Attempt, outcome: Stopped, run: RunState | None) -> None:
    now, report = b.now, ctx.report
    stop = outcome.intent
    if stop.kind is StopKind.PREEMPT:
        attempt.failure_category = C.PREEMPTED.value
        attempt.retry_decision = f"{PREEMPTED} ({stop.detail})"  # accounting (usage.py) reads it
        # What the next attempt redoes: the time since the last checkpoint this attempt saw (all of it when
        # the job keeps none in its directory, as far as the platform can tell).
        _, saved_at = _checkpoint(ctx, job.id)
        attempt.lost_s = max(0.0, now - max(attempt.started_at, saved_at or attempt.started_at))
        job.preemptions += 1
        b.transition(job, JobStatus.HALTED, stop.detail)
        target = run.move_to if run is not None else None
        if target is None:
            b.transition(job, JobStatus.QUEUED, "requeued after preemption")
        else:
            # A move: it restarts at once where decide() meant it to, the target held for it meanwhile (a
            # stale target, its GPUs taken or its node down, sends it to the scheduler like any other).
            nodes = ", ".join(sorted({ctx.cluster.nodes[i].name for i in target.learner_nodes}))
            b.transition(job, JobStatus.QUEUED, f"restarting on {nodes}, where it was moved")
            moved = PendingStart(job.id, target, now, hint=True)
            b.after(lambda: ctx.pending.__setitem__(moved.job_id, moved))
        report.requeued.append(job.id)
    elif stop.kind is StopKind.HALT:
        attempt.retry_decision = f"halted ({stop.detail})"
        b.transition(job, JobStatus.HALTED, stop.detail)
        report.halted.append(job.id)
    elif stop.kind is StopKind.CANCEL:
        attempt.retry_decision = f"cancelled ({stop.detail})"
        b.transition(job, JobStatus.CANCELLED, stop.detail)
        report.cancelled.append(job.id)
    elif stop.kind is StopKind.RUNTIME:
        attempt.retry_decision = f"not retried: {stop.detail}"
        b.transition(job, JobStatus.FAILED, stop.detail)
        report.failed.append(job.id)
    elif stop.kind is StopKind.SMOKE:
        _smoke_passed(b, ctx, job, attempt, stop.detail)
    elif stop.kind is StopKind.EARLY_STOP:
        attempt.retry_decision = f"not retried: {stop.detail}"
        _succeeded(b, ctx, job, run, stop.detail)
    elif run is not None and run.resize_to is not None and job.status == JobStatus.PROCESSING.value:
        # Between two attempts of a resize: PROCESSING, booking nothing until the relaunch books its GPUs.
        attempt.retry_decision = f"resized: {stop.detail}"
        previous = dict(job.allocation or {})
        job.allocation = None
        pending = PendingStart(job.id, run.resize_to, now, relaunch=True, previous=previous)
        b.after(lambda: ctx.pending.__setitem__(pending.job_id, pending))
    else:  # a resize whose target was lost with a restart: start again at whatever size fits
        attempt.retry_decision = f"requeued: {stop.detail} (the new size was lost in a restart)"
        b.transition(job, JobStatus.QUEUED, "requeued: a resize was cut short by a server restart")
        report.requeued.append(job.id)


def _smoke_passed(b: Batch, ctx: Context, job: Job, attempt: Attempt, detail: str) -> None:
    """The one-GPU smoke test passed: QUEUED for the whole gang, not tested again unless it fails."""
    attempt.retry_decision = f"smoke test passed ({detail})"
    b.transition(job, JobStatus.QUEUED, f"smoke test passed ({detail}); queued for its whole gang")
    ctx.report.requeued.append(job.id)
    job_id, failures = job.id, job.failures
    job.smoke_passed = failures  # in the store too: a restarted server does not test it again
    b.after(lambda: ctx.smoke_passed.__setitem__(job_id, failures))


def _back_off(ctx: Context, job_id: str, now: float) -> None:
    low, high = LAUNCH_BACKOFF_S
    _, last = ctx.backoff.get(job_id, (0.0, low / 2))
    delay = min(high, last * 2)
    ctx.backoff[job_id] = (now + delay, delay)
    ctx.changed(job_id)


def _count(ctx: Context, outcome: Outcome) -> None:
    category = ""
    if isinstance(outcome, Failed):
        category = outcome.failure.category.value
    elif isinstance(outcome, Lost | NotLaunched):
        category = C.INFRASTRUCTURE.value
    elif isinstance(outcome, Stopped) and outcome.intent.kind is StopKind.PREEMPT:
        category = C.PREEMPTED.value
    ctx.metrics.attempt_ends.labels(stored_outcome(outcome), category).inc()


def stored(b: Batch, ctx: Context, done: StageDone) -> None:
    """A results copy finished: STORING -> COMPLETED, or FAILED if it failed."""
    if not b.claim(done.job_id):
        return
    b.after(lambda: ctx.stager.forget(done))
    job = b.job(done.job_id)
    if job is None or job.status != JobStatus.STORING.value:
        return  # cancelled while its results were copied
    if done.error is None:
        files = done.staged.files if done.staged is not None else 0
        b.transition(job, JobStatus.COMPLETED, f"results copied to {done.url} ({files} files)")
        ctx.report.completed.append(job.id)
    else:
        b.transition(job, JobStatus.FAILED, f"storing results failed: {done.error}")
        ctx.report.failed.append(job.id)


def unbook(b: Batch, ctx: Context, job_id: str, why: str) -> None:
    """Free the GPUs a job books without an attempt that could use them, and requeue a job that says its
    learners run without one (reconciliation, recovery): not the job's failure."""
    if not b.claim(job_id):
        return
    job = b.job(job_id)
    if job is None:
        return
    open_attempt = b.attempt(job_id, job.attempts)
    if open_attempt is not None and open_attempt.ended_at is None:
        return  # it has one after all (started since this was found)
    status = JobStatus(job.status)
    if status in BOOKING:
        b.transition(job, JobStatus.QUEUED, f"requeued: {why}")
        ctx.report.requeued.append(job_id)
    elif job.allocation is not None:
        job.allocation = None
        job.executor_handle = None
    else:
        return
    b.after(lambda: ctx.changed(job_id))


def _checkpoint(ctx: Context, job_id: str) -> tuple[int | None, float | None]:
    """The step of the job's latest checkpoint and when it was written (None, None: it has none)."""
    found = latest_checkpoint(ctx.dirs.checkpoints(job_id))
    if found is None:
        return None, None
    try:
        saved_at: float | None = found.stat().st_mtime
    except OSError:  # removed meanwhile (a checkpoint rotation)
        saved_at = None
    return checkpoint_step(found), saved_at


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
