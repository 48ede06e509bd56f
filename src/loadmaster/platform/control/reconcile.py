"""Reconciliation: three truths compared, every difference repaired and logged with its reason.

- the store: which jobs book GPUs (allocation set: a partial index keeps this read small whatever the
  history), which jobs say their learners run (DOWNLOADING, PROCESSING), which attempts are open;
- the loop's memory: the attempts it watches (runs) and the starts it waits to make;
- the executor: the attempts it watches, and (survey()) the learners actually alive on its machines.

What it finds, what it does, and the kind it counts the repair as (loadmaster_reconcile_repairs_total):
- an open attempt that is not its job's current one, or of a job that holds no GPUs: closed as lost
  (stale_attempt);
- an open, current attempt the loop does not watch: adopted if its learners are found, else ended as lost
  (untracked_attempt);
- a job booking GPUs in a status that holds none (queued, halted, finished): its allocation freed
  (booked_without_attempt);
- a DOWNLOADING or PROCESSING job without an open attempt: requeued, not its failure (job_without_attempt);
- an attempt the loop watches whose learners the executor does not: ended as lost, requeued
  (attempt_without_process);
- an attempt in the loop's memory that the store has closed: dropped, its learners stopped (stale_memory);
- learners the executor watches, or finds alive, that no open attempt accounts for: killed
  (process_without_job);
- one GPU booked by two attempts: the later attempt ended as lost (double_booked).

It runs once right after recover() and then every `reconcile_s`; what it changes goes through the router
like any other hand-off (one transaction, effects after the commit).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.control import events as ev
from loadmaster.platform.control.allocation import learners_of, to_document
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.outcomes import Lost
from loadmaster.platform.control.recovery import adopt, open_attempts
from loadmaster.platform.control.state import Phase, RunState
from loadmaster.platform.store.jobs import BOOKING
from loadmaster.platform.store.models import Job

log = logging.getLogger("loadmaster.reconcile")

# An attempt the loop launched this long ago and the executor does not watch is lost (a launch in flight is
# watched by the executor only once its learners run).
SETTLE_S = 5.0


@dataclass
class Findings:
    events: list[ev.Event] = field(default_factory=list)
    repairs: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, job id, reason)
    adopted: list[RunState] = field(default_factory=list)

    def repair(self, kind: str, job_id: str, reason: str, event: ev.Event | None = None) -> None:
        self.repairs.append((kind, job_id, reason))
        if event is not None:
            self.events.append(event)


def reconcile(ctx: Context) -> Findings:
    """Compare the truths; return the repairs to route (memory-only repairs are made here)."""
    found = Findings()
    now = ctx.clock()
    attempts = open_attempts(ctx)
    with ctx.store.session() as s:
        booked = [(str(j), str(st), dict(doc or {})) for j, st, doc in
                  s.execute(select(Job.id, Job.status, Job.allocation).where(Job.allocation.is_not(None)))]
        claiming = s.execute(select(Job.id).where(Job.status.in_([st.value for st in BOOKING]))).scalars().all()
    open_keys = {(a.job_id, a.number) for a in attempts}
    current = {a.job_id for a in attempts if a.current}
    watching = ctx.executor.watching()
    ctx.load_manifests(sorted({a.job_id for a in attempts if a.job_id not in ctx.runs}))

    for attempt in attempts:
        run = ctx.runs.get(attempt.job_id)
        if run is not None and run.attempt == attempt.number:
            continue
        if not attempt.current or attempt.status not in (*BOOKING, JobStatus.QUEUED):
            found.repair("stale_attempt", attempt.job_id, f"attempt {attempt.number} open while the job is "
                                                          f"{attempt.status.value}",
                         ev.End(attempt.job_id, attempt.number, Lost("attempt left open (reconciliation)")))
            continue
        kept, event = adopt(ctx, attempt)
        if kept is not None and kept.phase is Phase.RUNNING:
            found.adopted.append(kept)
            found.repair("untracked_attempt", attempt.job_id, "adopted: its learners were found running", event)
        else:
            found.repair("untracked_attempt", attempt.job_id, "its learners could not be found",
                         ev.End(attempt.job_id, attempt.number, Lost("its learners could not be found "
                                                                     "(reconciliation)")))

    for job_id, status, _ in booked:
        if JobStatus(status) not in BOOKING:
            found.repair("booked_without_attempt", job_id, f"a {status} job booked GPUs",
                         ev.Unbook(job_id, f"a {status} job booked GPUs"))
    for job_id in claiming:
        pending = ctx.pending.get(job_id)
        if job_id not in current and not (pending is not None and pending.relaunch):
            found.repair("job_without_attempt", job_id, "no attempt of it was open",
                         ev.Unbook(job_id, "no attempt of it was running (reconciliation)"))

    for job_id, run in list(ctx.runs.items()):
        if run.key not in open_keys:
            found.repair("stale_memory", job_id, f"attempt {run.attempt} is closed in the store")
            _forget(ctx, run)
        elif (run.phase is Phase.RUNNING and run.key not in watching and run.running_since is not None
              and now - run.running_since > SETTLE_S):
            found.repair("attempt_without_process", job_id, "the executor does not watch its learners",
                         ev.End(job_id, run.attempt, Lost("its learners are gone (reconciliation)"), run))

    adopted = {r.key for r in found.adopted}
    for key in watching:
        run = ctx.runs.get(key[0])
        if (run is None or run.attempt != key[1]) and key not in open_keys and key not in adopted:
            found.repair("process_without_job", key[0], f"attempt {key[1]} has no open attempt in the store")
            ctx.executor.stop(key[0], key[1], 0.0)  # its end comes through poll(); nobody waits for it
    survey = ctx.executor.survey()
    for live in survey or ():
        key = (live.job_id, live.attempt)
        if key not in open_keys and key not in watching and key not in adopted:
            found.repair("process_without_job", live.job_id, f"learners of attempt {live.attempt} ran unaccounted")
            ctx.executor.terminate(live)

    _double_booked(ctx, booked, found)
    for kind, job_id, reason in found.repairs:
        log.warning("reconciliation: %s: job %s: %s", kind, job_id, reason)
        ctx.metrics.repairs.labels(kind).inc()
    return found


def _double_booked(ctx: Context, booked: list[tuple[str, str, dict[str, Any]]], found: Findings) -> None:
    owners: dict[tuple[str, int], list[str]] = defaultdict(list)
    for job_id, status, doc in booked:
        if JobStatus(status) in BOOKING and doc:
            for learner in learners_of(doc):
                for gpu in learner.gpu_ids:
                    owners[(learner.node, gpu)].append(job_id)
    clashing = {tuple(sorted(jobs)) for jobs in owners.values() if len(jobs) > 1}
    for jobs in clashing:
        runs = [ctx.runs[j] for j in jobs if j in ctx.runs]
        runs.sort(key=lambda r: r.started_at)
        for run in runs[1:]:
            others = ", ".join(j for j in jobs if j != run.job_id)
            found.repair("double_booked", run.job_id, f"its GPUs are booked by {others}",
                         ev.End(run.job_id, run.attempt, Lost("its GPUs were booked twice (reconciliation)"), run))


def _forget(ctx: Context, run: RunState) -> None:
    del ctx.runs[run.job_id]
    ctx.bookings.release(run.job_id, to_document(list(run.spec.learners), run.spec.master_port))
    ctx.executor.stop(run.job_id, run.attempt, 0.0)  # its end comes through poll(), as one nobody waits for
    ctx.changed(run.job_id)


def take(ctx: Context, found: Findings) -> None:
    """After the repairs committed: watch the attempts adopted."""
    for run in found.adopted:
        if run.job_id not in ctx.runs:
            ctx.runs[run.job_id] = run
            ctx.bookings.book(run.job_id, to_document(list(run.spec.learners), run.spec.master_port))
            ctx.changed(run.job_id)
