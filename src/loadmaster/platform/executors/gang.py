"""The life of one attempt as a gang: who exited how, whether a stop is under way, when SIGKILL is due.

Shared by every executor so that gang semantics (base.py) are decided in one place; executors only feed
it exits and carry out what it asks (signal the learners still alive).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loadmaster.platform.executors.base import AttemptEnded, AttemptSpec, LaunchError, LearnerExit

# Why the stop protocol runs: stop() was called, or a learner failed and the gang goes down with it.
STOP = "stop"
GANG_FAILURE = "gang_failure"

# The exit code reported for a learner whose supervisor vanished without recording the learner's own code
# (killed shim, lost Ray actor). -SIGKILL: the likeliest cause is the OOM killer or an operator's kill -9.
LOST_EXIT_CODE = -9


@dataclass(frozen=True, slots=True)
class StopRequest:
    """What the preempt file says: why the stop began, whether stop() was called (also after a gang
    failure began it), and when the learners still alive get SIGKILL (unix time)."""

    reason: str
    kill_at: float
    stopped: bool

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "kill_at": self.kill_at, "stopped": self.stopped}) + "\n"

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> StopRequest | None:
        if data is None or not isinstance(data.get("kill_at"), int | float):
            return None
        reason = str(data.get("reason", STOP))
        return StopRequest(reason, float(data["kill_at"]), bool(data.get("stopped", reason == STOP)))


@dataclass
class Gang:
    job_id: str
    attempt: int
    ranks: tuple[int, ...]
    exits: dict[int, int] = field(default_factory=dict)
    first_failure: LearnerExit | None = None
    stopped: bool = False  # stop() was called (whatever else happened)
    stop_reason: str | None = None  # set once the stop protocol runs
    kill_at: float | None = None
    killed: bool = False  # SIGKILL has been sent to the learners alive at kill_at
    lost: set[int] = field(default_factory=set)  # ranks whose node left the cluster

    @property
    def done(self) -> bool:
        return len(self.exits) == len(self.ranks)

    @property
    def alive(self) -> tuple[int, ...]:
        return tuple(r for r in self.ranks if r not in self.exits)

    def record_exit(self, rank: int, code: int) -> bool:
        """Note that `rank` exited with `code`. True when this exit is the gang's first failure, so the
        caller must stop the others. Failures after a stop began are its consequences, not the cause."""
        if rank in self.exits:
            return False
        self.exits[rank] = code
        if code != 0 and self.stop_reason is None and self.first_failure is None:
            self.first_failure = LearnerExit(rank, code)
            return True
        return False

    def request_stop(self, reason: str, grace_s: float, now: float) -> StopRequest:
        """Begin (or tighten) the stop protocol; returns the request to publish in the preempt file."""
        if reason == STOP:
            self.stopped = True
        if self.stop_reason is None:
            self.stop_reason = reason
        kill_at = now + max(0.0, grace_s)
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)
        return StopRequest(self.stop_reason, self.kill_at, self.stopped)

    def adopt_stop(self, request: StopRequest) -> None:
        """Restore a stop that was under way before a server restart (from the preempt file)."""
        self.stop_reason = request.reason
        self.stopped = request.stopped
        self.kill_at = request.kill_at

    def replay(self, exits: Mapping[int, tuple[int, int]], stop: tuple[int, StopRequest] | None) -> bool:
        """Rebuild the state after a server restart from the files, in the order things happened:
        `exits` maps rank -> (exit file mtime, code), `stop` is (preempt file mtime, its request). An exit
        before the stop request is a cause (the first failure), one after it a consequence. True when a
        failure is on record but no stop began (the server died in between): the caller must stop now."""
        events = [(mtime, rank, code) for rank, (mtime, code) in exits.items()]
        if stop is not None:
            events.append((stop[0], -1, 0))
        for _, rank, code in sorted(events):
            if rank == -1 and stop is not None:
                self.adopt_stop(stop[1])
            else:
                self.record_exit(rank, code)
        return self.first_failure is not None and self.stop_reason is None and not self.done

    def kill_due(self, now: float) -> bool:
        return self.kill_at is not None and not self.killed and now >= self.kill_at and not self.done

    def ended(self) -> AttemptEnded:
        return AttemptEnded(
            job_id=self.job_id,
            attempt=self.attempt,
            exits=tuple(LearnerExit(r, self.exits[r]) for r in sorted(self.exits)),
            stopped=self.stopped,
            first_failure=self.first_failure,
            lost=tuple(sorted(self.lost)),
        )


def grace_for(spec: AttemptSpec, default_s: float) -> float:
    """Seconds between SIGTERM and SIGKILL for this attempt: the manifest's stop_grace_s, else `default_s`."""
    return default_s if spec.stop_grace_s is None else spec.stop_grace_s


def check_spec(spec: AttemptSpec) -> None:
    """Refuse specs no executor can launch, naming the field and the fix (raised as LaunchError)."""
    where = f"job {spec.job_id} attempt {spec.attempt}"
    if spec.refusal is not None:  # the job's paths are outside its tenant's roots now: its input, not the machine
        raise LaunchError(f"{where}: {spec.refusal}", user_error=True)
    if not spec.command:
        raise LaunchError(f"{where}: the command is empty; give the job a command to run")
    ranks = sorted(learner.rank for learner in spec.learners)
    if not ranks:
        raise LaunchError(f"{where}: no learners; an attempt needs at least one learner")
    if ranks != list(range(len(ranks))):
        raise LaunchError(f"{where}: learner ranks must be 0..{len(ranks) - 1}, each once; got {ranks}")
    if not 0 < spec.master_port < 65536:
        raise LaunchError(f"{where}: master_port {spec.master_port} is not a TCP port (1..65535)")
