"""Jobs: what a user asked for (JobSpec), where it runs (Allocation), and its status machine."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from loadmaster.core.frozen import fast_init


class FinalStatus(StrEnum):
    """How a job ended in the trace it came from (Philly's vocabulary)."""

    PASS = "Pass"
    FAILED = "Failed"
    KILLED = "Killed"


class FailureCategory(StrEnum):
    """Philly's failure classes (Jeon et al., ATC'19, Table 6) grouped by whether a retry can help."""

    INCORRECT_INPUT = "incorrect_input"
    SEMANTIC_ERROR = "semantic_error"
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    PERMISSION_ERROR = "permission_error"
    CPU_OOM = "cpu_out_of_memory"
    GPU_OOM = "gpu_out_of_memory"
    INVALID_MEMORY_ACCESS = "invalid_memory_access"
    CHECKPOINT_ERROR = "checkpoint_error"
    MPI_RUNTIME = "mpi_runtime"
    CUDA_FAILURE = "cuda_failure"
    CORE_DUMP = "core_dump"
    TRACEBACK = "traceback"
    PREEMPTED = "preempted"
    INFRASTRUCTURE = "infrastructure"

    @property
    def deterministic(self) -> bool:
        """True where the same code on the same input fails the same way again: a retry wastes GPUs."""
        return self in _DETERMINISTIC


_DETERMINISTIC = frozenset(
    {
        FailureCategory.INCORRECT_INPUT,
        FailureCategory.SEMANTIC_ERROR,
        FailureCategory.SYNTAX_ERROR,
        FailureCategory.IMPORT_ERROR,
        FailureCategory.PERMISSION_ERROR,
        FailureCategory.CPU_OOM,
        FailureCategory.GPU_OOM,
        FailureCategory.INVALID_MEMORY_ACCESS,
        FailureCategory.TRACEBACK,
    }
)


class JobStatus(StrEnum):
    """Lifecycle statuses (DLaaS/FfDL), shared by the simulator and the platform."""

    QUEUED = "QUEUED"
    DOWNLOADING = "DOWNLOADING"
    PROCESSING = "PROCESSING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


S = JobStatus
# The one transition table. QUEUED -> PROCESSING directly is allowed because a job with no data to
# stage skips DOWNLOADING (every simulated job does). PROCESSING -> QUEUED is a preemption or a retry.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.DOWNLOADING, S.PROCESSING, S.HALTED, S.CANCELLED, S.FAILED}),
    S.DOWNLOADING: frozenset({S.PROCESSING, S.QUEUED, S.HALTED, S.FAILED, S.CANCELLED}),
    S.PROCESSING: frozenset({S.STORING, S.COMPLETED, S.QUEUED, S.HALTED, S.FAILED, S.CANCELLED}),
    S.STORING: frozenset({S.COMPLETED, S.FAILED, S.CANCELLED}),
    S.HALTED: frozenset({S.QUEUED, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    """A status change that the transition table forbids."""


def check_transition(job_id: str, old: JobStatus, new: JobStatus) -> None:
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none (terminal)"
        raise IllegalTransition(f"job {job_id}: {old} -> {new} is not allowed; from {old}: {allowed}")


@fast_init
@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a workload, in the canonical workload vocabulary.

    duration_s is the runtime of the successful (or last) attempt alone on its best placement.
    failed_attempts_s holds, for each earlier attempt that failed, how long it ran before failing.
    type_speed maps a GPU type to the job's relative speed on it (1.0 = the type duration_s refers to);
    None means the performance model's per-type defaults apply.
    """

    job_id: str
    tenant: str
    submit_time_s: float
    learners: int
    gpus_per_learner: int
    duration_s: float
    user: str = ""
    cpus_per_learner: float = 0.0
    mem_gb_per_learner: float = 0.0
    model: str = ""
    priority: int = 0
    final_status: FinalStatus = FinalStatus.PASS
    failed_attempts_s: tuple[float, ...] = ()
    min_learners: int | None = None
    max_learners: int | None = None
    type_speed: tuple[tuple[str, float], ...] | None = None
    # The placer this job asks for by name (a platform manifest's placement); "" = the shell's placer.
    placement: str = ""
    # GPU types this job cannot run on (zero throughput there: e.g. it does not fit in memory).
    excluded_types: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        speeds = self.type_speed
        # Through the slot's own setter (_set_excluded_types, below the class): object.__setattr__ looks the
        # name up on the type first, once per spec of a 117,000-job trace.
        _set_excluded_types(self, () if speeds is None else tuple(t for t, s in speeds if s <= 0))
        # The common case in one expression (a trace of 117,000 jobs makes as many specs); anything it does
        # not pass is looked at rule by rule below, which names what is wrong. Failed attempts (a quarter of
        # Philly's jobs) pass when the least is >= 0 and their sum is finite: a NaN or an infinity makes the sum
        # NaN or infinite (a sum of finite runtimes too large for a float only takes the rules below).
        failed = self.failed_attempts_s
        if (self.job_id and self.learners >= 1 and self.gpus_per_learner >= 0 and 0 <= self.duration_s < _INF
                and 0 <= self.submit_time_s < _INF and self.cpus_per_learner >= 0
                and self.mem_gb_per_learner >= 0 and (not failed or (min(failed) >= 0 and sum(failed) < _INF))
                and self.min_learners is None and self.max_learners is None):
            return
        problems = []
        if not self.job_id:
            problems.append("job_id is empty")
        if self.learners < 1:
            problems.append(f"learners must be >= 1, got {self.learners}")
        if self.gpus_per_learner < 0:
            problems.append(f"gpus_per_learner must be >= 0, got {self.gpus_per_learner}")
        if not (self.duration_s >= 0 and math.isfinite(self.duration_s)):
            problems.append(f"duration_s must be a finite number >= 0, got {self.duration_s}")
        if not (self.submit_time_s >= 0 and math.isfinite(self.submit_time_s)):
            problems.append(f"submit_time_s must be a finite number >= 0, got {self.submit_time_s}")
        if self.cpus_per_learner < 0 or self.mem_gb_per_learner < 0:
            problems.append("cpus_per_learner and mem_gb_per_learner must be >= 0")
        if any(not (a >= 0 and math.isfinite(a)) for a in self.failed_attempts_s):
            problems.append("failed attempt runtimes must be finite numbers >= 0")
        if self.min_learners is not None and not 1 <= self.min_learners <= self.learners:
            problems.append(f"min_learners must be between 1 and learners ({self.learners})")
        if self.max_learners is not None and self.max_learners < self.learners:
            problems.append(f"max_learners must be >= learners ({self.learners})")
        if problems:
            raise ValueError(f"job {self.job_id or '?'}: " + "; ".join(problems))

    @property
    def gpus(self) -> int:
        return self.learners * self.gpus_per_learner

    @property
    def attempts(self) -> int:
        return len(self.failed_attempts_s) + 1

    @property
    def elastic(self) -> bool:
        return (self.min_learners or self.learners) < (self.max_learners or self.learners)

    def speed_on(self, gpu_type: str) -> float | None:
        if self.type_speed is None:
            return None
        for t, s in self.type_speed:
            if t == gpu_type:
                return s
        return None


_set_excluded_types = JobSpec.__dict__["excluded_types"].__set__
_INF = math.inf


@fast_init
@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a job's learners run: node index per learner, and what each learner was given.

    cpus/mem per learner may differ from the request (a CPU-aware placer gives what the profile
    benefits from). Every learner of a gang is in one Allocation: there is no partial gang.
    """

    job_id: str
    learner_nodes: tuple[int, ...]
    gpus_per_learner: int
    cpus_per_learner: float
    mem_gb_per_learner: float

    @property
    def learners(self) -> int:
        return len(self.learner_nodes)

    @property
    def gpus(self) -> int:
        return self.learners * self.gpus_per_learner

    @property
    def nodes(self) -> frozenset[int]:
        return frozenset(self.learner_nodes)

    def per_node(self) -> dict[int, int]:
        """Learners per node."""
        nodes = self.learner_nodes
        if len(nodes) == 1:  # most gangs of a real trace (asked at every take, give, start and end)
            return {nodes[0]: 1}
        counts: dict[int, int] = {}
        for n in self.learner_nodes:
            counts[n] = counts.get(n, 0) + 1
        return counts
