"""The simulator run forward from a snapshot: when would each queued job start if nothing new arrived?

The live platform asks this for its queue-wait estimates. The run starts from the snapshot's instant with
its running jobs holding their allocations (ending after their remaining expected work) and its queued
jobs waiting, and no future arrivals; it is the same event loop (simulator._Run), the same decide(), the
same policy and placer as a simulation. Attempts do not fail (nobody knows which will), and the
performance model is neutral by default: a job's duration is the live platform's expectation for the
placement it will get.

The policy and placer passed in are used (and may be mutated) by the run: give it copies of live ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from loadmaster.core.job import JobStatus
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.plan import Plan
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot
from loadmaster.sim.failures import AttemptPlan
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.records import JobRecord
from loadmaster.sim.simulator import SimConfig, Simulator, _Live, _Run

DEFAULT_HORIZON_S = 7 * 86400.0


@dataclass(frozen=True)
class Forecast:
    """Simulated start time of each queued job of the snapshot (None: not within the horizon, or rejected)."""

    clock: float
    horizon_at: float
    starts: Mapping[str, float | None]
    decisions: int


def neutral_perf(snap: Snapshot) -> PerformanceModel:
    """Every GPU type at one speed, no locality or CPU penalty: durations are taken as given."""
    return PerformanceModel(snap.cluster, type_speed={}, locality=False, cpu=False)


def forecast(snap: Snapshot, policy: Policy, placer: Placer, *, horizon_s: float = DEFAULT_HORIZON_S,
             max_decisions: int | None = None, perf: PerformanceModel | None = None,
             restart_overhead_s: float = 0.0, checkpoint_interval_s: float = 900.0,
             between: Callable[[], None] | None = None) -> Forecast:
    """Run the simulator forward from `snap` until every queued job started, `horizon_s` of simulated time
    passed, or `max_decisions` decisions were made; jobs not started by then get None.

    `between` is called after each decision (a caller sharing the CPU may pause the run there).
    """
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise ValueError(f"horizon_s must be a finite number > 0, got {horizon_s}")
    sim = Simulator(snap.cluster, policy, placer, perf=perf or neutral_perf(snap),
                    config=SimConfig(checkpoint_interval_s, restart_overhead_s, snap.clock + horizon_s),
                    tenants=snap.tenants)
    run = _ForecastRun(sim, snap, max_decisions, between)
    result = run.run()
    starts = {job_id: run.records[i].first_start_s for job_id, i in run.waiting.items()}
    return Forecast(snap.clock, snap.clock + horizon_s, MappingProxyType(starts), result.decisions)


class _ForecastRun(_Run):
    """A simulator run whose initial state is a snapshot instead of an empty cluster."""

    def __init__(self, sim: Simulator, snap: Snapshot, max_decisions: int | None,
                 between: Callable[[], None] | None) -> None:
        super().__init__(sim, Workload([], LoadReport("forecast")), None)
        self.clock = snap.clock
        self.max_decisions = max_decisions
        self.between = between
        self.waiting: dict[str, int] = {}  # the snapshot's queued jobs -> their index in records
        self.done = False
        for view in snap.running:
            self.seed_running(view)
        for view in snap.queued:
            self.seed_queued(view)
        # What the snapshot says is free wins over cluster minus running (they agree for a live snapshot).
        self.free_gpus[:] = snap.free_gpus
        self.free_cpus[:] = snap.free_cpus
        self.free_mem[:] = snap.free_mem
        self.ledger.reset(self.free_gpus, self.free_cpus, self.free_mem)
        if self.live:
            # A wake-up that ends no attempt (its token matches none) makes the loop decide at the
            # snapshot's instant first, as the live control loop would, before any running job ends.
            self.push_event(self.clock, 0, -1)

    def _add(self, view: JobView, record: JobRecord) -> _Live:
        plan = AttemptPlan((view.spec.duration_s,), (), JobStatus.COMPLETED)
        live = _Live(len(self.live), record, plan, view)
        live.reason_since = self.clock
        self.live.append(live)
        self.records.append(record)
        return live

    def seed_running(self, view: JobView) -> None:
        alloc = view.allocation
        assert alloc is not None
        spec = view.spec
        fresh = JobView(spec, view.queued_since, view.attempt, None, view.work_at(self.clock), 0.0, self.clock,
                        view.attained_at(self.clock), view.preemptions, None)
        live = self._add(fresh, JobRecord(spec, JobStatus.PROCESSING, first_start_s=view.started_at))
        self.launch(live, alloc, 0.0)
        # launch() stamps the start as now; keep the job's own (victim order and LAS read it).
        kept = dataclasses.replace(live.view, started_at=view.started_at)
        live.view = kept
        self.running_views[spec.job_id] = kept
        self._running_tuple = None
        self.tenant_running[spec.tenant][spec.job_id] = kept

    def seed_queued(self, view: JobView) -> None:
        live = self._add(view, JobRecord(view.spec))
        self.waiting[view.job_id] = live.index
        self.enqueue(live)

    def apply(self, plan: Plan) -> None:
        super().apply(plan)
        if self.between is not None:
            self.between()
        if self.out_of_budget() or all(self.records[i].first_start_s is not None or self.records[i].finished
                                       for i in self.waiting.values()):
            self.end()  # every job asked about has its answer (or the budget is spent)

    def out_of_budget(self) -> bool:
        return self.max_decisions is not None and self.decisions >= self.max_decisions

    def end(self) -> None:
        self.done = True
        self.clear_events()
        self.queued.clear()
        self.growable.clear()

    def may_decide(self) -> bool:
        # Rounds that change nothing count against the budget too (as when each was made): end the run
        # where the budget ends.
        if self.out_of_budget():
            self.end()
            return False
        return True

    def placer_wake(self, plan: Plan) -> float:
        return math.inf if self.done else super().placer_wake(plan)
