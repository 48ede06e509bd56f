"""What the router routes: everything that moves an attempt or a job, as a type.

Events come from the world (the executor, the launch and staging threads), from users (requests in the
store), from the clock (max_runtime_s), from decide() (a Plan) and from reconciliation. Each is handled by
router.route() inside a Batch: one transaction for all the events of a round's step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform.control.outcomes import Outcome
from loadmaster.platform.control.stages import StageDone
from loadmaster.platform.control.state import RunState, StopIntent
from loadmaster.platform.control.table import JobRow
from loadmaster.platform.executors.base import AttemptEnded, LaunchError
from loadmaster.scheduling.plan import Reject as Reject  # decide()'s own, routed as they are
from loadmaster.scheduling.plan import Resize as Resize


@dataclass(frozen=True, slots=True)
class Ended:
    """The executor reports every learner of an attempt exited (run: the loop's, None if it has none)."""

    ended: AttemptEnded
    run: RunState | None


@dataclass(frozen=True, slots=True)
class Launched:
    run: RunState
    handle: dict[str, Any]
    ended: AttemptEnded | None = None  # its learners have ended already: the end is recorded in the same batch


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    run: RunState
    error: LaunchError | str


@dataclass(frozen=True, slots=True)
class Staged:
    """A data copy (DOWNLOADING) or a results copy (STORING) finished, or failed."""

    done: StageDone


@dataclass(frozen=True, slots=True)
class Requested:
    """A user's cancel or halt, as the API left it in the store."""

    row: JobRow


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop an attempt for `intent` (preemption, max_runtime_s, a resize to `resize_to`, a move to `move_to`)."""

    job_id: str
    intent: StopIntent
    resize_to: Allocation | None = None
    move_to: Allocation | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """decide()'s Start, or a start waiting for GPUs, or a resized job's relaunch."""

    job_id: str
    allocation: Allocation
    since: float
    relaunch: bool = False
    previous: dict[str, Any] | None = None  # a relaunch's former allocation (learners that stay keep GPUs)
    hint: bool = False  # a moved job's restart at its move's target (state.PendingStart.hint)


@dataclass(frozen=True, slots=True)
class End:
    """End an attempt with a known outcome (reconciliation, recovery): `run` if the loop has one."""

    job_id: str
    attempt: int
    outcome: Outcome
    run: RunState | None = None


@dataclass(frozen=True, slots=True)
class Unbook:
    """A job books GPUs, or says its learners run, without an attempt that could use them (reconciliation,
    recovery): free them, and requeue a DOWNLOADING or PROCESSING job (not the job's failure)."""

    job_id: str
    why: str


@dataclass(frozen=True, slots=True)
class Adopted:
    """Learners of an open attempt found running after a restart (recovery, reconciliation)."""

    run: RunState
    status: JobStatus  # the job's status when found
    without_handle: bool  # found by the attempt's identity: its launch was never confirmed


Event = Ended | Launched | LaunchFailed | Staged | Requested | Stop | Resize | Reject | Start | End | Unbook | Adopted


def job_of(event: Event) -> str | None:
    """The job an event is about."""
    match event:
        case Ended(ended=ended):
            return ended.job_id
        case Staged(done=done):
            return done.job_id
        case Requested(row=row):
            return row.id
        case Launched(run=run) | LaunchFailed(run=run) | Adopted(run=run):
            return run.job_id
        case _:
            return event.job_id


def describe(event: Event) -> str:
    """For the log: the event's kind and job."""
    return f"{type(event).__name__.lower()} of {job_of(event)}"
