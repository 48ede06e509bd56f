"""The one place an attempt starts.

start() books concrete GPUs and a rendezvous port, writes the attempt row (outcome `launching`), the job's
allocation and its move out of the queue (to DOWNLOADING, or PROCESSING: a queued job holds no GPU, ever),
all in the round's transaction; only once that has committed does the loop stage the data or hand the gang
to the executor. A crash at any point after leaves a store that says which attempt was being launched, so
recovery looks for its learners (the executor's reattach without a handle) instead of starting a second.

launched() records the executor's handle when every learner runs (outcome `running`); staged() moves a job
whose data is in place from DOWNLOADING to PROCESSING and launches it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from functools import partial

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform import code
from loadmaster.platform.control.allocation import (
    HeldGpus,
    NoPort,
    assign_gpus,
    keep_gpus,
    to_document,
)
from loadmaster.platform.control.batch import ATTEMPTS, Batch
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.stages import StageDone
from loadmaster.platform.control.state import PendingStart, Phase, RunState
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.models import Attempt
from loadmaster.platform.tenancy import prepare_job_dirs
from loadmaster.runtime import env as contract

log = logging.getLogger("loadmaster.control")


class Started(Enum):
    DONE = "done"  # the attempt exists; staging or launch begins once the batch commits
    HELD = "held"  # some of its GPUs are still held by learners that are stopping: try again later
    DROPPED = "dropped"  # the job moved meanwhile (cancelled, halted): nothing to start


@dataclass
class Statement:
    """The GPUs and ports a batch's starts have taken so far, on top of what the loop's attempts hold:
    discarded with the batch if it does not commit."""

    taken: HeldGpus
    ports: set[int] = field(default_factory=set)


def attempt_spec(ctx: Context, job_id: str, attempt: int, manifest: JobManifest, learners: tuple[LearnerSpec, ...],
                 master_port: int) -> AttemptSpec:
    dirs = ctx.dirs
    t = ctx.tenancy(job_id)
    code_dir = dirs.code(job_id, attempt) if manifest.code else None
    if code_dir is not None:  # the package's copy for this attempt; workdir is a directory inside it
        workdir = str(code_dir / (manifest.workdir or "."))
    else:  # without a workdir a job runs in its own directory, never in the server's
        workdir = t.paths.workdir if t.paths is not None else str(dirs.work(job_id))
    return AttemptSpec(
        job_id=job_id, attempt=attempt, command=manifest.argv, workdir=workdir,
        code_archive=str(code.archive_path(dirs.root, manifest.code)) if manifest.code else None,
        code_dir=str(code_dir) if code_dir is not None else None,
        env=dict(manifest.env) | array_env(manifest), learners=learners, master_port=master_port,
        checkpoint_dir=str(dirs.checkpoints(job_id)), results_dir=str(dirs.results(job_id)),
        log_dir=str(dirs.logs(job_id, attempt)), report_dir=str(dirs.reports(job_id, attempt)),
        data_dir=str(dirs.data(job_id)) if manifest.data else None, stop_grace_s=manifest.stop_grace_s,
        run_as=None if t.run_as is None else (t.run_as.uid, t.run_as.gid), binds=t.binds(), refusal=t.problem,
        home=str(t.area.home),
    )


def array_env(manifest: JobManifest) -> dict[str, str]:
    """An array task's index and array id, for every learner (none for other jobs)."""
    if manifest.array_index is None or manifest.array_job is None:
        return {}
    return {contract.ARRAY_INDEX: str(manifest.array_index), contract.ARRAY_JOB_ID: manifest.array_job}


def prior_runtime(s: Session, job_id: str) -> float:
    """Run time of the job's ended attempts (max_runtime_s counts every attempt)."""
    total = s.execute(select(func.sum(Attempt.ended_at - Attempt.started_at))
                      .where(Attempt.job_id == job_id, Attempt.ended_at.is_not(None))).scalar_one()
    return float(total or 0.0)


