"""/api/v1/jobs: submit, list, show, cancel, halt, resume, scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import APIRouter, Path, Query, Request, Response
from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from loadmaster.core.job import JobStatus
from loadmaster.platform import admission, code
from loadmaster.platform.api import actions
from loadmaster.platform.api.auth import Ctx, Who, bearer, context, principal
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import ApiError, field_error, responses
from loadmaster.platform.api.models import (
    JobDetail,
    JobList,
    JobSummary,
    QueueEntryOut,
    ScaleIn,
    Submitted,
    allocation_out,
    attempt_out,
    duration_fields,
    progress_out,
    submitted,
    summary,
    transition_out,
)
from loadmaster.platform.api.submission import bounded_body, decode_manifest
from loadmaster.platform.manifest import JobManifest, ManifestError, array_tasks
from loadmaster.platform.store.jobs import new_job_id, queue_row
from loadmaster.platform.store.models import Attempt, Job, Tenant, Transition
from loadmaster.platform.store.tenants import Principal, get_tenant
from loadmaster.platform.tenancy import resolve_paths, tenant_area

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Path(min_length=1, max_length=32, description="A job id, as `job submit` printed it.")]

_MANIFEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The job manifest (docs/platform.md, Manifest reference), as JSON or as YAML.",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/JobManifest"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


async def _bounded_body(request: Request, max_bytes: int) -> bytes:
    too_large = ApiError(413, f"the manifest is larger than the limit of {max_bytes:,} bytes (put data in the "
                              "`data` source, not in the manifest)", [("body", "too large")])
    return await bounded_body(request, max_bytes, too_large)


@dataclass(frozen=True, slots=True)
class _Submitter:
    tenant_id: int
    tenant: str
    max_gpus: int | None  # the most GPUs the tenant may hold
    user: str
    roots: tuple[dict[str, object], ...]


def _admin_submitter(ctx: ApiContext, tenant: str | None) -> _Submitter:
    """The tenant the admin submits for."""
    if not tenant:
        raise field_error(422, "tenant", "the admin token submits on behalf of a tenant: add ?tenant=NAME, "
                                         "or submit with the tenant's own token")
    with ctx.store.session() as s:
        row = get_tenant(s, tenant)
        return _Submitter(row.id, row.name, None if row.borrow_limit is None else row.gpu_quota + row.borrow_limit,
                          "admin", tuple(row.roots or ()))


def _submitter(who: Principal, tenant: str | None) -> _Submitter:
    if tenant and tenant != who.tenant:
        raise ApiError(403, f"this token submits for tenant {who.tenant!r} only", [("tenant", "another tenant")])
    assert who.tenant_id is not None and who.tenant is not None
    return _Submitter(who.tenant_id, who.tenant, who.max_gpus, who.user, who.roots)


def _check_paths(ctx: ApiContext, manifest: JobManifest, job_id: str, by: _Submitter) -> None:
    """workdir, data and results must stay inside the job's directory, the tenant's area or its roots."""
    if manifest.workdir is None and manifest.data is None and manifest.results is None:
        return  # nothing to resolve (the usual manifest): skip building the tenant's area and roots
    area = tenant_area(ctx.dirs, by.tenant, by.roots)
    try:
        resolve_paths(manifest, ctx.dirs.job(job_id), area)
    except ManifestError as err:
        first_loc, first_msg = err.problems[0]
        raise ApiError(422, f"rejected: {first_loc}: {first_msg}", list(err.problems)) from None


def _admit(ctx: ApiContext, manifest: JobManifest, tenant: str, max_gpus: int | None) -> None:
    rejection = admission.admit(manifest, tenant, max_gpus, ctx.live_cluster())
    if rejection is not None:
        raise ApiError(422, f"rejected: {rejection.field}: {rejection.reason}", [(rejection.field, rejection.reason)])


def _check_dependencies(s: Session, manifest: JobManifest, tenant_id: int) -> None:
    """Every job a manifest depends on exists and is the same tenant's (a dependency on an unknown id would
    hold the job forever)."""
    for field in ("after", "afterany", "afterok"):
        wanted = set(getattr(manifest, field))
        if not wanted:
            continue
        found = set(s.scalars(select(Job.id).where(Job.id.in_(wanted), Job.tenant_id == tenant_id)))
        missing = sorted(wanted - found)
        if missing:
            raise field_error(422, field, f"no job {', '.join(missing)} of this tenant: give the full ids of jobs "
                                          "submitted earlier (`loadmaster job list`)")


@router.post("", status_code=201, response_model=Submitted, openapi_extra=_MANIFEST_BODY,
             responses=responses(400, 401, 403, 404, 413, 415, 422, 503),
             summary="Submit a job (the body is its manifest, JSON or YAML)")
async def submit(request: Request, ctx: Ctx, who: Who,
                 tenant: Annotated[str | None, Query(max_length=64, description="Admin only: the tenant to submit "
                                                                                "for.")] = None) -> Submitted:
    manifest = decode_manifest(await _bounded_body(request, ctx.max_body_bytes), request.headers.get("content-type"),
                               ctx.max_body_bytes)
    if who.is_admin:
        by = await run_in_threadpool(_admin_submitter, ctx, tenant)
    else:
        by = _submitter(who, tenant)
    _admit(ctx, manifest, by.tenant, by.max_gpus)
    if manifest.code is not None and not code.archive_path(ctx.dirs.root, manifest.code).is_file():
        raise field_error(422, "code", f"no code package {manifest.code} on this server: upload it first (POST "
                                       "/api/v1/code), or submit with `loadmaster job submit --working-dir DIR`")
    now = ctx.clock()
    # One job per index of an array; the first task's id names the array (Slurm's array job id).
    indices = array_tasks(manifest.array)[0] if manifest.array is not None else (None,)
    ids = [new_job_id() for _ in indices]
    tasks = [(manifest if i is None else manifest.model_copy(update={"array_index": i, "array_job": ids[0]}), task_id)
             for i, task_id in zip(indices, ids, strict=True)]
    # The paths resolve alike for every task (each inside its own job directory): one check answers for all.
    _check_paths(ctx, manifest, ids[0], by)

    def write(s: Session) -> Submitted:
        _check_dependencies(s, manifest, by.tenant_id)
        rows = [queue_row(s, by.tenant_id, task, now, job_id=task_id, user=by.user) for task, task_id in tasks]
        return submitted(rows[0], by.tenant, [r["id"] for r in rows] if manifest.array is not None else [])

    # The job and its first history row, written at commit in one INSERT per table with the submissions that
    # arrived meanwhile (group commit); the loop is woken once the batch is committed.
    return cast(Submitted, await ctx.submissions.submit(write))


async def submit_directly(request: Request) -> Response:
    """`submit` for a request without a query string, called with its dependencies as FastAPI would, and
    its answer serialised as FastAPI does for a response model (api/shortcut.py says why)."""
    ctx = await context(request)
    submitted = await submit(request, ctx, await principal(ctx, await bearer(request)))
    return Response(submitted.model_dump_json(by_alias=True), status_code=201, media_type="application/json")


_ID_PREFIX = r"^[A-Za-z0-9-]{1,32}$"
_CURSOR = r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?_[A-Za-z0-9-]{1,32}$"  # what cursor_of() writes


def cursor_of(job: Job) -> str:
    """The keyset position after `job` in the listing's order (exact: a float's repr reads back the same)."""
    return f"{job.submitted_at!r}_{job.id}"


def _parse_cursor(cursor: str) -> tuple[float, str]:
    t, sep, job_id = cursor.rpartition("_")
    try:
        if not sep or not job_id:
            raise ValueError(cursor)
        return float(t), job_id
    except ValueError:
        raise field_error(422, "before", "not a cursor: pass the `next_cursor` of the previous page as it "
                                         "was given") from None


@router.get("", response_model=JobList, responses=responses(401, 422), summary="List jobs, newest first")
def list_jobs(
    ctx: Ctx, who: Who,
    status: Annotated[list[JobStatus] | None, Query(description="Only jobs in these statuses (repeatable).")] = None,
    name: Annotated[str | None, Query(max_length=128, description="Only jobs with this name.")] = None,
    name_contains: Annotated[str | None, Query(max_length=128, description="Only jobs whose name contains this "
                                                                           "(any case).")] = None,
    id_prefix: Annotated[str | None, Query(pattern=_ID_PREFIX, description="Only jobs whose id starts with "
                                                                           "this (resolving a short id).")] = None,
    tenant: Annotated[str | None, Query(max_length=64, description="Admin only: one tenant's jobs.")] = None,
    array: Annotated[str | None, Query(pattern=_ID_PREFIX, description="Only the tasks of this array (its id: "
                                                                        "the first task's).")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    before: Annotated[str | None, Query(max_length=80, pattern=_CURSOR,
                                        description="A page's `next_cursor`: the jobs after it (keyset paging: "
                                                    "each page costs its own rows).")] = None,
) -> JobList:
    q = select(Job, Tenant.name).join(Tenant, Job.tenant_id == Tenant.id)
    if not who.is_admin:
        q = q.where(Job.tenant_id == who.tenant_id)
    elif tenant:
        q = q.where(Tenant.name == tenant)
    if status:
        q = q.where(Job.status.in_([s.value for s in status]))
    if name:
        q = q.where(Job.name == name)
    if name_contains:
        q = q.where(func.lower(Job.name).contains(name_contains.lower(), autoescape=True))
    if id_prefix:
        q = q.where(Job.id.startswith(id_prefix, autoescape=True))
    if array:
        q = q.where(Job.manifest["array_job"].as_string() == array)
    if before:
        q = q.where(tuple_(Job.submitted_at, Job.id) < tuple_(*_parse_cursor(before)))
    # Newest first, on the (tenant_id,) submitted_at, id indexes; one row more than asked says if a page follows.
    q = q.order_by(Job.submitted_at.desc(), Job.id.desc()).limit(limit + 1).offset(offset)
    with ctx.store.session() as s:
        rows = s.execute(q).all()
        page = rows[:limit]
        more = len(rows) > limit and bool(page)
        return JobList(jobs=[summary(job, t) for job, t in page],
                       next_cursor=cursor_of(page[-1][0]) if more else None)


def queue_entry(ctx: ApiContext, job_id: str, name: str, expected_duration_s: float | None) -> QueueEntryOut | None:
    e = ctx.loop.queue_entry(job_id) if ctx.loop is not None else None
    if e is None:
        return None
    return QueueEntryOut(job_id=e.job_id, name=name, tenant=e.tenant, position=e.position,
                         wait_reason=e.wait_reason, estimated_start_at=e.estimated_start_at,
                         **duration_fields(expected_duration_s))


@router.get("/{job_id}", response_model=JobDetail, responses=responses(401, 404, 422),
            summary="A job: status, history, attempts, progress, allocation, queue position")
def show(job_id: JobId, ctx: Ctx, who: Who) -> JobDetail:
    with ctx.store.session() as s:
        job, tenant = actions.visible_job(s, who, job_id)
        history = s.scalars(select(Transition).where(Transition.job_id == job.id).order_by(Transition.id))
        attempts = s.scalars(select(Attempt).where(Attempt.job_id == job.id).order_by(Attempt.number))
        detail = JobDetail(
            **summary(job, tenant).model_dump(), manifest=job.manifest,
            history=[transition_out(t) for t in history], attempt_history=[attempt_out(a) for a in attempts],
            progress=progress_out(job), allocation=allocation_out(job.allocation), queue=None,
        )
    if detail.status is JobStatus.QUEUED:
        detail.queue = queue_entry(ctx, job_id, detail.name, detail.progress.expected_duration_s)
    return detail


def _act(ctx: ApiContext, who: Principal, job_id: str, verb: Any, *args: Any) -> JobSummary:
    def write(s: Any) -> JobSummary:
        job, tenant = actions.visible_job(s, who, job_id, lock=True)
        verb(s, job, *args)
        return summary(job, tenant)

    out = actions.in_transaction(ctx.store, write, for_update=True)
    ctx.wake()
    return out


_ACTION_ERRORS = responses(401, 404, 409, 422, 503)


@router.post("/{job_id}/cancel", response_model=JobSummary, responses=_ACTION_ERRORS,
             summary="Cancel: a queued or halted job at once; a running one once its learners have stopped")
def cancel(job_id: JobId, ctx: Ctx, who: Who) -> JobSummary:
    return _act(ctx, who, job_id, actions.cancel, ctx.clock())


@router.post("/{job_id}/halt", response_model=JobSummary, responses=_ACTION_ERRORS,
             summary="Halt (resumable): a queued job at once; a running one after it checkpoints and stops")
def halt(job_id: JobId, ctx: Ctx, who: Who) -> JobSummary:
    return _act(ctx, who, job_id, actions.halt, ctx.clock())


@router.post("/{job_id}/resume", response_model=JobSummary, responses=_ACTION_ERRORS,
             summary="Resume a halted job: it queues again and restarts from its latest checkpoint")
def resume(job_id: JobId, ctx: Ctx, who: Who) -> JobSummary:
    return _act(ctx, who, job_id, actions.resume, ctx.clock())


@router.post("/{job_id}/scale", response_model=JobSummary, responses=responses(400, 401, 404, 409, 422, 503),
             summary="Change an elastic job's number of learners (within its elastic min..max)")
def scale(job_id: JobId, body: ScaleIn, ctx: Ctx, who: Who) -> JobSummary:
    return _act(ctx, who, job_id, actions.scale, body.learners)
