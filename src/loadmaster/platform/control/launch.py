"""Starting an attempt: concrete GPUs, the allocation and the attempt row in one transaction, then data
staging (DOWNLOADING) or the gang's launch, and PROCESSING once the executor has started every learner.

The order is what recovery relies on: an attempt row marked running exists before any learner does, and
the executor's handle is stored in the same transaction as the move to PROCESSING. A crash between the
two leaves a job with a running attempt and no handle, which recover() ends as an infrastructure failure.
"""

from __future__ import annotations

from enum import Enum

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform.control.allocation import (
    assign_gpus,
    keep_gpus,
    learners_of,
    pick_master_port,
    to_document,
)
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.finish import launch_failed
from loadmaster.platform.control.launcher import Launched
from loadmaster.platform.control.rows import lock_job
from loadmaster.platform.control.state import Phase, RunState, StopIntent, StopKind
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.jobs import transition
from loadmaster.platform.store.models import Attempt, Job


class Reserved(Enum):
    DONE = "done"  # staging or launch begun (or the attempt already ended in a launch failure)
    HELD = "held"  # some of its GPUs are still held by learners that are stopping: try again later
    DROPPED = "dropped"  # the job moved meanwhile (cancelled, halted): nothing to start


def attempt_spec(ctx: Context, job_id: str, attempt: int, manifest: JobManifest, learners: tuple[LearnerSpec, ...],
                 master_port: int) -> AttemptSpec:
    dirs = ctx.dirs
    return AttemptSpec(
        job_id=job_id, attempt=attempt, command=manifest.argv,
        # Without a workdir a job runs in its own directory, never in the server's.
        workdir=manifest.workdir or str(dirs.job(job_id)),
        env=dict(manifest.env), learners=learners, master_port=master_port,
        checkpoint_dir=str(dirs.checkpoints(job_id)), results_dir=str(dirs.results(job_id)),
        log_dir=str(dirs.logs(job_id, attempt)), report_dir=str(dirs.reports(job_id, attempt)),
        data_dir=str(dirs.data(job_id)) if manifest.data else None, stop_grace_s=manifest.stop_grace_s,
    )


def prior_runtime(s: Session, job_id: str) -> float:
    """Run time of the job's ended attempts (max_runtime_s counts every attempt)."""
    total = s.execute(select(func.sum(Attempt.ended_at - Attempt.started_at))
                      .where(Attempt.job_id == job_id, Attempt.ended_at.is_not(None))).scalar_one()
    return float(total or 0.0)


def reserve(ctx: Context, job_id: str, alloc: Allocation) -> Reserved:
    """Carry out a Start for a QUEUED job."""
    learners = assign_gpus(alloc, ctx.cluster, ctx.held)
    if learners is None:
        return Reserved.HELD
    manifest = ctx.manifest(job_id)
    port = pick_master_port(ctx.ports)
    now = ctx.clock()
    doc = to_document(learners, port)
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status != JobStatus.QUEUED.value or job.cancel_requested or job.halt_requested:
            return Reserved.DROPPED
        number = job.attempts + 1
        job.attempts = number
        job.allocation = doc
        job.learners = len(learners)
        job.wait_reason = ""
        if job.first_started_at is None:
            job.first_started_at = now
        s.add(Attempt(job_id=job_id, number=number, started_at=now, allocation=doc, outcome="running",
                      log_dir=str(ctx.dirs.logs(job_id, number))))
        if manifest.data:
            transition(s, job, JobStatus.DOWNLOADING, now, f"staging data from {manifest.data}")
        prior = prior_runtime(s, job_id)
        run = _run_state(ctx, job, number, manifest, tuple(learners), port, alloc, now, prior)
    _hold(ctx, doc)
    ctx.runs[job_id] = run
    ctx.report.started.append(job_id)
    if manifest.data:
        ctx.dirs.data(job_id).parent.mkdir(parents=True, exist_ok=True)
        ctx.stager.download(job_id, number, manifest.data, ctx.dirs.data(job_id))
    else:
        launch(ctx, run)
    return Reserved.DONE


