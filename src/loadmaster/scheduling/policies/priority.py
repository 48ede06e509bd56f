"""Strict priority classes with preemption: a higher class always goes first and may displace any lower
class; FIFO by submit time within a class, never preemption inside one.

JobSpec.priority: larger = more important, as everywhere else in loadmaster (the Gavel loader fills it from
Gavel's priority_weight, where a larger weight means more important; the canonical CSV carries it as is;
Philly and Alibaba traces have none, so every job there is class 0 and this policy is plain FIFO).

Checkpoint-aware victims: a preempted job redoes the work since its last checkpoint and pays a restart
(the simulator charges exactly that, sim.simulator preempt()). Among the lowest class present, the victim
losing the fewest GPU-seconds goes first: GPUs x (work since the last checkpoint / its rate + restart).
`checkpoint_interval_s` is the policy's estimate of the interval the jobs use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from itertools import takewhile

from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.keyed import Key, KeyedPolicy
from loadmaster.scheduling.policies.srtf import (
    DEFAULT_CHECKPOINT_INTERVAL_S,
    DEFAULT_RESTART_OVERHEAD_S,
    preemption_loss_gpu_s,
)
from loadmaster.scheduling.snapshot import JobView, Snapshot


class PriorityPolicy(KeyedPolicy):
    name = "priority"

    def __init__(self, checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S) -> None:
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s

    def key(self, snap: Snapshot, job: JobView) -> Key:
        return (-float(job.spec.priority),)

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        # Classes in order, FIFO by submit time within one (KeyedPolicy's order with the key inlined).
        return sorted(snap.queued, key=lambda j: (-j.spec.priority, j.spec.submit_time_s, j.spec.job_id))

    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (-job.spec.priority, job.spec.submit_time_s, job.spec.job_id)

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        return victim.spec.priority < job.spec.priority

    def lost_gpu_s(self, snap: Snapshot, victim: JobView) -> float:
        """GPU-seconds a preemption of `victim` now would waste."""
        return preemption_loss_gpu_s(victim, snap.clock, self.checkpoint_interval_s, self.restart_overhead_s)

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        return (float(victim.spec.priority), self.lost_gpu_s(snap, victim), -(victim.started_at or 0.0))

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        # Is any running job of a lower class? Checked before decide() sorts every running job as a
        # victim: with one class (every trace without priorities) nobody can ever be displaced. The classes
        # running come counted (the simulator keeps the count): scanning ~900 running jobs per new tuple of them
        # cost ~1 s of priority's 7 s on 117,000 Philly-like jobs.
        running = snap.running_priorities
        return bool(running) and min(running) < job.spec.priority

    def answers_hold_until(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        # Who may displace whom follows the classes of the queued and running jobs, not time: with the same
        # running jobs a failed displacement finds the same victims (in another order at most, which decides
        # only which of them go first, not whether all of them together make room).
        return math.inf

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # Victims come sorted lowest class first: the first of the job's own class or above ends the scan.
        return takewhile(lambda v: self.may_preempt(snap, gate, job, v), victims())
