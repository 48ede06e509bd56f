"""Learner-at-a-time placement (`sim run --gang off`): the baseline that gang scheduling is measured against.

A pod-at-a-time scheduler (Kubernetes' default scheduler before gang/coscheduling plugins) binds each
learner on its own as soon as it fits. A distributed job computes nothing until all its learners are
bound (they meet at a barrier), so the learners bound so far hold their GPUs idle meanwhile; when every
free slot is held by incomplete jobs and nothing runs, the cluster is deadlocked (Jayaram et al.,
DIDL'18, argue for gang scheduling with this failure).

What it models:
- One FIFO queue of pending learners: jobs by (priority desc, time queued), a job's learners in order;
  Kubernetes' PrioritySort. A learner that does not fit is skipped (it goes to the unschedulable queue),
  so later learners of other jobs may take what is free. Learners of one job are never interleaved with
  another's, the order most favourable to this baseline: interleaving only makes partial gangs likelier.
- Each learner is placed by the chosen placer (pack or spread) alone, on the free capacity left by the
  learners placed before it; later learners stay on the GPU type of the first (a node selector).
- A job starts when its last learner is bound; from then on it is an ordinary running gang (the
  simulator's start/end/retry paths), so JCT, queueing delay and utilisation mean what they mean in
  gang mode. GPUs held by a partial gang are not busy: they count in `gpu_hours_held_by_partial_gangs`.
- `partial_timeout_s`: how a real system breaks the deadlock. A job still partial that long after its
  first learner was bound releases all its learners and is requeued at the back (its learners are new
  pods). None: never (plain Kubernetes), and a deadlocked job then holds its GPUs to the end.

The pure core cannot express any of this (decide() never returns a partial gang), so this mode lives
here, in the shell: a _Run subclass whose decide() is its own round and whose apply() binds learners.
The Allocations it builds for partial gangs never leave this module (no Plan or JobView carries one).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.workload import Workload
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.feasibility import never_fits
from loadmaster.scheduling.placement.base import Placer, failure_reason
from loadmaster.scheduling.plan import Plan, Reject, Start, Wait, WaitReason
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.policies.fifo import FifoPolicy
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota
from loadmaster.sim.failures import FailureModel

# --gang and --partial-timeout parsing lives apart (a plain `sim run` reads them without importing this module).
from loadmaster.sim.gang_options import parse_gang as parse_gang
from loadmaster.sim.gang_options import parse_timeout as parse_timeout
from loadmaster.sim.gang_options import timeout_label as timeout_label
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import ProgressFn, SimConfig, SimResult, Simulator, _Live, _Run

PLACERS = ("pack", "spread")  # MostAllocated / LeastAllocated scoring, one learner at a time


def check_supported(policy: Policy, placer: Placer) -> None:
    """The combinations a pod-at-a-time scheduler can stand for; anything else is a clear error."""
    if not isinstance(policy, FifoPolicy) or policy.strict or policy.preemptive:
        raise ValueError(
            f"--policy: learner-at-a-time placement (--gang off) queues learners FIFO like a pod-at-a-time "
            f"scheduler; use --policy fifo (got {policy.name}{'-strict' if getattr(policy, 'strict', False) else ''})"
        )
    if placer.name not in PLACERS:
        raise ValueError(f"--placement: learner-at-a-time placement (--gang off) supports {', '.join(PLACERS)}; "
                         f"got {placer.name}")


class LearnerAtATimeSimulator(Simulator):
    """The simulator with learner-at-a-time placement instead of gang scheduling."""

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        placer: Placer,
        failures: FailureModel | None = None,
        perf: PerformanceModel | None = None,
        config: SimConfig | None = None,
        tenants: Mapping[str, TenantQuota] | None = None,
        partial_timeout_s: float | None = None,
    ) -> None:
        check_supported(policy, placer)
        if partial_timeout_s is not None and not (partial_timeout_s > 0 and math.isfinite(partial_timeout_s)):
            raise ValueError(f"partial_timeout_s: must be None (never) or seconds > 0, got {partial_timeout_s}")
        super().__init__(cluster, policy, placer, failures, perf, config, tenants)
        self.partial_timeout_s = partial_timeout_s

    def run(self, workload: Workload, progress: ProgressFn | None = None) -> SimResult:
        return _LearnerRun(self, workload, progress, self.partial_timeout_s).run()


@dataclass(slots=True)
class _Partial:
    """The learners of one job bound so far (fewer than it needs)."""

    nodes: list[int]
    since: float  # when its first learner was bound
    deadline: float  # when it gives its learners back (inf: never)
    gpu_type: str | None = None  # later learners stay on this type (heterogeneous clusters only)


Shape = tuple[float, float, float, tuple[str, ...], tuple[str, ...] | None]


class _NoFit:
    """Learner shapes that did not fit in this round, with their reasons. Capacity only shrinks inside a
    round, so a shape at least as large in GPUs, CPUs and memory (same type constraints) does not fit
    either: the placer is not asked again, only the reason is classified for it (cheaply)."""

    __slots__ = ("exact", "frontier")

    def __init__(self) -> None:
        self.exact: dict[Shape, WaitReason] = {}
        self.frontier: list[Shape] = []  # minimal shapes that did not fit

    def known(self, key: Shape) -> bool:
        """Whether `key` is at least as large as a shape that did not fit (see also `exact`)."""
        g, c, m, excluded, prefer = key
        return any(g >= s[0] and c >= s[1] and m >= s[2] and excluded == s[3] and prefer == s[4]
                   for s in self.frontier)

    def add(self, key: Shape, reason: WaitReason) -> None:
        self.exact[key] = reason
        if not any(key[0] >= s[0] and key[1] >= s[1] and key[2] >= s[2] and key[3:] == s[3:] for s in self.frontier):
            self.frontier.append(key)


@dataclass(slots=True)
class _Round:
    """What one learner-at-a-time round decided beyond the Plan: learners bound to still-partial jobs."""

    binds: dict[str, tuple[list[int], str | None]] = field(default_factory=dict)


class _LearnerRun(_Run):
    def __init__(self, sim: Simulator, workload: Workload, progress: ProgressFn | None,
                 timeout_s: float | None) -> None:
        super().__init__(sim, workload, progress)
        self.timeout_s = timeout_s
        self.partial: dict[str, _Partial] = {}
        self.held_gpus = 0  # GPUs bound to partial gangs now
        self.held_gpu_s = 0.0
        self.timeouts = 0
        self.stalled = False  # nothing runs while partial gangs hold GPUs
        self.stalled_s = 0.0
        self.first_stall_s: float | None = None
        self.round = _Round()
        self.multi_type = len(sim.cluster.gpu_types) > 1
        # Livelock watch (finite timeout only): states seen since the last start while nothing ran and
        # every job had arrived. With only timeouts left as events the run is deterministic, so a state
        # seen twice repeats forever.
        self.seen: set[tuple[object, ...]] = set()
        self.livelocked = False
        self.admitted: set[str] = set()  # passed the never-fits check (it does not change)
        self.prioritised = len({j.priority for j in workload.jobs}) > 1

    # -- time -----------------------------------------------------------------------------------
    def advance(self, t: float) -> None:
        dt = t - self.clock
        if dt > 0:
            self.held_gpu_s += self.held_gpus * dt
            if self.stalled:
                self.stalled_s += dt
        super().advance(t)

    def placer_wake(self, plan: Plan) -> float:
        """Also wake at the next partial-gang timeout: nothing else may happen before it."""
        wake = super().placer_wake(plan)
        if self.timeout_s is not None and not self.livelocked and self.partial:
            wake = min(wake, min(p.deadline for p in self.partial.values()))
        return wake

    # -- one round --------------------------------------------------------------------------------
    def decide(self) -> Plan:
        self.decisions += 1
        self.expire_partials()
        # Pack and spread read only the cluster and free capacity from the snapshot: no job lists needed.
        snap = Snapshot.build(self.clock, self.cluster, self.free_gpus, self.free_cpus, self.free_mem, (), ())
        self.snap = snap
        free = FreeCapacity(snap)
        placer = self.sim.placer
        nodes_of = self.cluster.nodes
        self.round = _Round()
        starts: list[Start] = []
        rejects: list[Reject] = []
        waits: list[Wait] = []
        no_fit = _NoFit()
        for live in self.pending_order():
            view = live.view
            spec = view.spec
            if spec.job_id not in self.admitted:
                why_never = never_fits(spec, self.cluster)
                if why_never:
                    rejects.append(Reject(spec.job_id, why_never))
                    continue
                self.admitted.add(spec.job_id)
            held = self.partial.get(spec.job_id)
            nodes = list(held.nodes) if held is not None else []
            gpu_type = held.gpu_type if held is not None else None
            reason: WaitReason | None = None
            while len(nodes) < spec.learners:
                prefer = (gpu_type,) if gpu_type is not None else None
                key: Shape = (spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner,
                              spec.excluded_types, prefer)
                reason = no_fit.exact.get(key)
                if reason is not None:
                    break
                if no_fit.known(key) or not self.fits_somewhere(spec, free, gpu_type):
                    reason = failure_reason(view, 1, free, snap)
                else:
                    result = placer.place(view, 1, free, snap, prefer)
                    if isinstance(result, Allocation):
                        free.take(result)
                        node = result.learner_nodes[0]
                        nodes.append(node)
                        if gpu_type is None and self.multi_type and spec.gpus_per_learner > 0:
                            gpu_type = nodes_of[node].gpu_type
                        continue
                    reason = result
                no_fit.add(key, reason)
                break
            if len(nodes) == spec.learners:
                starts.append(Start(spec.job_id, self.allocation(view, nodes)))
                continue
            if held is None or len(nodes) > len(held.nodes):
                self.round.binds[spec.job_id] = (nodes, gpu_type)
            assert reason is not None
            waits.append(Wait(spec.job_id, reason))
        return Plan(starts=tuple(starts), rejects=tuple(rejects), waits=tuple(waits))

    def pending_order(self) -> list[_Live]:
        """Kubernetes' PrioritySort: higher priority first, then the time queued. The queue dict is kept
        in the order jobs were queued (arrivals in submit order, requeues at the back), so a stable sort
        on priority alone gives it."""
        if not self.prioritised:
            return list(self.queued.values())
        return sorted(self.queued.values(), key=lambda live: -live.view.spec.priority)

    def fits_somewhere(self, spec: JobSpec, free: FreeCapacity, gpu_type: str | None) -> bool:
        """Whether one learner fits on some node (of `gpu_type`, when set): the cheap question first, so
        the placer is asked only where it will find a place."""
        ok = free.gpus >= spec.gpus_per_learner - 1e-9
        if spec.cpus_per_learner > 0:
            ok &= free.cpus >= spec.cpus_per_learner - 1e-6
        if spec.mem_gb_per_learner > 0:
            ok &= free.mem >= spec.mem_gb_per_learner - 1e-6
        for t, mask in self.cluster.type_masks:
            if t in spec.excluded_types or (gpu_type is not None and t != gpu_type):
                ok &= ~mask
        return bool(ok.any())

    @staticmethod
    def allocation(view: JobView, nodes: list[int]) -> Allocation:
        s = view.spec
        return Allocation(s.job_id, tuple(nodes), s.gpus_per_learner, s.cpus_per_learner, s.mem_gb_per_learner)

    # -- carrying it out --------------------------------------------------------------------------
    def apply(self, plan: Plan) -> None:
        for job_id, (nodes, gpu_type) in self.round.binds.items():
            self.bind(self.queued[job_id].view, nodes, gpu_type)
        for s in plan.starts:
            held = self.partial.pop(s.job_id, None)
            if held is not None:  # its bound learners become the running gang's (start holds them again)
                self.release(self.queued[s.job_id].view, held)
        super().apply(plan)
        self.watch(plan)

    def bind(self, view: JobView, nodes: list[int], gpu_type: str | None) -> None:
        held = self.partial.get(view.job_id)
        before = len(held.nodes) if held is not None else 0
        self.hold(self.allocation(view, nodes[before:]), +1, busy=False)
        self.held_gpus += (len(nodes) - before) * view.spec.gpus_per_learner
        if held is None:
            deadline = math.inf if self.timeout_s is None else self.clock + self.timeout_s
            self.partial[view.job_id] = _Partial(nodes, self.clock, deadline, gpu_type)
        else:
            held.nodes = nodes

    def release(self, view: JobView, held: _Partial) -> None:
        self.hold(self.allocation(view, held.nodes), -1, busy=False)
        self.held_gpus -= len(held.nodes) * view.spec.gpus_per_learner

    def expire_partials(self) -> None:
        """Partial gangs past their timeout give their learners back and go to the back of the queue."""
        if self.timeout_s is None or self.livelocked:
            return
        expired = [job_id for job_id, p in self.partial.items() if p.deadline <= self.clock]
        for job_id in expired:
            live = self.dequeue(job_id)
            self.release(live.view, self.partial.pop(job_id))
            self.timeouts += 1
            live.view = dataclasses.replace(live.view, queued_since=self.clock)
            self.enqueue(live)

    def watch(self, plan: Plan) -> None:
        """Book stalls (nothing runs while partial gangs hold GPUs) and detect a livelock of timeouts."""
        self.stalled = bool(self.partial) and not self.running
        if self.stalled and self.first_stall_s is None:
            self.first_stall_s = self.clock
        if plan.starts:
            self.seen.clear()
        if self.timeout_s is None or not self.stalled or len(self.records) < len(self.jobs):
            return
        state = (
            tuple(self.queued),
            tuple((j, tuple(p.nodes), round(p.deadline - self.clock, 3)) for j, p in self.partial.items()),
        )
        if state in self.seen:
            self.livelocked = True  # placer_wake stops waking for timeouts: the run ends here
        self.seen.add(state)

    def run(self) -> SimResult:
        result = super().run()
        # Ended on its own (no event left, every job arrived): whatever still holds a partial gang can
        # never complete. Stopped by --until instead: they may still have, so none is called deadlocked.
        ended = (not self.events and len(self.records) == len(self.jobs)
                 and (self.timeout_s is None or self.livelocked or not self.partial))
        deadlocked = len(self.partial) if ended else 0
        result.mode_metrics = {
            "gang": False,
            "partial_timeout_s": self.timeout_s,
            "gpu_hours_held_by_partial_gangs": self.held_gpu_s / 3600,
            "partial_gang_timeouts": self.timeouts,
            "deadlocked_jobs": deadlocked,
            "starved_jobs": len(self.queued) - deadlocked if ended else 0,
            "partial_gangs_at_end": len(self.partial),
            "gpus_held_at_end": self.held_gpus,
            "livelock": self.livelocked,
            "first_stall_s": self.first_stall_s,
            "stalled_s": self.stalled_s,
        }
        return result
