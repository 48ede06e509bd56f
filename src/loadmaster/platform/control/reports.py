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
    decide_only_s: float = 0.0  # decide() alone (the scheduling core's share of the round)
    why: list[str] = field(default_factory=list)  # what made the round decide
    read: int = 0  # job rows read from the store (the changed ones)
    events: int = 0  # hand-offs routed
    repairs: int = 0  # reconciliation's repairs
    store_error: str | None = None  # the round stopped at a store error; it is tried again
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

    @property
    def busy(self) -> bool:
        return bool(self.decided or self.events or self.repairs or self.store_error)

    def log_line(self) -> str:
        """The round in one line of key=value pairs: what changed and why."""
        parts = [f"took_ms={self.duration_s * 1000:.1f}", f"queued={self.queued}", f"running={self.running}",
                 f"read={self.read}", f"events={self.events}"]
        if self.decided:
            parts += [f"decided={'+'.join(self.why) or 'yes'}", f"decide_ms={self.decide_s * 1000:.1f}",
                      f"core_ms={self.decide_only_s * 1000:.1f}"]
        for name in ("started", "preempted", "resized", "rejected", "completed", "failed", "retried", "requeued",
                     "halted", "cancelled", "stored"):
            jobs = getattr(self, name)
            if jobs:
                parts.append(f"{name}={','.join(jobs[:5])}{'...' if len(jobs) > 5 else ''}")
        if self.repairs:
            parts.append(f"repairs={self.repairs}")
        if self.store_error:
            parts.append(f"store_error={self.store_error!r}")
        return " ".join(parts)


@dataclass
class RecoveryReport:
    """What recover() found in the store at start."""

    duration_s: float = 0.0
    reattached: list[str] = field(default_factory=list)  # learners still running (or ended meanwhile) adopted
    requeued: list[str] = field(default_factory=list)  # lost attempts ended as infrastructure failures
    restaged: list[str] = field(default_factory=list)  # DOWNLOADING redone
    restored: list[str] = field(default_factory=list)  # STORING redone
    interrupted_launches: list[str] = field(default_factory=list)  # QUEUED jobs whose launch a crash cut short
