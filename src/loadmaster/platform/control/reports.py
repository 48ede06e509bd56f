"""What the control loop tells its callers: the queue as the scheduler sees it, and what a round did."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class QueueEntry:
    job_id: str
    tenant: str
    position: int  # 1 = considered first in the latest round
    wait_reason: str  # a WaitReason value; "starting" while its learners wait for preempted ones to exit
    estimated_start_at: float | None  # UNIX time; None = beyond the forecast's horizon (or not forecast yet)


@dataclass
class TickReport:
    """One round. Counts are of events handled in this round."""

    at: float
    duration_s: float = 0.0
    decided: bool = False  # decide() ran (something changed, or the policy/placer asked for a new round)
    decide_s: float = 0.0  # snapshot building + decide() + applying the plan
    queued: int = 0
    running: int = 0
    started: list[str] = field(default_factory=list)  # gangs launched (or staging begun) this round
    preempted: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)  # after preemption or a lost attempt
    halted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)  # results copy begun


@dataclass
class RecoveryReport:
    """What recover() found in the store at start."""

    duration_s: float = 0.0
    reattached: list[str] = field(default_factory=list)  # learners still running (or ended meanwhile) adopted
    requeued: list[str] = field(default_factory=list)  # lost attempts ended as infrastructure failures
    restaged: list[str] = field(default_factory=list)  # DOWNLOADING redone
    restored: list[str] = field(default_factory=list)  # STORING redone
    interrupted_launches: list[str] = field(default_factory=list)  # QUEUED jobs whose launch a crash cut short
