"""FIFO: first submitted, first considered. A job that does not fit is skipped, so later jobs backfill.

`strict=True` gives head-of-line FIFO instead: nothing starts past the first job that does not fit
(what YARN's plain FIFO does; no starvation of large gangs, much idle capacity).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot


class FifoPolicy(Policy):
    name = "fifo"

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        return sorted(snap.queued, key=lambda j: (j.spec.submit_time_s, j.spec.job_id))

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return ()  # every job of one shape is treated alike

    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (job.spec.submit_time_s, job.spec.job_id)

    def blocks_others(self, job: JobView) -> bool:
        return self.strict

    @property
    def may_block_others(self) -> bool:
        return self.strict  # plain FIFO never holds anyone back: a walk need not ask every class's first job

    @property
    def promises_answers(self) -> bool:
        return not self.strict  # strict order promises nothing: no need to list the heads at every decision

    def answers_hold_until(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        # Nobody is displaced: a job's answer is a placement on the free capacity, which time alone leaves
        # as it is. Strict order: a new job ahead of the one that blocks may block sooner (not promised).
        return -math.inf if self.strict else math.inf