def relaunch(ctx: Context, job_id: str, alloc: Allocation) -> Reserved:
    """A resized PROCESSING job's next attempt, once its previous learners have exited."""
    manifest = ctx.manifest(job_id)
    with ctx.store.session() as s:
        current = s.execute(select(Job.allocation).where(Job.id == job_id)).scalar_one_or_none()
    learners = keep_gpus(alloc, ctx.cluster, current or {}, ctx.held)
    if learners is None:
        return Reserved.HELD
    now = ctx.clock()
    with ctx.store.session() as s:
        job = lock_job(s, job_id)
        if job is None or job.status != JobStatus.PROCESSING.value:
            return Reserved.DROPPED
        old_port = int((job.allocation or {}).get("master_port", 0))
        port = pick_master_port(ctx.ports - {old_port})
        doc = to_document(learners, port)
        number = job.attempts + 1
        job.attempts = number
        job.allocation = doc
        job.learners = len(learners)
        s.add(Attempt(job_id=job_id, number=number, started_at=now, allocation=doc, outcome="running",
                      log_dir=str(ctx.dirs.logs(job_id, number))))
        prior = prior_runtime(s, job_id)
        run = _run_state(ctx, job, number, manifest, tuple(learners), port, alloc, now, prior)
    _hold(ctx, doc)
    ctx.runs[job_id] = run
    launch(ctx, run)
    return Reserved.DONE


def _run_state(ctx: Context, job: Job, number: int, manifest: JobManifest, learners: tuple[LearnerSpec, ...],
               port: int, alloc: Allocation, now: float, prior: float) -> RunState:
    spec = attempt_spec(ctx, job.id, number, manifest, learners, port)
    return RunState(job.id, number, spec, alloc, Phase.DOWNLOADING, now, prior_runtime_s=prior, as_of=now,
                    work_done_s=job.work_done_s, attained_gpu_s=job.attained_gpu_s)


def _hold(ctx: Context, doc: dict[str, object]) -> None:
    for learner in learners_of(doc):
        ctx.held.setdefault(learner.node, set()).update(learner.gpu_ids)
    ctx.ports.add(int(str(doc["master_port"])))


def launch(ctx: Context, run: RunState) -> None:
    """Have the executor start the gang of an attempt whose allocation is stored (in the background)."""
    for path in (ctx.dirs.checkpoints(run.job_id), ctx.dirs.results(run.job_id)):
        path.mkdir(parents=True, exist_ok=True)
    run.phase = Phase.LAUNCHING
    ctx.launcher.launch(run.spec)


def launched(ctx: Context, done: Launched) -> None:
    """A launch finished: PROCESSING with the executor's handle, or the attempt's end if it failed."""
    run = ctx.runs.get(done.job_id)
    if run is None or run.attempt != done.attempt or run.phase is not Phase.LAUNCHING:
        if done.handle is not None:  # nobody waits for these learners any more
            ctx.executor.stop(done.job_id, done.attempt, 0.0)
        return
    if done.handle is None:
        launch_failed(ctx, run, done.error or "unknown launch error")
        return
    now = ctx.clock()
    moved: JobStatus | None = None
    with ctx.store.session() as s:
        job = lock_job(s, run.job_id)
        status = JobStatus(job.status) if job is not None else JobStatus.CANCELLED
        if job is None or job.attempts != run.attempt or status not in (
                JobStatus.QUEUED, JobStatus.DOWNLOADING, JobStatus.PROCESSING):
            moved = status  # the user cancelled or halted it while it was being launched
        else:
            job.executor_handle = done.handle
            job.run_started_at = now
            if status is not JobStatus.PROCESSING:  # a resize's relaunch is PROCESSING already
                nodes = sorted({ls.node for ls in run.spec.learners})
                transition(s, job, JobStatus.PROCESSING, now,
                           f"{len(run.spec.learners)} learner(s) started on {', '.join(nodes)}")
    run.phase = Phase.RUNNING
    run.running_since = now
    run.as_of = now
    ctx.dirty = True
    if moved is not None:
        kind = StopKind.CANCEL if moved is JobStatus.CANCELLED else StopKind.HALT
        run.stop = StopIntent(kind, f"the job became {moved.value} while it was being launched")
        ctx.executor.stop(run.job_id, run.attempt, 0.0)
    elif run.stop is not None:  # stopped (preempted, cancelled...) while it was being launched
        ctx.executor.stop(run.job_id, run.attempt, ctx.grace_s)
    if run.early_end is not None:
        from loadmaster.platform.control.finish import attempt_ended

        early, run.early_end = run.early_end, None
        attempt_ended(ctx, early)
