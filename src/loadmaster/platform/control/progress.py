"""Progress reports -> what the scheduler and the queue estimates know about a running job.

A learner's runtime.report(step=...) lines arrive through executor.poll(). From them the loop learns the
attempt's step rate, and with it how much work is done (step / rate, in seconds of running) and, when a
report says how many steps there are in all (`total_steps=`) or what share is done (`progress=` in 0..1),
the job's expected duration. Without either, the expected duration stays the manifest's (or the default)
and work done is counted as time run.

Reports come often (every step). The store is written at most every Context.progress_flush_s per job (2 s
by default: 200 running jobs reporting every step cost the store 100 small updates a second, not
thousands), and a new decision is asked for only when the expected duration moved by more than
DURATION_CHANGE (progress that matters).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sqlalchemy import update

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
    for item in items:
        run = ctx.runs.get(item.job_id)
        if run is None or run.attempt != item.attempt or run.running_since is None:
            continue
        step = _number(item.report.get("step"))
        at = _number(item.report.get("time"))
        if step is None or at is None:
            continue
        total = _number(item.report.get("total_steps"))
        fraction = _number(item.report.get("progress"))
        run.progress.add(at, int(step), total if total and total > 0 else None,
                         fraction if fraction is not None and 0.0 < fraction <= 1.0 else None)
    now = ctx.clock()
    # Every run with reports the store has not seen, not only those that reported this round: the last
    # reports before a learner goes quiet (a long evaluation, a wait for data) would otherwise stay unwritten
    # until its next report, however long that takes.
    for run in ctx.runs.values():
        last = run.progress.last_time
        if last is not None and last > run.as_of and now - run.progress.flushed_at >= ctx.progress_flush_s:
            flush(ctx, run, now)


def flush(ctx: Context, run: RunState, now: float) -> None:
    """Write the run's progress to the store as of its latest report."""
    track = run.progress
    if track.last_time is None or track.last_step is None or run.running_since is None:
        return
    at = min(max(track.last_time, run.as_of), now)  # a learner's clock may be off; never move backwards
    span = at - run.as_of
    rate = track.steps_per_s()
    work = track.last_step / rate if rate else run.work_done_s + span
    attained = run.attained_gpu_s + run.allocation.gpus * span
    expected = None
    if rate and track.total_steps:
        expected = track.total_steps / rate
    elif track.fraction and track.fraction >= 0.01:
        expected = work / track.fraction
    values: dict[str, object] = {"work_done_s": work, "attained_gpu_s": attained, "last_step": track.last_step,
                                 "last_report_at": at}
    if expected is not None:
        values["expected_duration_s"] = expected
    with ctx.store.session() as s:
        s.execute(update(Job).where(Job.id == run.job_id, Job.status == JobStatus.PROCESSING.value)
                  .values(**values).execution_options(synchronize_session=False))
    previous = run.expected_s
    run.as_of, run.work_done_s, run.attained_gpu_s = at, work, attained
    track.flushed_at = now
    if expected is not None:
        if previous is None or abs(expected - previous) > DURATION_CHANGE * previous:
            ctx.dirty = True
        run.expected_s = expected

