"""/api/v1/jobs/{id}/logs: each learner's stdout/stderr per attempt and rank; tail, and follow (SSE).

The stream (server-sent events) sends
    event: status   data: {"seq": K, "from_status", "to_status", "at", "reason"}   the job's K-th transition
    event: attempt  data: {"attempt": N, "ranks": [0, 1]}          when it starts following an attempt
    event: log      data: {"rank": R, "lines": ["...", ...]}         new complete lines
    event: end      data: {"attempt": N, "outcome": "...", "job_status": "...", "transitions": K}
and ends after `end` (the attempt ended, or the job ended before it started). Asked for an attempt that has
not started yet, it waits for it while the job lives. `after=K` resumes status events where a previous
stream's `end` left them, so a client following attempt after attempt misses no status change.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from loadmaster.core.job import JobStatus
from loadmaster.platform.api import actions
from loadmaster.platform.api.auth import Creds, Ctx, Who
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import field_error, responses
from loadmaster.platform.api.jobs import JobId
from loadmaster.platform.api.logfiles import Follower, tail
from loadmaster.platform.api.models import LogsOut, RankLog, TransitionOut, transition_out
from loadmaster.platform.store.models import Attempt, Transition
from loadmaster.platform.store.tenants import Principal

router = APIRouter(prefix="/api/v1/jobs", tags=["logs"])

AttemptQ = Annotated[int | None, Query(ge=1, le=1_000_000, description="Attempt number (default: the latest).")]
RankQ = Annotated[int | None, Query(ge=0, le=1_000_000, description="One learner's rank (default: every rank).")]
TailQ = Annotated[int | None, Query(ge=0, le=1_000_000, description="Only the last N lines of each rank.")]
KEEPALIVE_S = 15.0


@dataclass(frozen=True, slots=True)
class AttemptFiles:
    number: int
    ended: bool
    outcome: str
    log_dir: FsPath
    ranks: tuple[int, ...]


def _ranks(attempt: Attempt, log_dir: FsPath) -> tuple[int, ...]:
    learners = (attempt.allocation or {}).get("learners")
    if isinstance(learners, list) and learners:
        return tuple(range(len(learners)))
    found = sorted(int(p.stem.split("-", 1)[1]) for p in log_dir.glob("rank-*.log") if p.stem[5:].isdigit())
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Seen:
    """One look at the store for a stream: the attempt (None: not started yet), the job's status, and the
    job's transitions after the first `after` (for status events)."""

    files: AttemptFiles | None
    status: str
    transitions: list[TransitionOut]
    total: int  # transitions so far


def _look(ctx: ApiContext, who: Principal, job_id: str, number: int | None, after: int | None = None) -> Seen:
    """The attempt (latest when number is None) and, when `after` is given, the transitions after it."""
    with ctx.store.session() as s:
        job, _ = actions.visible_job(s, who, job_id)
        if number is None:
            number = s.scalar(select(func.max(Attempt.number)).where(Attempt.job_id == job.id))
        row = None if number is None else s.scalar(
            select(Attempt).where(Attempt.job_id == job.id, Attempt.number == number))
        files = None
        if row is not None:
            log_dir = FsPath(row.log_dir) if row.log_dir else ctx.dirs.logs(job.id, row.number)
            files = AttemptFiles(row.number, row.ended_at is not None, row.outcome, log_dir, _ranks(row, log_dir))
        new: list[TransitionOut] = []
        total = 0
        if after is not None:
            total = s.scalar(select(func.count()).select_from(Transition).where(Transition.job_id == job.id)) or 0
            if total > after:
                new = [transition_out(t) for t in s.scalars(select(Transition).where(Transition.job_id == job.id)
                                                              .order_by(Transition.id).offset(after))]
        return Seen(files, job.status, new, total)


def _find_attempt(ctx: ApiContext, who: Principal, job_id: str, number: int | None) -> tuple[AttemptFiles | None, str]:
    seen = _look(ctx, who, job_id, number)
    return seen.files, seen.status


def _check_rank(files: AttemptFiles, rank: int | None) -> tuple[int, ...]:
    if rank is None:
        return files.ranks
    if files.ranks and rank not in files.ranks:
        raise field_error(422, "rank", f"attempt {files.number} has ranks {files.ranks[0]}..{files.ranks[-1]}; "
                                       f"got {rank}")
    return (rank,)


@router.get("/{job_id}/logs", response_model=LogsOut, responses=responses(401, 404, 422),
            summary="A job's logs: one attempt (default the latest), every rank or one, optionally the tail")
def logs(job_id: JobId, ctx: Ctx, who: Who, attempt: AttemptQ = None, rank: RankQ = None,
         tail_lines: Annotated[int | None, Query(alias="tail", ge=0, le=1_000_000,
                                                 description="Only the last N lines of each rank.")] = None
         ) -> LogsOut:
    files, _ = _find_attempt(ctx, who, job_id, attempt)
    if files is None:
        if attempt is not None:
            raise field_error(404, "attempt", f"job {job_id} has no attempt {attempt} (yet)")
        return LogsOut(job_id=job_id, attempt=None, ranks=[])
    out = []
    for r in _check_rank(files, rank):
        lines, truncated, _ = tail(files.log_dir / f"rank-{r}.log", tail_lines)
        out.append(RankLog(rank=r, lines=lines, truncated=truncated))
    return LogsOut(job_id=job_id, attempt=files.number, ranks=out)


