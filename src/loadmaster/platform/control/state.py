"""The control loop's memory of attempts in flight. Everything here can be rebuilt from the store
(recover()): the attempt rows say which attempt runs and whether a stop was asked for and why.

The memory changes only after the store transaction that justifies it has committed (control/batch.py):
a store error leaves it as it was, and the round that failed is tried again."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loadmaster.core.job import Allocation
from loadmaster.platform.executors.base import AttemptSpec
from loadmaster.platform.manifest import EarlyStop, MetricGoal

CANCELLED_BY_USER = "cancelled by the user"
HALTED_BY_USER = "halted by the user"


class StopKind(StrEnum):
    PREEMPT = "preempt"  # the scheduler wants the GPUs: HALTED -> QUEUED, resumes from its checkpoint
    HALT = "halt"  # the user: HALTED until resumed
    CANCEL = "cancel"  # the user: CANCELLED
    RESIZE = "resize"  # elastic scale: relaunched at the new size right after
    SMOKE = "smoke"  # --smoke-test: the one-GPU test ran its seconds: QUEUED for the whole gang
    RUNTIME = "runtime"  # max_runtime_s reached: FAILED
    EARLY_STOP = "early_stop"  # the manifest's early_stop: the reported metric plateaued: COMPLETED

    @property
    def frees_resources(self) -> bool:
        """True if the scheduler may count the job's resources as free while it stops."""
        return self is not StopKind.RESIZE

    @property
    def rank(self) -> int:
        """A user's request overrides the scheduler's: a preempted job that the user cancels is cancelled."""
        return _RANK[self]


# A passed smoke test outranks a preemption (the job is requeued either way, and passed it need not test
# again); an early stop outranks the scheduler's stops (a plateaued job completes rather than being requeued);
# a user's halt or cancel outranks them all.
_RANK = {StopKind.RESIZE: 0, StopKind.PREEMPT: 1, StopKind.SMOKE: 2, StopKind.RUNTIME: 3, StopKind.EARLY_STOP: 4,
         StopKind.HALT: 5, StopKind.CANCEL: 6}


@dataclass(frozen=True, slots=True)
class StopIntent:
    kind: StopKind
    detail: str  # e.g. "preempted by priority for j-123"

    def encode(self) -> str:
        """As kept in Attempt.retry_decision while the stop is under way (Attempt.outcome 'stopping')."""
        return f"{self.kind.value}: {self.detail}"

    @classmethod
    def decode(cls, text: str | None) -> StopIntent | None:
        kind, sep, detail = (text or "").partition(": ")
        try:
            return cls(StopKind(kind), detail) if sep else None
        except ValueError:
            return None


class Phase(StrEnum):
    DOWNLOADING = "downloading"  # data being staged; no learner runs yet
    LAUNCHING = "launching"  # the executor is starting the gang
    RUNNING = "running"  # learners launched

    @property
    def stored(self) -> str:
        """The attempt's outcome column while it is in this phase (before any stop is asked for)."""
        return "running" if self is Phase.RUNNING else "launching"


@dataclass
class Plateau:
    """A manifest's early_stop, counted over one attempt's reports as Keras' EarlyStopping counts: a value
    improves when it beats the best so far by more than min_delta; `patience` values in a row that do not mean
    the metric has plateaued. The count belongs to the attempt: a job preempted or moved counts afresh."""

    best: float = math.nan
    since_best: int = 0

    def add(self, value: float, rule: EarlyStop) -> StopIntent | None:
        """Count one reported value; the stop that is due once the metric has plateaued."""
        better = value < self.best - rule.min_delta if rule.mode is MetricGoal.MIN else \
            value > self.best + rule.min_delta
        if math.isnan(self.best) or better:
            self.best, self.since_best = value, 0
            return None
        self.since_best += 1
        if self.since_best < rule.patience:
            return None
        return StopIntent(StopKind.EARLY_STOP, f"early stop: {rule.metric} plateaued at {value:.6g} (best "
                                               f"{self.best:.6g}; {rule.patience} reports without an improvement "
                                               f"of more than {rule.min_delta:g})")


@dataclass
class ProgressTrack:
    """Reports of the current attempt, reduced to what estimates need."""

    first_time: float | None = None
    first_step: int | None = None
    last_time: float | None = None
    last_step: int | None = None
    total_steps: float | None = None
    fraction: float | None = None  # report(progress=0.4): share of the job done
    flushed_at: float = 0.0  # when it was last written to the store

    def add(self, time: float, step: int, total_steps: float | None, fraction: float | None) -> None:
        if self.first_time is None or self.first_step is None or step < self.first_step:
            self.first_time, self.first_step = time, step
        if self.last_time is None or time >= self.last_time:
            self.last_time, self.last_step = time, step
        if total_steps is not None:
            self.total_steps = total_steps
        if fraction is not None:
            self.fraction = fraction

    def steps_per_s(self, min_span_s: float = 1.0) -> float | None:
        """The attempt's step rate, once reports span at least `min_span_s`."""
        if None in (self.first_time, self.last_time, self.first_step, self.last_step):
            return None
        assert self.first_time is not None and self.last_time is not None
        assert self.first_step is not None and self.last_step is not None
        span = self.last_time - self.first_time
        steps = self.last_step - self.first_step
        if span < min_span_s or steps <= 0:
            return None
        return steps / span


@dataclass
class RunState:
    """One job whose attempt is in flight (DOWNLOADING or PROCESSING), as the loop tracks it."""

    job_id: str
    attempt: int
    spec: AttemptSpec
    allocation: Allocation
    phase: Phase
    started_at: float  # attempt start (reservation)
    prior_runtime_s: float = 0.0  # run time of earlier attempts (max_runtime_s counts them)
    stop: StopIntent | None = None
    resize_to: Allocation | None = None  # the allocation a RESIZE stop relaunches on
    # A move's target (decide()'s Migrate): held for the job while it stops, and where it restarts if still free.
    move_to: Allocation | None = None
    progress: ProgressTrack = field(default_factory=ProgressTrack)
    plateau: Plateau = field(default_factory=Plateau)  # the manifest's early_stop, if it has one
    early_stop: StopIntent | None = None  # due: the watched metric plateaued (the next round stops the attempt)
    # Progress as the store holds it: work done and GPU-seconds attained as of `as_of` (see progress.py).
    as_of: float = 0.0
    work_done_s: float = 0.0
    attained_gpu_s: float = 0.0
    running_since: float | None = None  # when the learners were launched (None while downloading)
    smoke_s: float | None = None  # the attempt is the job's one-GPU smoke test of this many seconds (Attempt's)
    expected_s: float | None = None  # expected duration last learned from progress

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.attempt)


@dataclass(frozen=True, slots=True)
class PendingStart:
    """A Start (or a resize's relaunch) whose GPUs are still held by learners that are stopping."""

    job_id: str
    allocation: Allocation
    since: float
    relaunch: bool = False  # a resize of a PROCESSING job (no status change), not a QUEUED job's start
    previous: dict[str, Any] | None = None  # a relaunch's former allocation: learners that stay keep their GPUs
    # A moved job's restart at its move's target: dropped (the job is placed anew) once the target is stale,
    # its GPUs taken by learners that are not stopping or its nodes down, instead of waiting for them.
    hint: bool = False
