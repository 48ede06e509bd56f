"""What happened to each job of a trace: its attempts as the log recorded them, when it has them.

A Workload holds what a job asked for (JobSpec). Characterising a cluster (queueing delay, occupancy,
fragmentation) also needs when each attempt ran and on which machines. Philly's job log records that;
the canonical CSV, Gavel and Alibaba (as loaded) do not. `History.times` says which case a history is,
so an analysis can mark what it cannot compute instead of inventing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from loadmaster.core.job import JobSpec
from loadmaster.core.workload import Workload


class Times(StrEnum):
    """Where attempt start times come from."""

    RECORDED = "recorded"  # the trace logs them (Philly)
    SIMULATED = "simulated"  # a replay through the simulator produced them
    NONE = "none"  # the trace has submit times and runtimes only


@dataclass(frozen=True, slots=True)
class Placement:
    """The GPUs one attempt held on one machine, by the names the log uses ('gpu3')."""

    machine: str
    gpus: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One scheduling attempt. start_s/end_s are None where the log lost them; placement is () where
    the log does not say which machines the attempt ran on."""

    start_s: float | None
    end_s: float | None
    placement: tuple[Placement, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(len(p.gpus) for p in self.placement)


@dataclass(frozen=True, slots=True)
class JobHistory:
    """One job: what it asked for, and (when known) when it started and ended.

    attempts: the recorded attempts in order; () when the trace records none (or when simulated).
    first_start_s / end_s: the first attempt's start and the last attempt's end.
    wait_split_s: the scheduler's own account of why the job waited (simulated histories only), by
    delay class (fair_share, fragmentation, capacity).
    """

    spec: JobSpec
    attempts: tuple[Attempt, ...] = ()
    first_start_s: float | None = None
    end_s: float | None = None
    wait_split_s: Mapping[str, float] | None = None

    @property
    def queue_delay_s(self) -> float | None:
        """Philly's queueing delay: submission to the first attempt's start."""
        return None if self.first_start_s is None else self.first_start_s - self.spec.submit_time_s

    @property
    def last_placement(self) -> tuple[Placement, ...]:
        return next((a.placement for a in reversed(self.attempts) if a.placement), ())

    @staticmethod
    def recorded(spec: JobSpec, attempts: tuple[Attempt, ...]) -> JobHistory:
        starts = [a.start_s for a in attempts if a.start_s is not None]
        end = attempts[-1].end_s if attempts else None
        return JobHistory(spec, attempts, starts[0] if starts else None, end)


@dataclass
class History:
    """A workload with what is known of how it ran. jobs[i] describes workload.jobs[i]."""

    workload: Workload
    jobs: list[JobHistory]
    times: Times
    how: str = ""  # one line: where the times come from (the replay's policy, the log's name)
    # Busy GPUs over time when the source gives them directly (a simulation's timeline): (times, busy).
    busy_timeline: tuple[list[float], list[int]] | None = None
    notes: list[str] = field(default_factory=list)
    cluster_hint: str | None = None  # the named cluster (load_cluster) the trace comes from, if one is bundled
    origin_s: float | None = None  # time 0 on the log's own clock (seconds since 1970, naive), to join other logs

    def __post_init__(self) -> None:
        if len(self.jobs) != len(self.workload.jobs):
            raise ValueError(f"history has {len(self.jobs)} jobs, its workload {len(self.workload.jobs)}")

    @staticmethod
    def untimed(workload: Workload) -> History:
        """A trace without start times: every job's spec, nothing about when it ran."""
        return History(workload, [JobHistory(j) for j in workload.jobs], Times.NONE,
                       "the trace records submit times and runtimes, not when attempts started")
