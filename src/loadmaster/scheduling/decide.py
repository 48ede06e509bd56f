"""decide(Snapshot) -> Plan: the one scheduling core, shared by the simulator and the control loop.

It walks the policy's ranking, asks the placer for a whole-gang allocation on the tentative free
capacity, and, for preemptive policies, releases the policy's victims one at a time until the gang fits;
victims whose servers the new gang does not use are kept running. Every job it does not start gets a
Wait with a reason. It reads nothing but the snapshot: no clock, database or process.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.feasibility import never_fits
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.plan import Plan, Preempt, Reject, Start, Wait, WaitReason
from loadmaster.scheduling.policies.base import Admission, Gate, Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot


@dataclass
class _Round:
    snap: Snapshot
    policy: Policy
    placer: Placer
    free: FreeCapacity
    gate: Gate

    def __post_init__(self) -> None:
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.preempted: set[str] = set()
        self.victims: list[JobView] | None = None
        # (shape, scope) -> (capacity version, reason): a shape that did not fit still does not fit
        # until capacity grows, so a long queue of similar jobs costs one placement attempt.
        self.no_fit: dict[tuple[object, ...], tuple[int, WaitReason]] = {}
        self.no_preempt: dict[tuple[object, ...], int] = {}

    def place(self, job: JobView) -> Allocation | WaitReason:
        learners = job.spec.learners
        need = learners * job.spec.gpus_per_learner
        if need > self.free.total_gpus + 1e-9:
            return WaitReason.NO_CAPACITY
        key = self.placer.cache_key(job, learners, self.snap)
        if key is not None:
            hit = self.no_fit.get(key)
            if hit is not None and hit[0] == self.free.version:
                return hit[1]
        result = self.placer.place(job, learners, self.free, self.snap)
        if isinstance(result, WaitReason) and key is not None:
            self.no_fit[key] = (self.free.version, result)
        return result

    def victim_list(self) -> list[JobView]:
        if self.victims is None:
            self.victims = sorted(self.snap.running, key=lambda v: self.policy.victim_key(self.snap, v))
        return self.victims

    def place_by_preempting(self, job: JobView, reason: WaitReason) -> Allocation | WaitReason:
        shape = self.placer.cache_key(job, job.spec.learners, self.snap)
        key = None if shape is None else (*shape, self.policy.preemption_scope(job))
        if key is not None and self.no_preempt.get(key) == self.free.version:
            return reason
        released: list[JobView] = []
        alloc: Allocation | WaitReason = reason
        for victim in self.victim_list():
            if victim.job_id in self.preempted or not self.policy.may_preempt(self.snap, self.gate, job, victim):
                continue
            assert victim.allocation is not None
            self.free.give(victim.allocation, grow=False)
            self.gate.remove(victim)
            released.append(victim)
            alloc = self.placer.place(job, job.spec.learners, self.free, self.snap)
            if isinstance(alloc, Allocation):
                break
        if not isinstance(alloc, Allocation):
            for victim in reversed(released):
                assert victim.allocation is not None
                self.free.take(victim.allocation)
                self.gate.add(victim)
            if key is not None:
                self.no_preempt[key] = self.free.version
            return reason
        used = alloc.nodes
        for victim in released:
            assert victim.allocation is not None
            if used.isdisjoint(victim.allocation.nodes):
                self.free.take(victim.allocation)  # not needed after all: keeps running
                self.gate.add(victim)
            else:
                self.preempted.add(victim.job_id)
                self.preempts.append(Preempt(victim.job_id, f"preempted by {self.policy.name} for {job.job_id}",
                                             for_job=job.job_id))
        self.free.version += 1
        return alloc


def decide(snap: Snapshot, policy: Policy, placer: Placer) -> Plan:
    """Decide which queued jobs start where, which running jobs are preempted, and why the rest wait."""
    rnd = _Round(snap, policy, placer, FreeCapacity(snap), policy.gate(snap))
    rejects: list[Reject] = []
    waits: list[Wait] = []
    blocked = False
    for job in policy.rank(snap):
        if blocked:
            waits.append(Wait(job.job_id, WaitReason.LOWER_PRIORITY))
            continue
        why_never = never_fits(job.spec, snap.cluster) or rnd.gate.never_admits(job)
        if why_never:
            rejects.append(Reject(job.job_id, why_never))
            continue
        if rnd.gate.admit(job, job.spec.gpus) is Admission.DENIED:
            waits.append(Wait(job.job_id, WaitReason.OVER_QUOTA))
            continue
        result = rnd.place(job)
        if isinstance(result, WaitReason) and policy.preemptive and result is not WaitReason.LOCALITY_WAIT:
            result = rnd.place_by_preempting(job, result)
        if isinstance(result, Allocation):
            rnd.free.take(result)
            rnd.gate.add(job, result.gpus)
            rnd.starts.append(Start(job.job_id, result))
        else:
            waits.append(Wait(job.job_id, result))
            blocked = policy.blocks_others(job)
    return Plan(
        starts=tuple(rnd.starts),
        preempts=tuple(rnd.preempts),
        rejects=tuple(rejects),
        waits=tuple(waits),
    )
