"""What the API answers (pydantic, so /docs and the OpenAPI schema describe every response)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from loadmaster.core.job import JobStatus
from loadmaster.platform.control.snapshot import DEFAULT_DURATION_S
from loadmaster.platform.store.models import Attempt, Job, Tenant, Transition
from loadmaster.platform.store.tenants import TENANT_NAME_PATTERN, USER_NAME_PATTERN


class JobSummary(BaseModel):
    id: str
    name: str
    tenant: str
    user: str = ""  # the tenant's named user whose token submitted it ("admin" for the admin's)
    status: JobStatus
    status_reason: str
    wait_reason: str  # why the scheduler left it waiting in its last round ("" when not waiting)
    priority: int
    learners: int
    gpus_per_learner: int
    gpus: int
    submitted_at: float  # UNIX seconds
    queued_since: float
    first_started_at: float | None
    finished_at: float | None
    attempts: int
    failures: int
    preemptions: int
    cancel_requested: bool
    halt_requested: bool
    target_learners: int | None
    array_job: str | None = None  # an array's task: the array's first task's id (shared by all its tasks)
    array_index: int | None = None


class Submitted(JobSummary):
    """The job submitted; for an array, its first task, and every task's id in index order."""

    array_tasks: list[str] = []


class JobList(BaseModel):
    jobs: list[JobSummary]
    # Pass as `before` for the next page (the jobs after the last one here); None: this page is the last.
    next_cursor: str | None = None


class TransitionOut(BaseModel):
    from_status: JobStatus | None
    to_status: JobStatus
    at: float
    reason: str


class RankExit(BaseModel):
    rank: int
    exit_code: int


class AttemptOut(BaseModel):
    number: int
    started_at: float
    ended_at: float | None
    outcome: str  # running | succeeded | failed | stopped
    exit_codes: list[RankExit]
    failure_category: str | None
    retry_decision: str | None


class LearnerPlacement(BaseModel):
    model_config = ConfigDict(extra="ignore")
    rank: int
    node: str
    gpu_ids: list[int] = []
    cpus: float | None = None
    mem_gb: float | None = None


class AllocationOut(BaseModel):
    model_config = ConfigDict(extra="ignore")
    learners: list[LearnerPlacement]
    master_port: int | None = None


class ProgressOut(BaseModel):
    work_done_s: float
    attained_gpu_s: float
    last_step: int | None
    last_report_at: float | None
    checkpoint_step: int | None
    expected_duration_s: float | None
    run_started_at: float | None


class QueueEntryOut(BaseModel):
    job_id: str
    name: str
    tenant: str
    position: int  # 1 = next in the policy's order
    wait_reason: str
    estimated_start_at: float | None  # UNIX seconds; None = beyond the estimator's horizon or not yet estimated
    # The run time the scheduler expects of the job: its manifest's, or learned from its progress; when it has
    # neither, the default the estimates assume (1 h), and duration_guessed says so.
    expected_duration_s: float | None = None
    duration_guessed: bool = False


class QueueOut(BaseModel):
    entries: list[QueueEntryOut]
    total: int  # queued jobs the token may see, on every page
    offset: int
    limit: int
    next_offset: int | None  # the offset of the next page; None on the last


class JobDetail(JobSummary):
    manifest: dict[str, Any]
    history: list[TransitionOut]
    attempt_history: list[AttemptOut]
    progress: ProgressOut
    allocation: AllocationOut | None
    queue: QueueEntryOut | None


class RankLog(BaseModel):
    rank: int
    lines: list[str]
    truncated: bool  # earlier lines exist that are not included


class LogsOut(BaseModel):
    job_id: str
    attempt: int | None  # None: no attempt has started yet
    ranks: list[RankLog]


class ReportsOut(BaseModel):
    job_id: str
    attempt: int | None  # None: no attempt has started yet
    rank: int
    records: list[dict[str, Any]]  # runtime.report() lines: {"time", "step", "loss", ...} as the learner wrote them
    next_offset: int  # ask again from here for what is reported next
    size: int  # bytes of reports so far (next_offset == size: all read)


class ResultFile(BaseModel):
    path: str  # relative to the job's results directory, '/'-separated
    size: int
    modified_at: float


class ResultsOut(BaseModel):
    job_id: str
    files: list[ResultFile]
    total_bytes: int
    truncated: bool  # more files than one listing shows (10,000)


def _integer(value: object) -> object:
    if isinstance(value, bool | str):
        raise ValueError("must be an integer (not true/false, not text)")
    return value


