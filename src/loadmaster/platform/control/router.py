"""The one router: every event of a round goes through route(), inside the round's Batch, to the one place
that starts an attempt (starting.py), the one that ends it (ending.py), or the one that stops it
(stopping.py). Starts share the batch's Statement, so two starts of one batch never take the same GPU or
port, and all of them are discarded together if the batch does not commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from loadmaster.core.job import Allocation, FailureCategory, JobStatus
from loadmaster.platform.control import ending, requests, starting, stopping
from loadmaster.platform.control.batch import Batch
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.events import (
    Adopted,
    End,
    Ended,
    Event,
    Launched,
    LaunchFailed,
    Reject,
    Requested,
    Resize,
    Staged,
    Start,
    Stop,
    Unbook,
    describe,
    job_of,
)
from loadmaster.platform.control.outcomes import Failed, of_end, of_launch_error
from loadmaster.platform.control.stages import StageDone, StageKind
from loadmaster.platform.control.state import PendingStart, Phase, StopIntent, StopKind
from loadmaster.platform.failures import Classification, read_tail

log = logging.getLogger("loadmaster.control")


def route_all(b: Batch, ctx: Context, events: Sequence[Event]) -> None:
    """Route every event, each in a savepoint of the batch (router order: what frees GPUs before what
    takes them)."""
    statement = starting.Statement(ctx.bookings.held(), set())
    b.prefetch(job for event in events if (job := job_of(event)) is not None)
    b.each(sorted(events, key=_order), lambda batch, event: route(batch, ctx, statement, event), describe)


def _order(event: Event) -> int:
    if isinstance(event, Start):
        return 2 if not event.relaunch else 1  # relaunches first: their learners keep the GPUs they had
    return 0


def route(b: Batch, ctx: Context, st: starting.Statement, event: Event) -> None:
    match event:
        case Ended():
            _ended(b, ctx, event)
        case Launched(run=run, handle=handle, ended=ended):
            if starting.launched(b, ctx, run, handle) and ended is not None:
                b.pass_on(run.job_id)
                _ended(b, ctx, Ended(ended, run))
        case LaunchFailed(run=run, error=error):
            if ending.end(b, ctx, run.job_id, run.attempt, of_launch_error(error), run):
                log.info("job %s attempt %d: launch failed: %s", run.job_id, run.attempt, error)
        case Staged(done=done):
            _staged(b, ctx, done)
        case Requested(row=row):
            requests.carry_out(b, ctx, row)
        case Stop(job_id=job_id, intent=intent, resize_to=resize_to, move_to=move_to):
            _stop(b, ctx, job_id, intent, resize_to, move_to)
        case Resize(job_id=job_id, allocation=allocation):
            _resize(b, ctx, event)
        case Reject(job_id=job_id, reason=reason):
            _reject(b, ctx, job_id, reason)
        case Start(job_id=job_id, allocation=allocation, since=since, relaunch=relaunch, previous=previous, hint=hint):
            starting.start(b, ctx, st, job_id, allocation, since, relaunch=relaunch, previous=previous, hint=hint)
        case End(job_id=job_id, attempt=attempt, outcome=outcome, run=run):
            ending.end(b, ctx, job_id, attempt, outcome, run)
        case Unbook(job_id=job_id, why=why):
            ending.unbook(b, ctx, job_id, why)
        case Adopted(run=run, status=status, without_handle=without_handle):
            starting.adopted(b, ctx, run, status, without_handle)


def _ended(b: Batch, ctx: Context, event: Ended) -> None:
    ended, run = event.ended, event.run
    stop = run.stop if run is not None else None
    if stop is None:  # a stop asked for before a restart is on the attempt row
        attempt = b.attempt(ended.job_id, ended.attempt)
        if attempt is not None and attempt.outcome == "stopping":
            stop = StopIntent.decode(attempt.retry_decision)
    failing = None if ended.succeeded or stop is not None else (ended.first_failure or next(
        (e for e in ended.exits if e.exit_code != 0), None))
    tail = read_tail(ctx.dirs.log_file(ended.job_id, ended.attempt, failing.rank)) if failing else ""
    ending.end(b, ctx, ended.job_id, ended.attempt, of_end(ended, stop, tail), run)


def _staged(b: Batch, ctx: Context, done: StageDone) -> None:
    if done.kind is StageKind.UPLOAD:
        ending.stored(b, ctx, done)
        return
    run = ctx.runs.get(done.job_id)
    if run is None or run.attempt != done.attempt or run.phase is not Phase.DOWNLOADING:
        b.after(lambda: ctx.stager.forget(done))  # the job moved on while its data was copied
        return
    if done.error is None:
        starting.staged(b, ctx, run, done)
        return
    category = FailureCategory.INCORRECT_INPUT if done.error.missing else FailureCategory.INFRASTRUCTURE
    if ending.end(b, ctx, run.job_id, run.attempt,
                  Failed(Classification(category, f"staging data failed: {done.error}")), run):
        b.after(lambda: ctx.stager.forget(done))


def _stop(b: Batch, ctx: Context, job_id: str, intent: StopIntent, resize_to: Allocation | None,
          move_to: Allocation | None = None) -> None:
    run = ctx.runs.get(job_id)
    if run is None:
        # A start still waiting for its GPUs: it simply goes back to waiting.
        if ctx.pending.get(job_id) is not None:
            b.after(lambda: requests.unpend(ctx, job_id))
        return
    stopping.stop(b, ctx, run, intent, resize_to, move_to)


def _resize(b: Batch, ctx: Context, event: Resize) -> None:
    job_id, alloc = event.job_id, event.allocation
    start = ctx.pending.get(job_id)
    if start is not None:  # not launched yet: it will start at the new size
        resized = PendingStart(job_id, alloc, start.since, start.relaunch, start.previous)

        def effect() -> None:
            ctx.pending[job_id] = resized
            ctx.changed(job_id)
            ctx.report.resized.append(job_id)

        b.after(effect)
        return
    run = ctx.runs.get(job_id)
    if run is None:
        return
    if run.phase is Phase.DOWNLOADING:
        starting.resize_staging(b, ctx, run, alloc)
        return
    why = f"resized by the scheduler from {run.allocation.learners} to {alloc.learners} learners"
    stopping.stop(b, ctx, run, StopIntent(StopKind.RESIZE, why), alloc)


def _reject(b: Batch, ctx: Context, job_id: str, reason: str) -> None:
    if not b.claim(job_id):
        return
    job = b.job(job_id)
    if job is None or job.status != JobStatus.QUEUED.value:
        return
    b.transition(job, JobStatus.FAILED, f"rejected: {reason}")
    ctx.report.rejected.append(job_id)
    b.after(lambda: ctx.changed(job_id))

