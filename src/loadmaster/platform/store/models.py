"""Tables. Times are UNIX seconds (float): the control loop and the simulator share one time unit, and both
SQLite and PostgreSQL store it exactly. JSON columns hold what is read and written whole (manifest,
allocation, executor handle), never what is queried."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    # none_as_null: a Python None is SQL NULL (not the JSON text 'null'), so IS NULL means what it says.
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON(none_as_null=True),
                                                     list[Any]: JSON(none_as_null=True)}


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    gpu_quota: Mapped[int] = mapped_column(Integer)  # nominal: guaranteed
    borrow_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)  # None: may borrow any idle GPU
    created_at: Mapped[float] = mapped_column(Float)
    # Directories beside its own area its jobs may use: [{"path", "writable"}] (tenancy.Root); None: none.
    roots: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    # The OS user its learners run as when the server runs as root: a named user (tenant create --os-user),
    # else None and the server's uid range gives one (tenancy.DEFAULT_UID_BASE + id).
    os_user: Mapped[str | None] = mapped_column(String(64), nullable=True)
    os_uid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    os_gid: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Token(Base):
    """An API token, stored as its SHA-256. tenant_id None with is_admin: the admin token. A tenant's token
    belongs to one of its named users (one live token per user: rotating replaces it, revoking deletes it)."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    user: Mapped[str] = mapped_column(String(64), default="default", server_default="default")
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: until revoked


class AuditEntry(Base):
    """An admin action (tenant created, deleted, limits or roots set, token issued, rotated, revoked)."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    actor: Mapped[str] = mapped_column(String(160))  # "admin", or "tenant/user" for a tenant's own action
    action: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str] = mapped_column(String(64), default="")
    detail: Mapped[str] = mapped_column(Text, default="")


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String(64), default="", server_default="")  # the token's user who submitted
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON(none_as_null=True))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    # Why the scheduler left it waiting in its last round (a WaitReason value), "" when not waiting.
    wait_reason: Mapped[str] = mapped_column(String(32), default="")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    learners: Mapped[int] = mapped_column(Integer)  # current size (elastic jobs change it)
    submitted_at: Mapped[float] = mapped_column(Float)
    queued_since: Mapped[float] = mapped_column(Float)
    first_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # attempts launched so far
    failures: Mapped[int] = mapped_column(Integer, default=0)  # attempts that failed (not preemptions)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    # What is running now: {"learners": [{"rank", "node", "gpu_ids", "cpus", "mem_gb"}], "master_port"}
    allocation: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    executor_handle: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    # Progress as the scheduler sees it (JobView): work done as of a time, and GPU-seconds attained.
    work_done_s: Mapped[float] = mapped_column(Float, default=0.0)
    attained_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    run_started_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # current attempt's start
    last_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_report_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Expected run time alone: the manifest's, else learned from reported progress.
    expected_duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    halt_requested: Mapped[bool] = mapped_column(Boolean, default=False)  # user halt pending
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    target_learners: Mapped[int | None] = mapped_column(Integer, nullable=True)  # user scale request
    # --smoke-test: the job's failure count when its latest one-GPU smoke test passed (a failure since means
    # testing again); NULL: none passed. Kept here so that a restarted server does not test the job again.
    smoke_passed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The change number of the last committed write (store/changes.py): the control loop reads only rows
    # whose number passed its own, so a round costs what changed, not the size of the queue.
    change_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    __table_args__ = (
        Index("ix_jobs_tenant_status", "tenant_id", "status"),
        Index("ix_jobs_status", "status"),
        Index("ix_jobs_submitted", "submitted_at", "id"),  # the listing's order and keyset pages
        Index("ix_jobs_tenant_submitted", "tenant_id", "submitted_at", "id"),
        Index("ix_jobs_change_seq", "change_seq"),
        # Jobs that book GPUs: few, whatever the size of the history (reconciliation reads them all).
        Index("ix_jobs_booked", "id", sqlite_where=text("allocation IS NOT NULL"),
              postgresql_where=text("allocation IS NOT NULL")),
    )


class Transition(Base):
    """Every status change, with its time and reason: the job's history."""

    __tablename__ = "transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")


class Attempt(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    allocation: Mapped[dict[str, Any]] = mapped_column(JSON(none_as_null=True))
    exit_codes: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # [[rank, code], ...]
    # Open: launching (its intent is stored, the executor has not confirmed the learners), running, stopping.
    # Ended: succeeded, failed, stopped, lost, not_launched (control/outcomes.py says what each means).
    outcome: Mapped[str] = mapped_column(String(16), default="running")
    failure_category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    retry_decision: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_dir: Mapped[str] = mapped_column(Text)
    # A preempted attempt's seconds after the job's last checkpoint: the work its next attempt redoes.
    lost_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The seconds this attempt runs as its job's one-GPU smoke test (--smoke-test as it was at the start, so
    # that a server restarted with another value ends it as it began); NULL: not a test.
    smoke_test_s: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ix_attempts_job_number", "job_id", "number", unique=True),
                      Index("ix_attempts_open", "job_id", sqlite_where=text("ended_at IS NULL"),
                            postgresql_where=text("ended_at IS NULL")))


class Counter(Base):
    """Monotonic counters, bumped inside the transactions they number (store/changes.py): "jobs" numbers
    every committed change to a job, "tenants" every change to a tenant's limits."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class Estimate(Base):
    """A queue-wait estimate as made (for the estimation-error report against the actual start)."""

    __tablename__ = "estimates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    made_at: Mapped[float] = mapped_column(Float)
    estimated_start_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: not within horizon


class NodeDrain(Base):
    """A node an operator drained (`loadmaster cluster drain NODE`): nothing new lands there, and what runs
    there moves off it. Kept across restarts until undrained."""

    __tablename__ = "node_drains"

    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    drained_at: Mapped[float] = mapped_column(Float)
