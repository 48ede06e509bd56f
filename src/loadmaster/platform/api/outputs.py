"""What a job's learners produced, read-only: the records of runtime.report() (metric charts) and the files in the
job's results directory (download).

Reports are read incrementally: an answer carries the complete lines from a byte offset and the offset to ask
from next, so a chart that refreshes costs what was reported since, never the whole history again. Results are
served from the job's results directory only; a path that leaves it (.., a symbolic link pointing out) is
refused as if it did not exist.
"""

from __future__ import annotations

import json
import os
from pathlib import Path as FsPath
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import FileResponse
from sqlalchemy import func, select

from loadmaster.platform.api import actions
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import ApiError, field_error, responses
from loadmaster.platform.api.jobs import JobId
from loadmaster.platform.api.models import ReportsOut, ResultFile, ResultsOut
from loadmaster.platform.store.models import Attempt
from loadmaster.platform.store.tenants import Principal

router = APIRouter(prefix="/api/v1/jobs", tags=["outputs"])

MAX_REPORT_BYTES = 8 << 20
DEFAULT_REPORT_BYTES = 1 << 20
MAX_RESULT_FILES = 10_000


def _attempt(ctx: ApiContext, who: Principal, job_id: str, number: int | None) -> tuple[int | None, int]:
    """(the attempt asked for, or the latest; None before the first) and how many ranks it has."""
    with ctx.store.session() as s:
        job, _ = actions.visible_job(s, who, job_id)
        if number is None:
            number = s.scalar(select(func.max(Attempt.number)).where(Attempt.job_id == job.id))
            if number is None:
                return None, 0
        row = s.scalar(select(Attempt).where(Attempt.job_id == job.id, Attempt.number == number))
        if row is None:
            raise field_error(404, "attempt", f"job {job_id} has no attempt {number} (yet)")
        learners = (row.allocation or {}).get("learners")
        return number, len(learners) if isinstance(learners, list) else 0


def read_records(path: FsPath, offset: int, max_bytes: int) -> tuple[list[dict[str, Any]], int]:
    """The report records in the complete lines of `path` from `offset` (at most max_bytes of them), and the
    offset after the last complete line read. Lines that are not a JSON object are passed over."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    cut = data.rfind(b"\n")
    if cut < 0:
        # No complete line: one still being written, or (a full read) a line longer than max_bytes, passed over.
        return [], offset + (len(data) if len(data) == max_bytes else 0)
    records = []
    for line in data[:cut].split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, offset + cut + 1


@router.get("/{job_id}/reports", response_model=ReportsOut, responses=responses(401, 404, 422),
            summary="What a learner reported with runtime.report() (loss, throughput...), from a byte offset")
def reports(
    job_id: JobId, ctx: Ctx, who: Who,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000, description="Default: the latest.")] = None,
    rank: Annotated[int, Query(ge=0, le=1_000_000, description="The learner (rank 0 usually reports).")] = 0,
    offset: Annotated[int, Query(ge=0, le=1 << 50, description="Where to read from: 0, then the previous "
                                                                 "answer's next_offset.")] = 0,
    max_bytes: Annotated[int, Query(ge=1024, le=MAX_REPORT_BYTES)] = DEFAULT_REPORT_BYTES,
) -> ReportsOut:
    number, ranks = _attempt(ctx, who, job_id, attempt)
    if number is None:
        return ReportsOut(job_id=job_id, attempt=None, rank=rank, records=[], next_offset=0, size=0)
    if ranks and rank >= ranks:
        raise field_error(422, "rank", f"attempt {number} has ranks 0..{ranks - 1}; got {rank}")
    path = ctx.dirs.reports(job_id, number) / f"rank-{rank}.jsonl"
    size = path.stat().st_size if path.exists() else 0
    if offset > size:
        raise field_error(422, "offset", f"past the end of the reports ({size} bytes); start again from 0")
    records, next_offset = read_records(path, offset, max_bytes)
    return ReportsOut(job_id=job_id, attempt=number, rank=rank, records=records, next_offset=next_offset, size=size)


def _results_dir(ctx: ApiContext, who: Principal, job_id: str) -> FsPath:
    with ctx.store.session() as s:
        job, _ = actions.visible_job(s, who, job_id)
        return ctx.dirs.results(job.id)


@router.get("/{job_id}/results", response_model=ResultsOut, responses=responses(401, 404, 422),
            summary="The files in the job's results directory (what its learners wrote there)")
def results(job_id: JobId, ctx: Ctx, who: Who) -> ResultsOut:
    root = _results_dir(ctx, who, job_id)
    found: list[ResultFile] = []
    truncated = False
    if root.is_dir():
        for folder, dirs, names in os.walk(root):  # symbolic links to folders are not followed
            dirs.sort()
            for name in sorted(names):
                path = FsPath(folder) / name
                if path.is_symlink() or not path.is_file():
                    continue
                if len(found) == MAX_RESULT_FILES:
                    truncated = True
                    break
                stat = path.stat()
                found.append(ResultFile(path=path.relative_to(root).as_posix(), size=stat.st_size,
                                        modified_at=stat.st_mtime))
            if truncated:
                break
    return ResultsOut(job_id=job_id, files=found, total_bytes=sum(f.size for f in found), truncated=truncated)


@router.get("/{job_id}/results/{path:path}", responses={**responses(401, 404, 422),
                                                         200: {"content": {"application/octet-stream": {}},
                                                               "description": "The file's bytes."}},
            response_class=FileResponse, summary="Download one file of the job's results")
def result_file(job_id: JobId, ctx: Ctx, who: Who,
                path: Annotated[str, Path(min_length=1, max_length=4096,
                                          description="The file's path in the results, as the listing gives "
                                                      "it.")]) -> FileResponse:
    root = _results_dir(ctx, who, job_id)
    missing = ApiError(404, f"job {job_id} has no result file {path!r}; GET .../results lists them",
                       [("path", "no such result file")])
    wanted = FsPath(path)
    if wanted.is_absolute() or ".." in wanted.parts:
        raise missing
    target = root / wanted
    try:
        inside = target.resolve(strict=True).is_relative_to(root.resolve(strict=True))
    except OSError:
        raise missing from None
    if not inside or not target.is_file():
        raise missing
    return FileResponse(target, media_type="application/octet-stream", filename=target.name)
