"""What the simulator measured: one record per job, and the cluster's busy-GPU timeline."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadmaster.core.job import JobSpec, JobStatus


@dataclass(slots=True)
class JobRecord:
    spec: JobSpec
    status: JobStatus = JobStatus.QUEUED
    first_start_s: float | None = None
    finish_s: float | None = None
    attempts_run: int = 0
    preemptions: int = 0
    resizes: int = 0  # elastic scale-ups and scale-downs
    gpu_s: float = 0.0  # GPU-seconds held, all attempts
    gpu_s_failed: float = 0.0  # GPU-seconds of attempts that ended in failure
    gpu_s_lost: float = 0.0  # GPU-seconds of work thrown away by preemption or a move (since the last checkpoint)
    gpu_s_lost_migrating: float = 0.0  # the part of gpu_s_lost that moves threw away
    migrations: int = 0  # moves to other servers (defragmentation), each a checkpoint and a restart
    wait_s: dict[str, float] = field(default_factory=dict)  # total waiting time by WaitReason
    last_wait_reason: str = ""
    reject_reason: str = ""
    failure_categories: tuple[str, ...] = ()
    contention_avg: float = 1.0  # average number of jobs in the system during this job's life
    ideal_s: float = 0.0  # Themis T_ideal: runtime on a private 1/N share of the cluster

    @property
    def finished(self) -> bool:
        return self.finish_s is not None

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.spec.submit_time_s

    @property
    def queue_delay_s(self) -> float | None:
        """Submission to first start (Philly's queueing delay)."""
        return None if self.first_start_s is None else self.first_start_s - self.spec.submit_time_s

    @property
    def total_wait_s(self) -> float:
        return sum(self.wait_s.values())

    @property
    def rho(self) -> float | None:
        """Themis' finish-time fairness: T_shared / T_ideal (1 = as good as a private 1/N cluster)."""
        jct = self.jct_s
        if jct is None or self.ideal_s <= 0:
            return None
        return jct / self.ideal_s


@dataclass
class Timeline:
    """Busy GPUs and queue length after each change, for the utilisation plot."""

    times: list[float] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)

    def record(self, t: float, busy: int, queued: int) -> None:
        if self.times and self.times[-1] == t:
            self.busy_gpus[-1] = busy
            self.queued[-1] = queued
        else:
            self.times.append(t)
            self.busy_gpus.append(busy)
            self.queued.append(queued)
