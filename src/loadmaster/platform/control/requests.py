"""Users' requests, as the API leaves them in the store: cancel, halt, and scale.

The API changes a QUEUED or HALTED job itself; for a job whose attempt is in flight it sets a flag
(Job.cancel_requested, Job.halt_requested) or a size (Job.target_learners) and wakes the loop, which
stops or resizes the attempt here. Flags found on jobs that are no longer in flight (a preempted job
requeued meanwhile) are carried out directly.
"""

from __future__ import annotations

from sqlalchemy import update

from loadmaster.core.job import Allocation, IllegalTransition, JobStatus
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.rows import JobRow, lock_job
from loadmaster.platform.control.state import Phase, StopIntent, StopKind
from loadmaster.platform.control.stops import request_stop, resize
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Job
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.snapshot import Snapshot

CANCELLED_BY_USER = "cancelled by the user"
HALTED_BY_USER = "halted by the user"


def apply_requests(ctx: Context, rows: list[JobRow]) -> set[str]:
    """Act on cancel and halt flags. Returns the jobs moved out of the active statuses here (cancelled or
    halted directly); stops of attempts in flight show in the loop's memory instead."""
    gone: set[str] = set()
    for row in rows:
        if not (row.cancel_requested or row.halt_requested):
            continue
        status = row.state
        run = ctx.runs.get(row.id)
        cancel = row.cancel_requested
        if run is not None:
            intent = StopIntent(StopKind.CANCEL, CANCELLED_BY_USER) if cancel else \
                StopIntent(StopKind.HALT, HALTED_BY_USER)
            request_stop(ctx, run, intent)
            if run.job_id not in ctx.runs:  # ended at once (it was still downloading)
                gone.add(row.id)
        elif status is JobStatus.QUEUED:
            ctx.pending.pop(row.id, None)
            if _direct(ctx, row.id, JobStatus.CANCELLED if cancel else JobStatus.HALTED,
                       CANCELLED_BY_USER if cancel else HALTED_BY_USER):
                gone.add(row.id)
        elif status is JobStatus.STORING:
            if cancel and _direct(ctx, row.id, JobStatus.CANCELLED, CANCELLED_BY_USER):
                gone.add(row.id)
            else:  # results are being copied: nothing left to halt, the job completes in a moment
                with ctx.store.session() as s:
                    s.execute(update(Job).where(Job.id == row.id).values(halt_requested=False)
                              .execution_options(synchronize_session=False))
    return gone


def _direct(ctx: Context, job_id: str, new: JobStatus, reason: str) -> bool:
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None:
            return False
        try:
            transition(s, job, new, ctx.clock(), reason)
        except IllegalTransition:
            return False  # it moved under us; the next round sees where it is now
        job.cancel_requested = False
        job.halt_requested = False
    (ctx.report.cancelled if new is JobStatus.CANCELLED else ctx.report.halted).append(job_id)
    ctx.dirty = True
    return True


def apply_scaling(ctx: Context, rows: list[JobRow], snap: Snapshot, placer: Placer) -> bool:
    """Resize running jobs whose user asked for another size (Job.target_learners): smaller at once,
    larger when the extra learners fit in what is free now (same GPU type as the rest of the gang)."""
    changed = False
    free: FreeCapacity | None = None
    views = {v.job_id: v for v in snap.running}
    for row in rows:
        target = row.target_learners
        run = ctx.runs.get(row.id)
        if (target is None or target < 1 or run is None or run.stop is not None or run.phase is not Phase.RUNNING
                or row.id in ctx.pending or row.state is not JobStatus.PROCESSING):
            continue
        current = run.allocation
        if target == current.learners:
            continue
        if target < current.learners:
            nodes = current.learner_nodes[:target]
        else:
            view = views.get(row.id)
            if view is None:
                continue
            free = free or FreeCapacity(snap)
            gpu_type = (snap.cluster.nodes[current.learner_nodes[0]].gpu_type,) if current.gpus_per_learner else None
            more = placer.place(view, target - current.learners, free, snap, gpu_type)
            if not isinstance(more, Allocation):
                continue  # waits until the extra learners fit
            free.take(more)
            nodes = current.learner_nodes + more.learner_nodes
        new = Allocation(row.id, nodes, current.gpus_per_learner, current.cpus_per_learner, current.mem_gb_per_learner)
        if resize(ctx, run, new, f"scaled from {current.learners} to {target} learners at the user's request"):
            ctx.report.resized.append(row.id)
            changed = True
    return changed
