"""Failures and retries: what each attempt of a job does, under a chosen retry policy.

The trace says how many attempts a job made, how long each failed one ran, and how the job ended. A
failing job's failures are given a Philly failure category (Jeon et al., ATC'19, Table 2; weights below),
drawn with the run's seed: a job that finally FAILED draws from all categories (most are deterministic
user errors); a job whose failed attempts were followed by a pass had, by construction, transient ones.

Retry policies:
- trace: replay the recorded attempts exactly.
- never: the first failure ends the job.
- always: YARN-like, retry every failure up to max_attempts; a job that failed in the trace keeps failing
  (at its recorded failure runtimes, cycled) until the attempts run out.
- classified: like always, but a deterministic failure (incorrect input, syntax/semantic error, OOM...) is
  not retried: the same code on the same input fails the same way again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from loadmaster.core.frozen import fast_init
from loadmaster.core.job import FailureCategory, FinalStatus, JobSpec, JobStatus

C = FailureCategory
# Approximate failure trial counts per category from Philly's failure classification (Jeon et al.,
# USENIX ATC'19, Table 2), used as relative frequencies. See docs/performance-model.md#failures.
PHILLY_FAILURE_WEIGHTS: dict[FailureCategory, float] = {
    C.CPU_OOM: 12076,
    C.INCORRECT_INPUT: 9690,
    C.TRACEBACK: 3470,
    C.SEMANTIC_ERROR: 2943,
    C.CORE_DUMP: 2912,
    C.INVALID_MEMORY_ACCESS: 2602,
    C.CHECKPOINT_ERROR: 1995,
    C.MPI_RUNTIME: 2056,
    C.CUDA_FAILURE: 1484,
    C.SYNTAX_ERROR: 1132,
    C.GPU_OOM: 1070,
    C.PERMISSION_ERROR: 567,
    C.IMPORT_ERROR: 471,
    C.INFRASTRUCTURE: 800,
}


class RetryPolicy(StrEnum):
    TRACE = "trace"
    NEVER = "never"
    ALWAYS = "always"
    CLASSIFIED = "classified"


@fast_init
@dataclass(frozen=True, slots=True)
class AttemptPlan:
    """Work-seconds each attempt runs before it ends; every attempt but the last fails."""

    runtimes: tuple[float, ...]
    categories: tuple[FailureCategory, ...]  # one per failed attempt
    outcome: JobStatus  # how the last attempt ends: COMPLETED, FAILED or CANCELLED (killed)

    @property
    def attempts(self) -> int:
        return len(self.runtimes)


# How a job's last attempt ends, by its recorded final status.
_OUTCOME = {FinalStatus.PASS: JobStatus.COMPLETED, FinalStatus.FAILED: JobStatus.FAILED,
            FinalStatus.KILLED: JobStatus.CANCELLED}


_ENDS_FAILED = FinalStatus.FAILED  # read once per job: a module global costs less than the enum's descriptor
_DRAWS_AHEAD = 1024


class FailureModel:
    def __init__(self, retry: RetryPolicy = RetryPolicy.TRACE, max_attempts: int = 3, seed: int = 0) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.retry = retry
        self.max_attempts = max_attempts
        self.seed = seed
        self._rng: np.random.Generator | None = None  # made at the first draw: most runs draw nothing
        # Uniform draws made ahead in chunks, used in order (reversed, so pop() takes the next): the generator
        # gives the same stream in one call of n as in n calls (tests/sim/test_failures_stream.py), at a
        # fraction of a NumPy call per draw. Each draw is kept as the category it gives from either pool
        # (transient, all), found for the whole chunk by two searchsorted calls instead of a bisect per draw.
        # Only _draws reads the generator.
        self._ahead: list[tuple[FailureCategory, FailureCategory]] = []
        cats = list(PHILLY_FAILURE_WEIGHTS)
        w = np.array([PHILLY_FAILURE_WEIGHTS[c] for c in cats], dtype=float)
        # Cumulative weights (as Python floats: tests/sim/test_failures_stream.py bisects them for its reference
        # stream, which np.searchsorted(side="right") in _draws answers alike).
        self._all = (cats, np.cumsum(w / w.sum()).tolist())
        transient = [c for c in cats if not c.deterministic]
        wt = np.array([PHILLY_FAILURE_WEIGHTS[c] for c in transient], dtype=float)
        self._transient = (transient, np.cumsum(wt / wt.sum()).tolist())

    @property
    def rng(self) -> np.random.Generator:
        """The run's generator, made at its first use (numpy.random is ~10 ms to import; a trace without
        failures never draws)."""
        rng = self._rng
        if rng is None:
            rng = self._rng = np.random.default_rng(self.seed)
        return rng

    def _draws(self, pool: int, n: int) -> tuple[FailureCategory, ...]:
        """The next n draws' categories from pool 0 (transient) or 1 (all), in order."""
        ahead = self._ahead
        if len(ahead) < n:  # the draws left come first (at the end), then a fresh chunk: the same stream
            u = self.rng.random(max(_DRAWS_AHEAD, n))
            # searchsorted(side="right") answers as bisect_right on the same floats; a draw past the last
            # cumulative weight (rounding) takes the last category.
            picked = [[cats[i] for i in np.minimum(np.searchsorted(cumulative, u, side="right"), len(cats) - 1)
                       .tolist()] for cats, cumulative in (self._transient, self._all)]
            ahead[:0] = reversed(list(zip(*picked, strict=True)))
        if n == 1:  # most failing jobs: one draw
            return (ahead.pop()[pool],)
        pop = ahead.pop
        return tuple([pop()[pool] for _ in range(n)])

    def plan(self, spec: JobSpec) -> AttemptPlan:
        """The attempts this job makes under the retry policy. Call once per job, in submit order."""
        failed = spec.failed_attempts_s
        ends_failed = spec.final_status is _ENDS_FAILED
        final_outcome = _OUTCOME[spec.final_status]
        if not failed and not ends_failed:
            return AttemptPlan((spec.duration_s,), (), final_outcome)
        # Categories: transient for failures the job later recovered from; the terminal one from all.
        transient = self._draws(0, len(failed)) if failed else ()
        terminal = self._draws(1, 1)[0] if ends_failed else None
        if self.retry is RetryPolicy.TRACE:
            cats = transient + ((terminal,) if terminal else ())
            return AttemptPlan((*failed, spec.duration_s), cats[: len(failed)], final_outcome)
        if self.retry is RetryPolicy.NEVER:
            if failed:
                return AttemptPlan((failed[0],), (transient[0],), JobStatus.FAILED)
            return AttemptPlan((spec.duration_s,), (), final_outcome)
        # always / classified
        if not ends_failed:
            # Transient failures then a pass: retried either way (none is deterministic), capped.
            runtimes = (*failed, spec.duration_s)
            if len(runtimes) <= self.max_attempts:
                return AttemptPlan(runtimes, transient, final_outcome)
            n = self.max_attempts
            return AttemptPlan(tuple(failed[:n]), transient[:n], JobStatus.FAILED)
        assert terminal is not None
        # A job that failed for good fails on every attempt: at its recorded runtimes, cycled.
        pattern = (*failed, spec.duration_s)
        n = 1 if self.retry is RetryPolicy.CLASSIFIED and terminal.deterministic else self.max_attempts
        runtimes = tuple(pattern[i % len(pattern)] for i in range(n))
        return AttemptPlan(runtimes, (terminal,) * n, JobStatus.FAILED)
