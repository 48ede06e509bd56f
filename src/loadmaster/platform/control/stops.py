"""Stopping an attempt: preemption, a user's halt or cancel, a resize, a job out of time.

The stop protocol is the executor's (preempt file, SIGTERM, SIGKILL after the grace period); the loop
records why it asked on the attempt row first (outcome "stopping", the reason in retry_decision), so a
server that restarts before the learners exit still knows what their exit means. An attempt still
downloading its data has no learners: it ends at once.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import update

from loadmaster.core.job import Allocation
from loadmaster.platform.control.allocation import keep_gpus, learners_of, to_document
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.finish import Ending, end_run
from loadmaster.platform.control.rows import lock_job
from loadmaster.platform.control.state import Phase, RunState, StopIntent, StopKind
from loadmaster.platform.store.models import Attempt


def request_stop(ctx: Context, run: RunState, intent: StopIntent) -> bool:
    """Ask `run` to stop for `intent` (a stronger reason replaces a weaker one). True if anything changed."""
    current = run.stop
    if current is not None and current.kind.rank >= intent.kind.rank:
        return False
    run.stop = intent
    ctx.dirty = True
    if run.phase is Phase.DOWNLOADING:
        end_run(ctx, run, Ending())
        return True
    with ctx.store.session() as s:
        s.execute(update(Attempt).where(Attempt.job_id == run.job_id, Attempt.number == run.attempt)
                  .values(outcome="stopping", retry_decision=intent.encode())
                  .execution_options(synchronize_session=False))
    if current is None and run.phase is Phase.RUNNING:  # a gang still launching is stopped once it runs
        ctx.executor.stop(run.job_id, run.attempt, ctx.grace_s)
    return True


def resize(ctx: Context, run: RunState, alloc: Allocation, why: str) -> bool:
    """Carry out a Resize. Learners running: stop them, relaunch at the new size once they exited
    (checkpoint/restart). Still downloading: only the reservation changes. False if it cannot be done now."""
    if run.stop is not None or run.phase is Phase.LAUNCHING:
        return False
    if run.phase is Phase.RUNNING:
        run.resize_to = alloc
        return request_stop(ctx, run, StopIntent(StopKind.RESIZE, why))
    with ctx.store.session() as s:
        job = lock_job(s, run.job_id)
        if job is None or job.allocation is None:
            return False
        learners = keep_gpus(alloc, ctx.cluster, job.allocation, ctx.held)
        if learners is None:
            return False
        doc = to_document(learners, int(job.allocation["master_port"]))
        job.allocation = doc
        job.learners = len(learners)
        attempt = s.query(Attempt).filter_by(job_id=run.job_id, number=run.attempt).one_or_none()
        if attempt is not None:
            attempt.allocation = doc
    for learner in learners_of(doc):
        ctx.held.setdefault(learner.node, set()).update(learner.gpu_ids)
    run.allocation = alloc
    run.spec = replace(run.spec, learners=tuple(learners))
    ctx.dirty = True
    return True


def enforce_runtime(ctx: Context, run: RunState, max_runtime_s: float | None, now: float) -> bool:
    """Stop a job that has run longer than its manifest's max_runtime_s (all attempts counted)."""
    if max_runtime_s is None or run.running_since is None or run.stop is not None:
        return False
    ran = run.prior_runtime_s + (now - run.started_at)
    if ran <= max_runtime_s:
        return False
    return request_stop(ctx, run, StopIntent(StopKind.RUNTIME,
                                             f"ran {ran:.0f} s, past max_runtime_s {max_runtime_s:g} s"))