# A JSON Schema integer: 4 and 4.0, never `true` or "4" (which pydantic's lax mode would take, and the schema
# does not).
Integer = Annotated[int, BeforeValidator(_integer)]
GpuCount = Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(_integer)]


class ScaleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    learners: Integer = Field(ge=1, le=1024, description="The new number of learners, within elastic min..max.")


class RootIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Absolute, no '..' segment, no NUL (the regex has no look-ahead: JSON Schema's and pydantic's both read it).
    path: str = Field(min_length=1, max_length=4096, pattern=r"^(/+([^/.\x00][^/\x00]*|\.|\.[^/.\x00][^/\x00]*|"
                                                             r"\.\.[^/\x00]+))*/*$",
                      description="An absolute directory path without '..'.")
    writable: bool = Field(default=False, description="Whether the tenant's jobs may write there (results).")


class TenantOut(BaseModel):
    name: str
    gpu_quota: int
    borrow_limit: int | None  # None: may borrow any idle GPU
    created_at: float
    gpus_in_use: int
    jobs_queued: int
    jobs_running: int
    roots: list[RootIn] = Field(default_factory=list)  # beside its own area (~) and each job's directory
    os_user: str | None = None  # a named OS user its learners run as (else the server's uid range, as root)


class TenantList(BaseModel):
    tenants: list[TenantOut]


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=TENANT_NAME_PATTERN, description="1-64 lower-case letters, digits, '.', '_', '-', "
                                                               "starting with a letter or digit.")
    gpus: GpuCount = Field(description="Nominal GPU quota (guaranteed).")
    borrow: GpuCount | None = Field(default=None,
                               description="Borrowing limit: idle GPUs beyond the quota; null: no limit.")
    user: str = Field(default="default", pattern=USER_NAME_PATTERN, description="The first user's name.")
    os_user: str | None = Field(default=None, max_length=64,
                                description="An existing OS user its learners run as (server running as root); "
                                            "absent: a uid of the server's range.")


class QuotaIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpus: GpuCount | None = Field(default=None, description="New nominal quota; absent: unchanged.")
    borrow: GpuCount | None = Field(default=None,
                               description="New borrowing limit; absent: unchanged; null: no limit.")
    roots: list[RootIn] | None = Field(default=None, max_length=64,
                                       description="Directories its jobs may use beside their own; absent: unchanged.")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(default="default", pattern=USER_NAME_PATTERN, description="The tenant's named user.")
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400,
                                       description="Seconds the token lives; absent: until revoked.")


class TokenOut(BaseModel):
    tenant: str
    token: str  # shown once: the server keeps only its hash
    user: str = "default"
    expires_at: float | None = None


class UserOut(BaseModel):
    user: str
    tokens: int
    created_at: float  # its newest token's
    expires_at: float | None  # its newest token's expiry (None: until revoked)


class UserList(BaseModel):
    tenant: str
    users: list[UserOut]


class Revoked(BaseModel):
    tenant: str
    user: str
    revoked: int  # tokens


class TenantDeleted(BaseModel):
    tenant: str
    jobs_deleted: int


class AuditOut(BaseModel):
    at: float
    actor: str
    action: str
    tenant: str
    detail: str


class AuditList(BaseModel):
    entries: list[AuditOut]


class TenantCreated(BaseModel):
    tenant: TenantOut
    token: str  # shown once: the server keeps only its hash


class WhoAmI(BaseModel):
    admin: bool
    tenant: str | None
    user: str | None = None
    gpu_quota: int | None
    borrow_limit: int | None


class NodeOut(BaseModel):
    name: str
    gpu_type: str
    rack: str
    gpus: int
    gpus_used: int
    gpus_free: int
    cpus: float
    cpus_used: float
    mem_gb: float
    mem_used_gb: float
    jobs: list[str]  # running jobs on this node that the token may see
    state: str = "alive"  # alive, dead (left the cluster) or draining (nothing new lands there)
    node_id: str = ""  # the executor's id of the node (Ray's node id); "" for the local executor
    address: str = ""
    labels: dict[str, str] = {}
    last_heartbeat_at: float | None = None  # when the executor last found it alive


class DrainOut(BaseModel):
    node: str
    state: str
    draining: list[str]  # every drained node


class RunningJobOut(BaseModel):
    id: str
    name: str
    tenant: str
    status: JobStatus
    learners: int
    gpus: int
    nodes: list[str]


