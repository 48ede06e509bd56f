"""Progress reports -> what the scheduler and the queue estimates know about a running job.

A learner's runtime.report(step=...) lines arrive through executor.poll(). From them the loop learns the
attempt's step rate, and with it how much work is done (step / rate, in seconds of running) and, when a
report says how many steps there are in all (`total_steps=`) or what share is done (`progress=` in 0..1),
the job's expected duration. Without either, the expected duration stays the manifest's (or the default)
and work done is counted as time run.

Reports come often (every step). The store is written at most every Context.progress_flush_s per job (2 s
by default), all the round's updates in one transaction, and a new decision is asked for only when the
expected duration moved by more than DURATION_CHANGE (progress that matters).

A manifest's `early_stop` is watched here too: rank 0's values of its metric are counted (state.Plateau), and
once they have plateaued the run is marked for an early stop, which the next round carries out as a stop
with the usual grace (the learner checkpoints on should_preempt()); the job then ends COMPLETED, not retried.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import bindparam, update

from loadmaster.core.job import JobStatus
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.state import RunState
from loadmaster.platform.executors.base import Progress
from loadmaster.platform.store.models import Job

DURATION_CHANGE = 0.10


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def take_progress(ctx: Context, items: Iterable[Progress]) -> None:
    """Fold the reports into the runs' tracks (memory only; flush() writes them)."""
    for item in items:
        run = ctx.runs.get(item.job_id)
        if run is None or run.attempt != item.attempt or run.running_since is None:
            continue
        rule = ctx.manifest(item.job_id).early_stop
        if rule is not None and item.rank == 0 and run.early_stop is None:
            value = _number(item.report.get(rule.metric))
            if value is not None:
                run.early_stop = run.plateau.add(value, rule)
        step = _number(item.report.get("step"))
        at = _number(item.report.get("time"))
        if step is None or at is None:
            continue
        total = _number(item.report.get("total_steps"))
        fraction = _number(item.report.get("progress"))
        run.progress.add(at, int(step), total if total and total > 0 else None,
                         fraction if fraction is not None and 0.0 < fraction <= 1.0 else None)


@dataclass(frozen=True, slots=True)
class _Flush:
    run: RunState
    at: float
    work: float
    attained: float
    expected: float | None


def flush(ctx: Context, now: float) -> None:
    """Write every run's progress the store has not seen, at most every progress_flush_s per run, in one
    transaction. Every run with reports, not only those that reported this round: the last reports before a
    learner goes quiet (a long evaluation, a wait for data) would otherwise stay unwritten until its next
    report, however long that takes. A store error leaves the memory as it was: the next round writes it."""
    due = [f for run in ctx.runs.values() if (f := _due(ctx, run, now)) is not None]
    if not due:
        return
    jobs = Job.metadata.tables[Job.__tablename__]
    rows = [{"jid": f.run.job_id, "work_done_s": f.work, "attained_gpu_s": f.attained,
             "last_step": f.run.progress.last_step, "last_report_at": f.at} for f in due]
    learned = [{"jid": f.run.job_id, "expected": f.expected} for f in due if f.expected is not None]
    # Not stamped with a change number (store/changes.py): the loop's own figures, kept in its memory.
    with ctx.store.session() as s:
        s.connection().execute(
            update(jobs).where(jobs.c.id == bindparam("jid"), jobs.c.status == JobStatus.PROCESSING.value)
            .values(work_done_s=bindparam("work_done_s"), attained_gpu_s=bindparam("attained_gpu_s"),
                    last_step=bindparam("last_step"), last_report_at=bindparam("last_report_at")), rows)
        if learned:
            s.connection().execute(
                update(jobs).where(jobs.c.id == bindparam("jid"), jobs.c.status == JobStatus.PROCESSING.value)
                .values(expected_duration_s=bindparam("expected")), learned)
    for f in due:
        run = f.run
        previous = run.expected_s
        run.as_of, run.work_done_s, run.attained_gpu_s = f.at, f.work, f.attained
        run.progress.flushed_at = now
        if f.expected is not None:
            if previous is None or abs(f.expected - previous) > DURATION_CHANGE * previous:
                ctx.changed(run.job_id)  # progress that matters: the job's expected duration moved
            run.expected_s = f.expected


def _due(ctx: Context, run: RunState, now: float) -> _Flush | None:
    track = run.progress
    last = track.last_time
    if last is None or last <= run.as_of or now - track.flushed_at < ctx.progress_flush_s:
        return None
    if track.last_step is None or run.running_since is None:
        return None
    at = min(max(last, run.as_of), now)  # a learner's clock may be off; never move backwards
    span = at - run.as_of
    rate = track.steps_per_s()
    work = track.last_step / rate if rate else run.work_done_s + span
    attained = run.attained_gpu_s + run.allocation.gpus * span
    expected = None
    if rate and track.total_steps:
        expected = track.total_steps / rate
    elif track.fraction and track.fraction >= 0.01:
        expected = work / track.fraction
    return _Flush(run, at, work, attained, expected)