def start(b: Batch, ctx: Context, st: Statement, job_id: str, alloc: Allocation, since: float, *,
          relaunch: bool = False, previous: dict[str, object] | None = None, hint: bool = False) -> Started:
    """Carry out a Start (relaunch: a resized job's next attempt, PROCESSING throughout; hint: a moved job's
    restart at its move's target)."""
    if relaunch:
        learners = keep_gpus(alloc, ctx.cluster, previous or {}, st.taken)
    else:
        learners = assign_gpus(alloc, ctx.cluster, st.taken)
    if learners is None:
        b.after(lambda: _wait(ctx, job_id, alloc, since, relaunch, previous, hint))
        return Started.HELD
    job = b.job(job_id)
    wanted = JobStatus.PROCESSING if relaunch else JobStatus.QUEUED
    if (job is None or job.status != wanted.value or job.cancel_requested or job.halt_requested
            or (relaunch and job.allocation is not None) or job_id in ctx.runs or not b.claim(job_id)):
        b.after(lambda: _drop(ctx, job_id))
        return Started.DROPPED
    manifest = ctx.manifest(job_id)
    try:
        port = ctx.bookings.pick_port(st.ports)
    except NoPort:
        b.after(lambda: _wait(ctx, job_id, alloc, since, relaunch, previous, hint))
        return Started.HELD
    doc = to_document(learners, port)
    now = b.now
    number = job.attempts + 1
    job.attempts = number
    job.allocation = doc
    job.learners = len(learners)
    job.wait_reason = ""
    if job.first_started_at is None:
        job.first_started_at = now
    data = bool(manifest.data) and not relaunch
    smoke = None if relaunch else ctx.smoke_test(job_id, alloc.gpus, job.failures, job.target_learners)
    b.insert(ATTEMPTS, {"job_id": job_id, "number": number, "started_at": now, "ended_at": None, "allocation": doc,
                        "exit_codes": None, "outcome": "launching", "failure_category": None, "retry_decision": None,
                        "log_dir": str(ctx.dirs.logs(job_id, number)), "lost_s": None, "smoke_test_s": smoke})
    nodes = ", ".join(sorted({ls.node for ls in learners}))
    if data:
        b.transition(job, JobStatus.DOWNLOADING, f"staging data from {manifest.data}")
    elif not relaunch:
        b.transition(job, JobStatus.PROCESSING, f"{len(learners)} learner(s) launching on {nodes}")
    ctx.tenancy_now(b.tenant(job.tenant_id), job_id)  # the tenant's roots and user as they are now
    spec = attempt_spec(ctx, job_id, number, manifest, tuple(learners), port)
    # Only a job with a time limit needs what its earlier attempts ran (max_runtime_s counts them all).
    prior = prior_runtime(b.s, job_id) if manifest.max_runtime_s is not None and number > 1 else 0.0
    run = RunState(job_id, number, spec, alloc, Phase.DOWNLOADING if data else Phase.LAUNCHING, now,
                   prior_runtime_s=prior, as_of=now, work_done_s=job.work_done_s, attained_gpu_s=job.attained_gpu_s,
                   smoke_s=smoke)
    for learner in learners:
        st.taken.setdefault(learner.node, set()).update(learner.gpu_ids)
    st.ports.add(port)

    def effect() -> None:
        ctx.pending.pop(job_id, None)
        ctx.backoff.pop(job_id, None)
        ctx.runs[job_id] = run
        ctx.bookings.book(job_id, doc)
        ctx.changed(job_id)
        ctx.report.started.append(job_id)
        if data:
            ctx.download(job_id, number)
        else:
            launch(ctx, run)

    b.after(effect)
    return Started.DONE


def _wait(ctx: Context, job_id: str, alloc: Allocation, since: float, relaunch: bool,
          previous: dict[str, object] | None, hint: bool = False) -> None:
    if job_id not in ctx.pending:
        ctx.changed(job_id)
    ctx.pending[job_id] = PendingStart(job_id, alloc, since, relaunch, previous, hint)


def stale_target(ctx: Context, alloc: Allocation, down: Collection[str]) -> str | None:
    """Why a moved job's target can no longer be had (None: it is free, or held only by learners that are
    stopping): a node of it is down (dead or drained), or GPUs of it are held by attempts that are not
    stopping (a job started there meanwhile). Then the job is placed anew rather than waiting for them."""
    names = [n.name for n in ctx.cluster.nodes]
    wanted: dict[str, int] = {}
    for i in alloc.learner_nodes:
        if i >= len(names):
            return "its nodes left the cluster"
        wanted[names[i]] = wanted.get(names[i], 0) + alloc.gpus_per_learner
    for node, gpus in wanted.items():
        if node in down:
            return f"node {node} is down or drained"
        owners = ctx.bookings.owners.get(node, {})
        kept = sum(1 for job in owners.values() if _staying(ctx, job))
        if ctx.cluster.nodes[ctx.node_index[node]].gpus - kept < gpus:
            return f"its GPUs on {node} were taken meanwhile"
    return None


def _staying(ctx: Context, job_id: str) -> bool:
    """Whether the attempt holding a GPU keeps it: not stopping for good (a resize keeps some of its GPUs)."""
    run = ctx.runs.get(job_id)
    return run is None or run.stop is None or not run.stop.kind.frees_resources


def _drop(ctx: Context, job_id: str) -> None:
    if ctx.pending.pop(job_id, None) is not None:
        ctx.changed(job_id)