class ClusterOut(BaseModel):
    name: str
    description: str
    total_gpus: int
    gpus_used: int
    gpus_free: int
    nodes: list[NodeOut]
    running: list[RunningJobOut]  # the running jobs the token may see
    other_running: int  # running jobs of other tenants (counted, not shown)


class Health(BaseModel):
    status: str  # "ok"; "stuck" (no control-loop round for too long), "store_unavailable" (503 both)
    version: str
    scheduler: bool  # a control loop is attached
    last_round_age_s: float | None = None  # seconds since the control loop's last completed round
    detail: str = ""
    # How tenants are kept apart below the API: learners sandboxed (bubblewrap), run as tenants' own users.
    sandbox: bool | None = None
    tenant_users: bool | None = None
    isolation: str = ""


def gpus_per_learner(job: Job) -> int:
    resources = job.manifest.get("resources") or {}
    return int(resources.get("gpus", 1))


def summary(job: Job, tenant: str) -> JobSummary:
    return JobSummary(**_summary_fields(partial(getattr, job), tenant))


def submitted(row: Mapping[str, Any], tenant: str, array_tasks: list[str]) -> Submitted:
    """The answer to a submission, from the job's row as store/jobs.queue_row() will write it: no ORM object
    and one model built (the submission path is hot); a column the row leaves out is unset (None)."""
    return Submitted(**_summary_fields(row.get, tenant), array_tasks=array_tasks)


def _summary_fields(get: Callable[[str], Any], tenant: str) -> dict[str, Any]:
    manifest = get("manifest")
    per = int((manifest.get("resources") or {}).get("gpus", 1))
    learners = get("learners")
    return dict(
        id=get("id"), name=get("name"), tenant=tenant, user=get("user") or "", status=JobStatus(get("status")),
        status_reason=get("status_reason"),
        wait_reason=get("wait_reason"), priority=get("priority"), learners=learners, gpus_per_learner=per,
        gpus=per * learners, submitted_at=get("submitted_at"), queued_since=get("queued_since"),
        first_started_at=get("first_started_at"), finished_at=get("finished_at"), attempts=get("attempts"),
        failures=get("failures"), preemptions=get("preemptions"), cancel_requested=get("cancel_requested"),
        halt_requested=get("halt_requested"), target_learners=get("target_learners"),
        array_job=manifest.get("array_job"), array_index=manifest.get("array_index"),
    )


def transition_out(t: Transition) -> TransitionOut:
    return TransitionOut(from_status=JobStatus(t.from_status) if t.from_status else None,
                         to_status=JobStatus(t.to_status), at=t.at, reason=t.reason)


def attempt_out(a: Attempt) -> AttemptOut:
    exits = [RankExit(rank=int(r), exit_code=int(c)) for r, c in (a.exit_codes or [])]
    return AttemptOut(number=a.number, started_at=a.started_at, ended_at=a.ended_at, outcome=a.outcome,
                      exit_codes=exits, failure_category=a.failure_category, retry_decision=a.retry_decision)


def allocation_out(raw: dict[str, Any] | None) -> AllocationOut | None:
    if not raw:
        return None
    try:
        return AllocationOut.model_validate(raw)
    except ValidationError:  # written by the control loop; a shape this API does not know is left out
        return None


def progress_out(job: Job) -> ProgressOut:
    return ProgressOut(work_done_s=job.work_done_s, attained_gpu_s=job.attained_gpu_s, last_step=job.last_step,
                       last_report_at=job.last_report_at, checkpoint_step=job.checkpoint_step,
                       expected_duration_s=job.expected_duration_s, run_started_at=job.run_started_at)


def duration_fields(expected_duration_s: float | None) -> dict[str, Any]:
    """A queue entry's expected_duration_s and duration_guessed, from the job's row."""
    if expected_duration_s is None:
        return {"expected_duration_s": DEFAULT_DURATION_S, "duration_guessed": True}
    return {"expected_duration_s": expected_duration_s, "duration_guessed": False}


def tenant_out(t: Tenant, gpus_in_use: int = 0, queued: int = 0, running: int = 0) -> TenantOut:
    roots = [RootIn(path=str(r["path"]), writable=bool(r.get("writable"))) for r in t.roots or ()
             if isinstance(r, dict) and isinstance(r.get("path"), str)]
    return TenantOut(name=t.name, gpu_quota=t.gpu_quota, borrow_limit=t.borrow_limit, created_at=t.created_at,
                     gpus_in_use=gpus_in_use, jobs_queued=queued, jobs_running=running, roots=roots,
                     os_user=t.os_user)