def _event(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _status_events(seen: Seen) -> list[bytes]:
    return [_event("status", {"seq": seen.total - len(seen.transitions) + i + 1, **t.model_dump(mode="json")})
            for i, t in enumerate(seen.transitions)]


REVOKED = "revoked"  # the event that ends a stream whose token no longer works


def _revoked(ctx: ApiContext, token: str) -> bool:
    return bool(token) and ctx.auth.principal(token) is None


def _revoked_event() -> bytes:
    return _event(REVOKED, {"error": "the token was revoked, rotated or expired; the stream ends"})


async def _follow(ctx: ApiContext, who: Principal, job_id: str, first: Seen, number: int | None, rank: int | None,
                  tail_n: int | None, token: str = "") -> AsyncIterator[bytes]:
    """The stream's events. Its token is looked up again at every poll, as any request's is: a stream
    outlives no revoke."""
    last_sent = time.monotonic()
    seen = first
    after = first.total
    for chunk in _status_events(first):
        yield chunk
    while seen.files is None:  # the attempt has not started yet: wait for it while the job can still run
        if JobStatus(seen.status).terminal:
            yield _event("end", {"attempt": number, "outcome": "none", "job_status": seen.status,
                                 "transitions": after})
            return
        if ctx.closing.is_set():
            return
        if time.monotonic() - last_sent > KEEPALIVE_S:
            last_sent = time.monotonic()
            yield b": waiting for the attempt to start\n\n"
        await asyncio.sleep(ctx.stream_poll_s)
        if await run_in_threadpool(_revoked, ctx, token):
            yield _revoked_event()
            return
        seen = await run_in_threadpool(_look, ctx, who, job_id, number, after)
        after = seen.total or after
        for chunk in _status_events(seen):
            last_sent = time.monotonic()
            yield chunk
    files = seen.files
    ranks = files.ranks if rank is None else (rank,)
    yield _event("attempt", {"attempt": files.number, "ranks": list(ranks)})
    followers = {}
    for r in ranks:
        path = files.log_dir / f"rank-{r}.log"
        lines, _, offset = tail(path, tail_n) if tail_n is not None else ([], False, 0)
        followers[r] = Follower(path, offset)
        if lines:
            yield _event("log", {"rank": r, "lines": lines})
    ended = files.ended
    while True:
        for r, f in followers.items():
            while True:  # once the attempt ended, read each file to its end
                new = f.read(final=ended)
                if new:
                    last_sent = time.monotonic()
                    yield _event("log", {"rank": r, "lines": new})
                if not ended or f.at_eof:
                    break
        if ended:
            seen = await run_in_threadpool(_look, ctx, who, job_id, files.number, after)
            after = seen.total or after
            for chunk in _status_events(seen):
                yield chunk
            yield _event("end", {"attempt": files.number, "outcome": seen.files.outcome if seen.files else "unknown",
                                 "job_status": seen.status, "transitions": after})
            return
        if ctx.closing.is_set():
            return
        if time.monotonic() - last_sent > KEEPALIVE_S:
            last_sent = time.monotonic()
            yield b": keepalive\n\n"
        await asyncio.sleep(ctx.stream_poll_s)
        if await run_in_threadpool(_revoked, ctx, token):
            yield _revoked_event()
            return
        seen = await run_in_threadpool(_look, ctx, who, job_id, files.number, after)
        after = seen.total or after
        for chunk in _status_events(seen):
            last_sent = time.monotonic()
            yield chunk
        # The attempt ended, or the job left the running states (its attempt row may lag a moment).
        ended = seen.files is None or seen.files.ended or JobStatus(seen.status).terminal


@router.get("/{job_id}/logs/stream", responses={
    **responses(401, 404, 422),
    200: {"description": "Server-sent events: status, attempt, log, end.", "content": {"text/event-stream": {
        "schema": {"type": "string"}}}},
}, response_class=StreamingResponse, summary="Follow a job's logs and status live until the attempt ends (SSE)")
async def stream(job_id: JobId, ctx: Ctx, who: Who, creds: Creds, attempt: AttemptQ = None, rank: RankQ = None,
                 tail_lines: Annotated[int | None, Query(alias="tail", ge=0, le=1_000_000,
                                                         description="Start with the last N lines of each rank "
                                                                     "(default: from the beginning).")] = None,
                 after: Annotated[int | None, Query(ge=0, le=1_000_000,
                                                    description="Send the job's status changes after the first N "
                                                                "(0: its whole history; default: only new ones)."
                                                    )] = None,
                 ) -> StreamingResponse:
    # Checked before the stream starts, so a bad id or rank is a JSON 4xx, not a broken stream.
    first = await run_in_threadpool(_look, ctx, who, job_id, attempt, after if after is not None else 1 << 30)
    if after is None:  # only status changes from now on
        first = Seen(first.files, first.status, [], first.total)
    if first.files is not None:
        _check_rank(first.files, rank)
    token = creds.credentials if creds is not None else ""
    return StreamingResponse(_follow(ctx, who, job_id, first, attempt, rank, tail_lines, token),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
