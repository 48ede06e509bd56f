"""Asking an attempt to stop: preemption, a user's halt or cancel, a resize, a job out of time.

The stop's reason is written on the attempt row first (outcome `stopping`, the reason in retry_decision),
in the round's transaction; the learners are signalled only once it has committed (the executor's stop
protocol: preempt file, SIGTERM, SIGKILL after the grace period). So a store error leaves the learners
untouched and the stop is asked for again at the next round, and a server that restarts before the
learners exit still knows what their exit means. An attempt still downloading its data has no learners:
it ends at once.
"""

from __future__ import annotations

from loadmaster.core.job import Allocation
from loadmaster.platform.control import ending
from loadmaster.platform.control.batch import Batch
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.outcomes import Stopped
from loadmaster.platform.control.state import Phase, RunState, StopIntent, StopKind


def stop(b: Batch, ctx: Context, run: RunState, intent: StopIntent, resize_to: Allocation | None = None,
         move_to: Allocation | None = None) -> bool:
    """Ask `run` to stop for `intent` (a stronger reason replaces a weaker one). True if anything changed.
    `move_to`: a move's target (decide()'s Migrate), where the job restarts once its learners exited."""
    current = run.stop
    if current is not None and current.kind.rank >= intent.kind.rank:
        if run.move_to is not None and intent.kind is StopKind.PREEMPT and move_to != run.move_to:
            # decide() changed its mind while the job moves: preempted (its target given away), it is requeued;
            # moved again, it restarts at the new target.
            b.after(lambda: _move(ctx, run, move_to))
            return True
        return False
    if intent.kind is StopKind.RESIZE and (current is not None or run.phase is not Phase.RUNNING):
        return False  # a gang still launching, or already stopping, is resized by a later decision
    if run.phase is Phase.DOWNLOADING:
        return ending.end(b, ctx, run.job_id, run.attempt, Stopped(intent), run)
    if not b.claim(run.job_id):
        return False
    attempt = b.attempt(run.job_id, run.attempt)
    if attempt is None or attempt.ended_at is not None:
        return False
    attempt.outcome = "stopping"
    attempt.retry_decision = intent.encode()

    def effect() -> None:
        first = run.stop is None
        run.stop = intent
        if resize_to is not None:
            run.resize_to = resize_to
        # A stronger stop (a user's halt, a runtime limit) replaces the move: the job does not restart.
        run.move_to = move_to if intent.kind is StopKind.PREEMPT else None
        ctx.changed(run.job_id)
        if intent.kind is StopKind.PREEMPT:
            ctx.report.preempted.append(run.job_id)
            ctx.metrics.preemptions.inc()
        elif intent.kind is StopKind.RESIZE:
            ctx.report.resized.append(run.job_id)
        # A gang still launching is stopped once it runs (starting.launched).
        if first and run.phase is Phase.RUNNING:
            ctx.executor.stop(run.job_id, run.attempt, ctx.grace_s)

    b.after(effect)
    return True


def _move(ctx: Context, run: RunState, target: Allocation | None) -> None:
    run.move_to = target
    ctx.changed(run.job_id)


def runtime_exceeded(run: RunState, max_runtime_s: float | None, now: float) -> StopIntent | None:
    """The stop a job past its manifest's max_runtime_s (all attempts counted) is due, if any."""
    if max_runtime_s is None or run.running_since is None or run.stop is not None:
        return None
    ran = run.prior_runtime_s + (now - run.started_at)
    if ran <= max_runtime_s:
        return None
    return StopIntent(StopKind.RUNTIME, f"ran {ran:.0f} s, past max_runtime_s {max_runtime_s:g} s")


def smoke_done(ctx: Context, run: RunState, now: float) -> StopIntent | None:
    """The stop a smoke test that has run its seconds on one GPU is due: it passed, the job queues for its gang."""
    seconds = run.smoke_s
    if seconds is None or run.stop is not None or run.running_since is None or now - run.running_since < seconds:
        return None
    return StopIntent(StopKind.SMOKE, f"ran {seconds:g} s on one GPU")
