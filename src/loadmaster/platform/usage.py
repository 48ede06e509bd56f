"""Accounting from the store (Slurm's sacct): GPU-hours per day, tenant, user or job, and GPU use over time.

Everything is read from the attempts table: an attempt held the GPUs of its allocation from its start to
its end (an attempt still open: until now), and its outcome says what became of them:
- used: every attempt's GPU-hours;
- failed: attempts that failed (the job's fault) or were lost (the platform's: a node gone, a crash);
- preempted: attempts a preemption ended (the job resumed from its checkpoint);
- lost to preemption: of those, the GPU-hours after the job's last checkpoint (attempts.lost_s, written when
  the preempted attempt ended): the work its next attempt redid.
A window (since, until) clips each attempt to it, so usage over a window adds up to the window's share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Text, cast, or_, select
from sqlalchemy.orm import Session

from loadmaster.platform.store.models import Attempt, Job, Tenant

PREEMPTED = "requeued after preemption"  # how ending.py opens a preempted attempt's retry decision
FAILED_OUTCOMES = frozenset({"failed", "lost"})


class UsageBy(StrEnum):
    DAY = "day"
    TENANT = "tenant"
    USER = "user"  # keyed tenant/user: user names are a tenant's own, two tenants may both have an "alice"
    JOB = "job"


UNKNOWN_USER = "(unknown)"  # jobs submitted before jobs recorded their user (migration 0004)


@dataclass(frozen=True, slots=True)
class Held:
    """One attempt's hold on GPUs, clipped to the window."""

    job_id: str
    job_name: str
    tenant: str
    user: str
    start: float
    end: float
    gpus: int
    failed: bool
    preempted: bool
    lost_from: float = math.inf  # a preempted attempt's work from here to its end was lost (redone)


@dataclass
class Usage:
    key: str
    gpu_hours: float = 0.0
    failed_gpu_hours: float = 0.0
    preempted_gpu_hours: float = 0.0
    lost_gpu_hours: float = 0.0
    attempts: int = 0
    jobs: int = 0

    def add(self, held: Held, start: float, end: float) -> None:
        hours = held.gpus * max(0.0, end - start) / 3600.0
        self.gpu_hours += hours
        if held.failed:
            self.failed_gpu_hours += hours
        if held.preempted:
            self.preempted_gpu_hours += hours
        lost_s = max(0.0, end - max(start, held.lost_from))
        self.lost_gpu_hours += held.gpus * lost_s / 3600.0


def gpus_of(allocation: dict[str, Any] | None) -> int:
    if not allocation:
        return 0
    return sum(len(learner.get("gpu_ids") or ()) for learner in allocation.get("learners", ()))


def held(s: Session, since: float, until: float, tenant_id: int | None) -> Iterator[Held]:
    """The attempts that held GPUs at some moment of [since, until)."""
    # The allocation is read as text and decoded once per distinct text (a history repeats a few shapes):
    # decoding every row's JSON was most of the cost of a long history.
    q = (select(Attempt.job_id, Job.name, Tenant.name, Job.user, Attempt.started_at, Attempt.ended_at,
                cast(Attempt.allocation, Text), Attempt.outcome, Attempt.retry_decision, Attempt.lost_s)
         .join(Job, Attempt.job_id == Job.id).join(Tenant, Job.tenant_id == Tenant.id)
         .where(Attempt.started_at < until, or_(Attempt.ended_at.is_(None), Attempt.ended_at > since)))
    if tenant_id is not None:
        q = q.where(Job.tenant_id == tenant_id)
    gpus_by_text: dict[str | None, int] = {None: 0, "null": 0}
    for job_id, name, tenant, user, started, ended, text, outcome, decision, lost_s in s.connection().execute(q):
        gpus = gpus_by_text.get(text)
        if gpus is None:
            gpus = gpus_by_text[text] = gpus_of(json.loads(text))
        if gpus == 0:
            continue
        start, end = max(started, since), min(until if ended is None else ended, until)
        if end > start:
            lost_from = ended - lost_s if ended is not None and lost_s is not None else math.inf
            yield Held(job_id, name, tenant, user, start, end, gpus, outcome in FAILED_OUTCOMES,
                       decision is not None and decision.startswith(PREEMPTED), lost_from)


def _days(start: float, end: float) -> Iterator[tuple[str, float, float]]:
    """[start, end) split at UTC midnights: (YYYY-MM-DD, piece start, piece end)."""
    at = start
    while at < end:
        day = datetime.fromtimestamp(at, UTC).date()
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        cut = min(end, midnight.timestamp())
        yield day.isoformat(), at, cut
        at = cut


def _key(h: Held, by: UsageBy) -> str:
    if by is UsageBy.TENANT:
        return h.tenant
    if by is UsageBy.USER:
        return f"{h.tenant}/{h.user or UNKNOWN_USER}"
    return h.job_id


def summarise(holds: Iterable[Held], by: UsageBy) -> tuple[list[Usage], Usage]:
    """Rows by `by` (days in order; tenants, users and jobs by GPU-hours, most first) and the total."""
    rows: dict[str, Usage] = {}
    jobs: dict[str, set[str]] = {}
    total = Usage("total")
    every: set[str] = set()
    for h in holds:
        total.add(h, h.start, h.end)
        total.attempts += 1
        every.add(h.job_id)
        if by is UsageBy.DAY:
            pieces = [(day, a, b) for day, a, b in _days(h.start, h.end)]
        else:
            pieces = [(_key(h, by), h.start, h.end)]
        for key, a, b in pieces:
            row = rows.setdefault(key, Usage(key))
            row.add(h, a, b)
            row.attempts += 1
            jobs.setdefault(key, set()).add(h.job_id)
    for key, row in rows.items():
        row.jobs = len(jobs[key])
    total.jobs = len(every)
    ordered = sorted(rows.values(), key=lambda r: r.key) if by is UsageBy.DAY else \
        sorted(rows.values(), key=lambda r: (-r.gpu_hours, r.key))
    return ordered, total


def timeline(holds: Iterable[Held], since: float, until: float, step: float) -> list[float]:
    """Busy GPUs, averaged over each step of [since, until) (the last step may be shorter)."""
    # A step given as (until - since) / n can divide back to a hair above n: that is n buckets, not n + 1
    # with an empty last one.
    buckets = max(1, math.ceil((until - since) / step * (1 - 1e-12)))
    busy = [0.0] * buckets
    for h in holds:
        first = int((h.start - since) // step)
        last = min(buckets - 1, int((h.end - since) // step))
        for i in range(max(0, first), last + 1):
            a = max(h.start, since + i * step)
            b = min(h.end, since + (i + 1) * step)
            if b > a:
                busy[i] += h.gpus * (b - a)
    widths = (min(step, until - (since + i * step)) for i in range(buckets))
    return [gpu_s / w if w > 0 else 0.0 for gpu_s, w in zip(busy, widths, strict=True)]
