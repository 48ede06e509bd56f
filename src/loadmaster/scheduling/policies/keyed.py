"""Policies defined by one priority key per job (smaller = more urgent): SRTF, LAS, priority classes.

rank() sorts queued jobs by key; a preemptive keyed policy lets a queued job displace a running job whose
key is strictly larger (so two jobs never displace each other back and forth at one instant), largest
key first. Subclasses only say what the key is.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable, Sequence

from loadmaster.scheduling.policies.base import Gate, Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot

Key = tuple[float, ...]


class KeyedPolicy(Policy):
    preemptive = True

    @abstractmethod
    def key(self, snap: Snapshot, job: JobView) -> Key:
        """The job's urgency at snap.clock; smaller runs first. Must not depend on other jobs."""

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        return sorted(snap.queued, key=lambda j: (*self.key(snap, j), j.spec.submit_time_s, j.spec.job_id))

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        return self.key(snap, victim) > self.key(snap, job)

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        # Who a job may displace depends on its key alone (a subclass that also prefers GPU types per job
        # must add what that preference depends on).
        return self.key(snap, job)

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        # Least urgent first; among equals, the most recently started (least work lost).
        return (*(-k for k in self.key(snap, victim)), -(victim.started_at or 0.0))
