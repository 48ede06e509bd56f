"""The output of decide(): actions for the shell (simulator or control loop) to carry out."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from loadmaster.core.frozen import fast_init
from loadmaster.core.job import Allocation


class WaitReason(StrEnum):
    """Why a job is still waiting after a round (Philly's split of queueing delay, and more)."""

    OVER_QUOTA = "over_quota"  # the tenant is at its quota (fair-share delay)
    NO_CAPACITY = "no_capacity"  # fewer free GPUs in the whole cluster than the gang needs
    FRAGMENTATION = "fragmentation"  # enough free GPUs in total, not in the shape the gang needs
    CPU_MEMORY = "cpu_memory"  # GPUs fit but CPUs or memory on those servers do not
    LOCALITY_WAIT = "locality_wait"  # a placement exists but the job still holds out for locality
    LOWER_PRIORITY = "lower_priority"  # free GPUs are held back for a job ranked ahead

    @property
    def delay_class(self) -> str:
        """Philly's classes: fair-share delay, fragmentation delay, or plain lack of capacity."""
        if self is WaitReason.OVER_QUOTA:
            return "fair_share"
        if self in (WaitReason.FRAGMENTATION, WaitReason.CPU_MEMORY, WaitReason.LOCALITY_WAIT):
            return "fragmentation"
        return "capacity"


# The members that hot loops read (per visit, placement or queued job: decide.py, session.py, placement/base.py,
# drf.py), as module globals: on Python 3.11 reading a member off its class goes through the enum's descriptor
# (~90 ns), a global is one dict lookup (~6 ns).
OVER_QUOTA = WaitReason.OVER_QUOTA
NO_CAPACITY = WaitReason.NO_CAPACITY
FRAGMENTATION = WaitReason.FRAGMENTATION
CPU_MEMORY = WaitReason.CPU_MEMORY
LOCALITY_WAIT = WaitReason.LOCALITY_WAIT
LOWER_PRIORITY = WaitReason.LOWER_PRIORITY


@fast_init
@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    reason: str
    for_job: str = ""


@dataclass(frozen=True, slots=True)
class Resize:
    job_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Migrate:
    """Checkpoint a running job, stop it and restart it at `allocation` (other servers) at once, so that
    `for_job` fits: defragmentation. It costs the job the restart overhead and the work since its last
    checkpoint; it keeps its place (it is never queued in between). A re-auction's move (themis) is for the
    moved job itself: `for_job` is empty."""

    job_id: str
    allocation: Allocation
    for_job: str = ""


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


class Wait(NamedTuple):
    """One per job left waiting in a round: a named tuple because a long queue makes many of them. A Session
    makes one per queued job and reason and hands the same one out whenever the job's reason turns back to it."""

    job_id: str
    reason: WaitReason


@fast_init
@dataclass(frozen=True)
class Plan:
    starts: tuple[Start, ...] = ()
    preempts: tuple[Preempt, ...] = ()
    resizes: tuple[Resize, ...] = ()
    rejects: tuple[Reject, ...] = ()
    waits: tuple[Wait, ...] = field(default=())
    # Last, so that plans built by position before migration existed keep their meaning.
    migrations: tuple[Migrate, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.starts or self.preempts or self.resizes or self.rejects or self.migrations)
