"""Users' requests, as the API leaves them in the store: cancel, halt, and scale.

The API changes a QUEUED or HALTED job itself; for a job whose attempt is in flight it sets a flag
(Job.cancel_requested, Job.halt_requested) or a size (Job.target_learners) and wakes the loop, which
stops or resizes the attempt here. Flags found on jobs that are no longer in flight (a preempted job
requeued meanwhile) are carried out directly. Only the rows with a request pending are looked at
(JobTable.requested), however long the queue.
"""

from __future__ import annotations

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform.control.batch import Batch
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.events import Requested, Stop
from loadmaster.platform.control.state import CANCELLED_BY_USER, HALTED_BY_USER, Phase, StopIntent, StopKind
from loadmaster.platform.control.stopping import stop
from loadmaster.platform.control.table import JobRow
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.snapshot import Snapshot


def pending_requests(ctx: Context) -> list[Requested]:
    """Cancel and halt requests the loop has not carried out yet."""
    out = []
    for job_id in sorted(ctx.table.requested):
        row = ctx.table.rows.get(job_id)
        if row is None or not (row.cancel_requested or row.halt_requested):
            continue
        run = ctx.runs.get(job_id)
        kind = StopKind.CANCEL if row.cancel_requested else StopKind.HALT
        if run is not None and run.stop is not None and run.stop.kind.rank >= kind.rank:
            continue  # asked for already: the learners are stopping
        out.append(Requested(row))
    return out


def carry_out(b: Batch, ctx: Context, row: JobRow) -> None:
    cancel = row.cancel_requested
    run = ctx.runs.get(row.id)
    if run is not None:
        intent = StopIntent(StopKind.CANCEL, CANCELLED_BY_USER) if cancel else \
            StopIntent(StopKind.HALT, HALTED_BY_USER)
        stop(b, ctx, run, intent)
        return
    if not b.claim(row.id):
        return
    job = b.job(row.id)
    if job is None:
        return
    status = JobStatus(job.status)
    if cancel and not status.terminal:
        b.transition(job, JobStatus.CANCELLED, CANCELLED_BY_USER)
        ctx.report.cancelled.append(job.id)
    elif not cancel and job.halt_requested and status in (JobStatus.QUEUED, JobStatus.PROCESSING,
                                                          JobStatus.DOWNLOADING):
        b.transition(job, JobStatus.HALTED, HALTED_BY_USER)
        ctx.report.halted.append(job.id)
    else:  # results are being copied (nothing left to halt), or the job ended meanwhile
        job.halt_requested = False
        return
    b.after(lambda: unpend(ctx, row.id))


def unpend(ctx: Context, job_id: str) -> None:
    """A start that waited for GPUs will not be made (the job was cancelled, halted, or preempted)."""
    ctx.pending.pop(job_id, None)
    ctx.changed(job_id)


def scaling(ctx: Context, snap: Snapshot, placer: Placer) -> list[Stop]:
    """Resizes of running jobs whose user asked for another size (Job.target_learners): smaller at once,
    larger when the extra learners fit in what is free now (same GPU type as the rest of the gang)."""
    out: list[Stop] = []
    free: FreeCapacity | None = None
    views = {v.job_id: v for v in snap.running}
    for job_id in sorted(ctx.table.requested):
        row = ctx.table.rows.get(job_id)
        target = row.target_learners if row is not None else None
        run = ctx.runs.get(job_id)
        if (row is None or target is None or target < 1 or run is None or run.stop is not None
                or run.phase is not Phase.RUNNING or job_id in ctx.pending or row.state is not JobStatus.PROCESSING):
            continue
        current = run.allocation
        if target == current.learners:
            continue
        if target < current.learners:
            nodes = current.learner_nodes[:target]
        else:
            view = views.get(job_id)
            if view is None:
                continue
            free = free or FreeCapacity(snap)
            gpu_type = (snap.cluster.nodes[current.learner_nodes[0]].gpu_type,) if current.gpus_per_learner else None
            more = placer.place(view, target - current.learners, free, snap, gpu_type)
            if not isinstance(more, Allocation):
                continue  # waits until the extra learners fit
            free.take(more)
            nodes = current.learner_nodes + more.learner_nodes
        new = Allocation(job_id, nodes, current.gpus_per_learner, current.cpus_per_learner, current.mem_gb_per_learner)
        why = f"scaled from {current.learners} to {target} learners at the user's request"
        out.append(Stop(job_id, StopIntent(StopKind.RESIZE, why), new))
    return out