def launch(ctx: Context, run: RunState) -> None:
    """Hand the gang of an attempt whose allocation is stored to the executor (in a launch thread)."""
    run.phase = Phase.LAUNCHING
    ctx.launcher.launch(run.spec, partial(prepare_job_dirs, ctx.dirs, run.job_id, ctx.tenancy(run.job_id),
                                          data=run.spec.data_dir is not None))


def launched(b: Batch, ctx: Context, run: RunState, handle: dict[str, object]) -> bool:
    """Every learner of the attempt runs: keep the executor's handle with the attempt. False when nothing was
    recorded (the next round sees the launch again, or the attempt had ended already)."""
    if not b.claim(run.job_id):
        return False  # handled at the next round (the launcher keeps the result until it is forgotten)
    job = b.job(run.job_id)
    attempt = b.attempt(run.job_id, run.attempt)
    key = run.key
    if job is None or attempt is None or attempt.ended_at is not None:
        # The attempt was ended meanwhile (reconciliation): these learners belong to nobody.
        def orphaned() -> None:
            ctx.launcher.forget(key)
            ctx.executor.stop(*key, 0.0)

        b.after(orphaned)
        return False
    now = b.now
    if attempt.outcome == "launching":
        attempt.outcome = "running"
    job.executor_handle = dict(handle)
    job.run_started_at = now

    def effect() -> None:
        ctx.launcher.forget(key)
        run.phase = Phase.RUNNING
        run.running_since = now
        run.as_of = now
        ctx.changed(run.job_id)
        if run.stop is not None:  # asked to stop while it was being launched: now there is something to stop
            ctx.executor.stop(run.job_id, run.attempt, ctx.grace_s)

    b.after(effect)
    return True


def staged(b: Batch, ctx: Context, run: RunState, done: StageDone) -> None:
    """The data is in place: PROCESSING, and launch the gang."""
    if not b.claim(run.job_id):
        return
    job = b.job(run.job_id)
    if job is None or job.status != JobStatus.DOWNLOADING.value or job.attempts != run.attempt:
        b.after(lambda: ctx.stager.forget(done))
        return
    nodes = ", ".join(sorted({ls.node for ls in run.spec.learners}))
    b.transition(job, JobStatus.PROCESSING, f"data staged; {len(run.spec.learners)} learner(s) "
                                                     f"launching on {nodes}")

    def effect() -> None:
        ctx.stager.forget(done)
        ctx.changed(run.job_id)
        launch(ctx, run)

    b.after(effect)


def resize_staging(b: Batch, ctx: Context, run: RunState, alloc: Allocation) -> bool:
    """A Resize of an attempt still downloading its data: only the reservation changes."""
    job = b.job(run.job_id)
    attempt = b.attempt(run.job_id, run.attempt)
    if job is None or job.allocation is None or attempt is None or not b.claim(run.job_id):
        return False
    held = ctx.bookings.held()
    learners = keep_gpus(alloc, ctx.cluster, job.allocation, held)
    if learners is None:
        return False
    old = dict(job.allocation)
    doc = to_document(learners, int(old["master_port"]))
    job.allocation = doc
    job.learners = len(learners)
    attempt.allocation = doc

    def effect() -> None:
        ctx.bookings.release(run.job_id, old)
        ctx.bookings.book(run.job_id, doc)
        run.allocation = alloc
        run.spec = attempt_spec(ctx, run.job_id, run.attempt, ctx.manifest(run.job_id), tuple(learners),
                                run.spec.master_port)
        ctx.changed(run.job_id)
        ctx.report.resized.append(run.job_id)

    b.after(effect)
    return True


def adopted(b: Batch, ctx: Context, run: RunState, status: JobStatus, found_without_handle: bool) -> None:
    """Learners of an open attempt found running after a restart: the store says so (a launch cut short
    before its confirmation is now `running`; a job an older server left QUEUED with its learners running is
    PROCESSING)."""
    if not b.claim(run.job_id):
        return
    job = b.job(run.job_id)
    attempt = b.attempt(run.job_id, run.attempt)
    if job is None or attempt is None or attempt.ended_at is not None:
        return
    if attempt.outcome == "launching":
        attempt.outcome = "running"
    if job.run_started_at is None:
        job.run_started_at = run.running_since
    if status is JobStatus.QUEUED and job.status == JobStatus.QUEUED.value:
        b.transition(job, JobStatus.PROCESSING, "learners found running after a server restart")
    if found_without_handle:
        b.after(lambda: log.info("job %s attempt %d: learners of a launch cut short by a restart found and "
                                 "adopted", run.job_id, run.attempt))
