"""The one simulator: replays a workload on a virtual clock, driving the pure decide() core.

Time jumps from event to event (arrival, attempt end, round end); a running job's progress is a straight
line between events (rate from the performance model), so nothing ticks.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import TRANSITIONS, Allocation, JobSpec, JobStatus, check_transition
from loadmaster.core.tally import tally
from loadmaster.core.workload import Workload
from loadmaster.scheduling.decide import Reauctions
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.plan import Plan, Start, WaitReason
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.snapshot import FreeLedger, JobView, ShellFrame, Snapshot, TenantQuota
from loadmaster.sim.collector import paused
from loadmaster.sim.failures import AttemptPlan, FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.records import JobRecord, Timeline

ProgressFn = Callable[[float, int], None]


@dataclass(frozen=True)
class SimConfig:
    checkpoint_interval_s: float = 900.0  # work lost on preemption is what ran since the last checkpoint
    restart_overhead_s: float = 30.0  # paid each time a job (re)starts after a preemption
    until_s: float | None = None  # stop the clock here; jobs still in the system count as unfinished
    seed: int = 0
    # Defragment: decide() may move smaller running jobs so a gang waiting on fragmentation fits; a move costs
    # the restart overhead and the work since the last checkpoint, like a preemption without the queue.
    migrate: bool = False
    # Smoke test first (Philly's lesson: most failures come early): each attempt of a multi-GPU job first runs
    # this many seconds on one GPU; an attempt that ends within it ends there, on one GPU instead of the gang.
    smoke_test_s: float = 0.0
    # Closed-loop users (docs/workloads.md): a job's submit time is when its user means to submit it; while its
    # tenant (a VC) has this many jobs queued, the user holds it back and submits it when the queue is shorter
    # (its queueing delay counts from then). None: every job is submitted at its trace time.
    vc_queue: int | None = None

    def __post_init__(self) -> None:
        if self.vc_queue is not None and self.vc_queue < 1:
            raise ValueError(f"vc_queue must be >= 1 (jobs a tenant has queued before its users hold back), "
                             f"got {self.vc_queue}")


@dataclass
class SimResult:
    cluster: Cluster
    records: list[JobRecord]
    timeline: Timeline
    end_s: float
    busy_gpu_s: float
    preemptions: int
    decisions: int
    resizes: int = 0
    tenants: Mapping[str, TenantQuota] = field(default_factory=dict)
    # Extra summary.json keys from a simulation mode other than gang scheduling (learner_at_a_time.py).
    mode_metrics: dict[str, float | int | bool | None] = field(default_factory=dict)


@dataclass(slots=True)
class _Live:
    """Mutable per-job state that only the simulator sees."""

    index: int
    record: JobRecord
    attempts: AttemptPlan
    view: JobView
    attempt_idx: int = 0
    run_start: float = 0.0  # when the current run began holding GPUs
    # GPU-seconds held by the current attempt over all its runs (a preemption or resize splits an attempt
    # into several): what a failure of the attempt wasted.
    attempt_gpu_s: float = 0.0
    token: int = 0  # bumped to invalidate a stale attempt-end event
    reason_since: float = 0.0
    reason: str = ""
    contention_at_submit: float = 0.0
    smoking: bool = False  # the current attempt runs its smoke test (one GPU) before its gang is placed


@dataclass
class SmokeTally:
    """What smoke tests did in one run (summary.json keys, only when they are on)."""

    runs: int = 0  # smoke tests that ran to their end (a preempted one counts once, when it ends)
    caught: int = 0  # failed attempts that ended within their smoke test, on one GPU
    gpu_s: float = 0.0  # GPU time the smoke tests held
    caught_gang_gpu_s: float = 0.0  # what those failed attempts would have held as whole gangs

    def metrics(self) -> dict[str, float | int | bool | None]:
        return {"smoke_tests": self.runs, "failures_caught_by_smoke_test": self.caught,
                "gpu_hours_smoke_tests": self.gpu_s / 3600,
                "gpu_hours_failures_caught_would_have_held": self.caught_gang_gpu_s / 3600}


def _read_only(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    view = a.view()
    view.flags.writeable = False
    return view


def smoke_spec(spec: JobSpec, seconds: float) -> JobSpec:
    """The one-GPU smoke test of a multi-GPU job: one learner, one GPU, the CPUs and memory of one GPU's share."""
    share = 1.0 / spec.gpus_per_learner if spec.gpus_per_learner else 0.0
    return replace(spec, learners=1, gpus_per_learner=1, duration_s=seconds, min_learners=None, max_learners=None,
                   cpus_per_learner=spec.cpus_per_learner * share, mem_gb_per_learner=spec.mem_gb_per_learner * share)


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        placer: Placer,
        failures: FailureModel | None = None,
        perf: PerformanceModel | None = None,
        config: SimConfig | None = None,
        tenants: Mapping[str, TenantQuota] | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.placer = placer
        self.config = config or SimConfig()
        self.failures = failures or FailureModel(seed=self.config.seed)
        self.perf = perf or PerformanceModel(cluster)
        self.tenants = dict(tenants or {})

    def run(self, workload: Workload, progress: ProgressFn | None = None) -> SimResult:
        with paused():
            return _Run(self, workload, progress).run()


# Read once per attempt: an enum member read off its class goes through the enum's descriptor in Python 3.11
# (~100 ns), a module global does not (~18 ns).
_PROCESSING, _FAILED = JobStatus.PROCESSING, JobStatus.FAILED


class _Run:
    # Whether a pass that changed nothing since a decision quiet_until() bounds is counted, not decided (run());
    # off only in tests that compare a run which decides at every such pass with one that does not.
    counts_stale: ClassVar[bool] = True

    def __init__(self, sim: Simulator, workload: Workload, progress: ProgressFn | None) -> None:
        self.sim = sim
        self.cluster = sim.cluster
        self.jobs = workload.jobs
        self.progress = progress
        self.free_gpus = sim.cluster.gpu_capacity.astype(np.float64)
        self.free_cpus = sim.cluster.cpu_capacity.copy()
        self.free_mem = sim.cluster.mem_capacity.copy()
        # What every snapshot is given, made once: read-only views of the free arrays (they follow every
        # change) and the quotas, which never change during a run.
        self.free_views = (_read_only(self.free_gpus), _read_only(self.free_cpus), _read_only(self.free_mem))
        self.quotas = MappingProxyType(dict(sim.tenants))
        # Their sums and largest free-GPU count, kept by hold() as they change: every snapshot is given them.
        self.ledger = FreeLedger(self.free_gpus, self.free_cpus, self.free_mem)
        self.queued: dict[str, _Live] = {}
        self.running: dict[str, _Live] = {}
        # The views decide() sees, kept beside the live state: the queue in a Session (which keeps it in the
        # policy's order between decisions), the running jobs in a dict (a snapshot copies them).
        self.session = Session(sim.policy, sim.placer, sim.config.migrate)
        # With migration, a re-auctioning policy (themis) may move running jobs into GPUs that free up while
        # nobody waits: decisions are made then too, as the live loop makes them on every change.
        self.reauctions = sim.config.migrate and isinstance(sim.policy, Reauctions)
        self.rate_of = sim.perf.rate  # asked at every start
        # Whether the placer's answers never change with time alone (placer_wake() asks after every decision).
        self.placer_static = type(sim.placer).next_change_s is Placer.next_change_s
        self.running_views: dict[str, JobView] = {}
        # Their values as the snapshots' tuple, made again only after they change: policies that keep numbers
        # per tuple of running views (LAS) compute them once for all the decisions in between.
        self._running_tuple: tuple[JobView, ...] | None = None
        # GPUs per tenant, every tenant that ever ran (zeros included), in the order they first ran; and the
        # same without the zeros, in that order, kept in place and handed to every snapshot as a read-only
        # view (build() would otherwise copy it at every decision).
        self.tenant_gpus: dict[str, int] = {}
        self._holding: dict[str, int] = {}
        self.holding_view = MappingProxyType(self._holding)
        self.tenant_running: dict[str, dict[str, JobView]] = {}
        # Running jobs per priority class (no zeros): counted at the first snapshot that asks (the priority
        # policy), kept by launch() and stop_only() from then on; None until then, so that others pay nothing.
        self._priorities: dict[int, int] | None = None
        # Running elastic jobs below their maximum size (a dict: ordered, so runs repeat exactly).
        self.growable: dict[str, None] = {}
        # Attempt ends: a heap of plain floats, each time once, and per time the (job index, token) of the events
        # at it in the order they were scheduled. The same order as a heap of (time, seq, index, token) tuples
        # (ties by scheduling order), without a tuple comparison per sift (push_event()).
        self.events: list[float] = []
        self.events_at: dict[float, list[tuple[int, int]]] = {}
        self.live: list[_Live | None] = [None] * len(self.jobs)
        self.records: list[JobRecord] = []
        self.timeline = Timeline()
        self.clock = 0.0
        self.busy = 0
        self.busy_gpu_s = 0.0
        self.contention_integral = 0.0  # integral over time of jobs in the system (queued + running)
        self.preemptions = 0
        self.resizes = 0
        self.migrations = 0
        self.smoke = SmokeTally()
        self.decisions = 0
        self.snap = Snapshot.idle(0.0, sim.cluster)  # the last decision's input (placer_wake reads it)
        self.frame: ShellFrame | None = None  # what every snapshot shares (decide() makes it)
        self.finished = 0
        # Closed-loop users (SimConfig.vc_queue): jobs queued per tenant, and the jobs its users hold back (trace
        # order), with how many are held in all and how long they were held.
        self.gate = sim.config.vc_queue
        self.tenant_queued: dict[str, int] = {}
        self.held: dict[str, deque[int]] = {}
        self.held_n = 0
        self.held_jobs = 0
        self.held_s = 0.0

    # -- time -----------------------------------------------------------------------------------
    def advance(self, t: float) -> None:
        dt = t - self.clock
        if dt > 0:
            self.busy_gpu_s += self.busy * dt
            self.contention_integral += (len(self.queued) + len(self.running)) * dt
            self.clock = t

    def run(self) -> SimResult:
        # The jobs' submit times in trace order, then infinity: the next arrival's time is one subscript (t is
        # never infinity where an arrival is due: the loop stops first).
        arrivals = [job.submit_time_s for job in self.jobs]
        arrivals.append(math.inf)
        next_arrival = 0
        until = self.sim.config.until_s
        round_s = self.sim.policy.round_s
        next_round = math.inf
        next_wake = math.inf  # when a job waiting for locality may place with time alone
        quiet_until = -math.inf  # rounds before this are known to change nothing: counted, not made
        loops = 0
        # Timeline.record() inline (once per loop, the call cost more than what it does).
        times, busy_gpus, queued_n = self.timeline.times, self.timeline.busy_gpus, self.timeline.queued
        # The same objects for the whole run (emptied in place, never replaced): looked up once.
        events, events_at, lives, running, queued = self.events, self.events_at, self.live, self.running, self.queued
        # advance() inline (once per loop) unless a subclass adds to it.
        own_advance = type(self).advance is not _Run.advance
        inf = math.inf
        heappop = heapq.heappop
        gated = self.gate is not None
        progress = self.progress
        # placer_wake() answers infinity at once for a static placer unless a subclass adds to it: not called.
        wakes = not self.placer_static or type(self).placer_wake is not _Run.placer_wake
        # A pass that popped only stale attempt ends (of attempts preempted, moved or resized since they were
        # scheduled) with no arrival, no attempt end and no wake-up due changed nothing but the clock since the
        # last decision: where quiet_at_pass() bounds that decision's plan as repeated until a later time, the
        # decision this pass makes is counted, not made, as quiet_rounds() counts a round (on the 3,000-job
        # overload, of the passes that changed nothing, DRF's 1,359 -> 360 counted, LAS' 6,421 -> 923, Themis'
        # 8,857 -> 1,011; the rest follow a plan that acted, or a bound time passed). Not in a subclass that decides,
        # carries plans out or budgets decisions its own way (learner_at_a_time, forecast), nor with a placer
        # whose answers change with time (its wake-ups follow every decision made).
        counts_stale = (self.counts_stale and not wakes and type(self).decide is _Run.decide
                        and type(self).apply is _Run.apply and type(self).may_decide is _Run.may_decide)
        plan: Plan | None = None  # the last decision made
        settled: float | None = None  # quiet_at_pass(plan), once worked out (None: not yet)
        spans_gap = type(self.sim.policy).next_change_spans is not Policy.next_change_spans
        hits = misses = 0  # bounds worked out at such a pass that let it be counted, or did not
        settles = self.session.settles  # whether a plan that acted may be bounded at all (_quiet)
        # A lone arrival's start is carried out without a Plan (start_or_decide()) unless a subclass decides or
        # carries plans out its own way, or a placer's wake-up reads the plan.
        bare_starts = not wakes and type(self).decide is _Run.decide and type(self).apply is _Run.apply
        keep_plans = bool(round_s)  # quiet_until() reads the plan of every decision then
        while True:
            t_arrival = arrivals[next_arrival]
            t_event = events[0] if events else inf
            # min(t_arrival, t_event, min(next_round, next_wake) if queued else inf) without the calls: the
            # first of equal values, as min() gives it (an int submit time stays an int).
            t = t_event if t_event < t_arrival else t_arrival
            if queued:
                t_timer = next_wake if next_wake < next_round else next_round
                if t_timer < t:
                    t = t_timer
            if t == inf or (until is not None and t > until):
                break
            if t == next_round and t < min(quiet_until, t_arrival, t_event, next_wake):
                assert round_s
                next_round = self.quiet_rounds(next_round, round_s, min(quiet_until, t_arrival, t_event, next_wake))
                continue
            if own_advance:
                self.advance(t)
            else:
                dt = t - self.clock
                if dt > 0:
                    self.busy_gpu_s += self.busy * dt
                    self.contention_integral += (len(queued) + len(running)) * dt
                    self.clock = t
            changed = False  # an arrival or an attempt end this pass
            while arrivals[next_arrival] <= t:
                if gated:
                    self.offer(next_arrival)
                else:
                    self.arrive(next_arrival)
                next_arrival += 1
                changed = True
            while events and events[0] <= t:
                # Every event at that time, in scheduling order; one scheduled while these end (none in this
                # shell: an attempt end only requeues) would come at the same time or later, on a later pass.
                for idx, token in events_at.pop(heappop(events)):
                    live = lives[idx]
                    if live is not None and live.token == token and live.view.spec.job_id in running:
                        self.end_attempt(live)
                        changed = True
            counted = False
            if queued and not changed and counts_stale and plan is not None and t < next_wake:
                # Only stale events or a round: the decision would see what the last one left, at a later clock.
                if settled is None:
                    # Worked out here only while it pays: a bound that counts nothing cost a policy call for
                    # nothing (Themis values every running job for it, ~ a decision, and on the 3,000-job
                    # overload 2,217 of its 2,549 such bounds came before the pass; DRF's and LAS's nearly
                    # never do). A fixed count, so runs repeat exactly. A plan that acted has no bound unless
                    # the Session may know it changes nothing (Session.settles): that costs nothing to know, and
                    # is not counted (SRTF's 1,504 such passes on that overload used up the budget before its
                    # 680 passes after a plan that did not act, 652 of which its next_change_s bounds).
                    if not (plan.empty or settles):
                        settled = -inf
                    elif misses - hits < 64:
                        settled = self.quiet_at_pass(plan)
                        if t < settled:
                            hits += 1
                        else:
                            misses += 1
                    else:
                        settled = -inf
                if t < settled:
                    self.decisions += 1
                    if round_s:
                        next_round = t + round_s
                        # The rounds after it repeat that plan as well (with spans, those between them too).
                        quiet_until = self.quiet_until(plan) if spans_gap else settled
                    counted = True
            if not counted and (queued or ((self.growable or (self.reauctions and running))
                                                   and self.busy < self.cluster.total_gpus)):
                if bare_starts:
                    plan = self.start_or_decide(keep_plans)
                else:
                    plan = self.decide()
                    self.apply(plan)
                settled = None
                # Held jobs go in as their tenants' queues shorten; a start among them can shorten it again.
                while self.held_n and self.release_held():
                    plan = self.decide()
                    self.apply(plan)
                if wakes:
                    assert plan is not None  # not bare_starts
                    next_wake = self.placer_wake(plan)
                if round_s:
                    assert plan is not None  # keep_plans
                    next_round = t + round_s
                    # Asked only where that round comes before anything else can happen (what the next
                    # loop compares it with): otherwise the answer cannot skip it, and working it out
                    # is not free (Themis values every running job).
                    t_next = min(arrivals[next_arrival],
                                 events[0] if events else math.inf, next_wake)
                    if next_round < t_next:
                        quiet_until = self.quiet_until(plan)
                        # The same bound for a pass at any clock, unless the policy's spans leave out some
                        # (a pass may fall inside a span that holds no round): then worked out at the pass.
                        settled = None if spans_gap else quiet_until
                    else:
                        quiet_until = -math.inf
            if times and times[-1] == t:
                busy_gpus[-1] = self.busy
                queued_n[-1] = len(queued)
            else:
                times.append(t)
                busy_gpus.append(self.busy)
                queued_n.append(len(queued))
            loops += 1
            if progress is not None and loops % 2000 == 0:
                progress(self.clock, self.finished)
        end = self.clock if until is None else max(self.clock, until)
        self.advance(end)
        for tenant in list(self.held):  # still held at the end (a stop at --until): submitted now, unfinished
            while self.held[tenant]:
                self.submit_held(tenant)
        self.close_unfinished()
        if self.progress is not None:
            self.progress(self.clock, self.finished)
        result = SimResult(self.cluster, self.records, self.timeline, self.clock, self.busy_gpu_s,
                           self.preemptions, self.decisions, self.resizes, self.sim.tenants)
        if self.sim.config.migrate:  # only then: a run without it writes exactly what it wrote before
            result.mode_metrics["migrations"] = self.migrations
            result.mode_metrics["gpu_hours_lost_to_migration"] = sum(r.gpu_s_lost_migrating
                                                                     for r in self.records) / 3600
        if self.sim.config.smoke_test_s > 0:
            result.mode_metrics.update(self.smoke.metrics())
        if self.gate is not None:
            result.mode_metrics.update({"vc_queue": self.gate, "jobs_held_by_users": self.held_jobs,
                                        "avg_user_hold_s": self.held_s / len(self.jobs) if self.jobs else 0.0})
        return result

    def push_event(self, at: float, idx: int, token: int) -> None:
        """Schedule an attempt end (or, with a token no attempt holds, a wake-up) of job `idx` at `at`."""
        same = self.events_at.get(at)
        if same is None:
            self.events_at[at] = [(idx, token)]
            heapq.heappush(self.events, at)
        else:
            same.append((idx, token))

    def clear_events(self) -> None:
        self.events.clear()
        self.events_at.clear()

    def quiet_until(self, plan: Plan) -> float:
        """After a decision, until when timer rounds are known to change nothing: a plan that changed
        nothing (no action, no reason) is repeated by every round until time alone can change an answer:
        a queued job's order (the Session's next_change_s) or whom the policy lets displace whom
        (Policy.next_change_s; with Policy.next_change_spans, the rounds between its spans too). So is a plan
        of new reasons alone: carrying it out changes no job's resources and no queue, only the reasons the
        Session compares the next plan with, so a decision right after it, at the same clock, would give that
        plan with the same reasons, i.e. no change (DRF on the 3,000-job overload made 1,322 such rounds, one
        real decision in nine). After any other
        plan the next round is made, unless the Session knows without deciding that a decision on the state
        the plan left would change nothing, nor would any until an event (Session.changes_nothing: DRF where
        every class is pruned, after 2,817 of the 3,573 plans that acted on the 3,000-job overload and were
        asked); the rounds before the Session's next_change_s() are then skipped."""
        return self._quiet(plan, rounds=True)

    def quiet_at_pass(self, plan: Plan) -> float:
        """After a decision, until when a decision at any clock is known to repeat it (a loop pass that changed
        nothing since, at a clock that need not be a round's): quiet_until() without skipping the spans that
        hold no round (Policy.next_change_spans), since such a pass may fall inside one."""
        return self._quiet(plan, rounds=False)

    def _quiet(self, plan: Plan, rounds: bool) -> float:
        if self.sim.placer.time_dependent_key:
            # Its answers change with the time jobs have waited (locality relaxes), displacements included:
            # every round is made.
            return -math.inf
        if plan.starts or plan.preempts or plan.resizes or plan.rejects or plan.migrations:
            session = self.session
            if (not session.settles or type(self).decide is not _Run.decide
                    or not session.changes_nothing(self.snapshot())):
                return -math.inf  # (a subclass that decides without the Session: learner_at_a_time)
            return self.session.next_change_s()  # the policy's answers then hold until an event
        spans = self.sim.policy.next_change_spans(self.snap, self.session.heads())
        first = self.first_round_within(spans) if rounds else spans[0][0] if spans else math.inf
        return min(self.session.next_change_s(), first)

    def first_round_within(self, spans: Sequence[tuple[float, float]]) -> float:
        """The first clock of a span (Policy.next_change_spans) that holds one of the rounds after this decision
        (the run loop's: this clock + round_s, + round_s, ..., the same float sums): the rounds before it
        fall between spans and change nothing (LAS: checkpoint windows that overlap for less than a round)."""
        round_s = self.sim.policy.round_s
        assert round_s
        at = self.clock + round_s
        for first, last in spans:
            if last == math.inf or first == math.inf:
                return first  # the first round at or after it is within it
            while at < first:
                at += round_s
            if at <= last:
                return first
        return math.inf

    def quiet_rounds(self, at: float, round_s: float, limit: float) -> float:
        """Count the rounds at `at`, `at + round_s`, ... before `limit` (and not past until_s) as decisions
        without making them: time advances through each as a round would, step by step, so the integrals
        (busy GPU-seconds, jobs in the system) add up exactly as they would have. Returns the next round."""
        until = self.sim.config.until_s
        while at < limit and (until is None or at <= until) and self.may_decide():
            self.advance(at)
            self.decisions += 1
            at += round_s
        return at

    def may_decide(self) -> bool:
        """Whether another decision may be made (a forecast stops after a budget of them)."""
        return True

    # -- transitions ----------------------------------------------------------------------------
    def set_status(self, live: _Live, new: JobStatus) -> None:
        record = live.record
        if new not in TRANSITIONS[record.status]:  # twice per attempt: the call only to raise
            check_transition(live.view.job_id, record.status, new)
        record.status = new

    # -- closed-loop users ----------------------------------------------------------------------
    def offer(self, idx: int) -> None:
        """A job's user means to submit it now: it goes in unless its tenant has `vc_queue` jobs queued, or
        earlier jobs of the tenant are still held (those go first)."""
        tenant = self.jobs[idx].tenant
        held = self.held.get(tenant)
        if held or self.tenant_queued.get(tenant, 0) >= (self.gate or 0):
            if held is None:
                held = self.held[tenant] = deque()
            held.append(idx)
            self.held_n += 1
            return
        self.arrive(idx)

    def release_held(self) -> bool:
        """Submit held jobs, in order, while their tenant has fewer than `vc_queue` queued; whether any went in."""
        gate = self.gate or 0
        released = False
        for tenant, held in self.held.items():
            while held and self.tenant_queued.get(tenant, 0) < gate:
                self.submit_held(tenant)
                released = True
        return released

    def submit_held(self, tenant: str) -> None:
        idx = self.held[tenant].popleft()
        self.held_n -= 1
        spec = self.jobs[idx]
        if self.clock > spec.submit_time_s:  # held back, not only behind jobs meant for the same instant
            self.held_jobs += 1
            self.held_s += self.clock - spec.submit_time_s
            spec = replace(spec, submit_time_s=self.clock)
        self.arrive(idx, spec)

    def arrive(self, idx: int, spec: JobSpec | None = None) -> None:
        if spec is None:
            spec = self.jobs[idx]
        record = JobRecord(spec)
        self.records.append(record)
        submit = spec.submit_time_s
        live = _Live(idx, record, self.sim.failures.plan(spec), JobView(spec, submit, 1, None, 0.0, 0.0, submit))
        if self.sim.config.smoke_test_s > 0:
            self.smoke_first(live)
        live.reason_since = self.clock
        live.contention_at_submit = self.contention_integral
        self.live[idx] = live
        # enqueue(live) inline: once per job.
        job_id = spec.job_id
        self.queued[job_id] = live
        self.session.add(live.view)
        if self.gate is not None:
            tenant = spec.tenant
            self.tenant_queued[tenant] = self.tenant_queued.get(tenant, 0) + 1

    def enqueue(self, live: _Live) -> None:
        self.queued[live.view.spec.job_id] = live
        self.session.add(live.view)
        if self.gate is not None:
            tenant = live.record.spec.tenant
            self.tenant_queued[tenant] = self.tenant_queued.get(tenant, 0) + 1

    def dequeue(self, job_id: str) -> _Live:
        self.session.remove(job_id)
        return self.unqueue(job_id)

    def unqueue(self, job_id: str) -> _Live:
        """dequeue() of a job the Session has let go already (start_or_decide())."""
        live = self.queued.pop(job_id)
        if self.gate is not None:
            self.tenant_queued[live.record.spec.tenant] -= 1
        return live

    def decide(self) -> Plan:
        self.decisions += 1
        snap = self.snap = self.snapshot()
        return self.session.decide(snap)

    def start_or_decide(self, keep: bool) -> Plan | None:
        """decide() and apply(), a lone arrival's start carried out without a Plan (Session.start_or_decide);
        returns the plan carried out, None for such a start unless `keep` (one is made then). None stands for
        a plan that started the one job queued: the run loop decides again before it would read it (it reads
        the last plan only at a pass with a queue and no arrival or attempt end, and the queue empties here)."""
        self.decisions += 1
        snap = self.snap = self.snapshot()
        got = self.session.start_or_decide(snap)
        if not isinstance(got, tuple):
            self.apply(got)
            return got
        job_id, alloc = got
        self.start(self.unqueue(job_id), alloc)
        return Plan((Start(job_id, alloc),)) if keep else None

    def snapshot(self) -> Snapshot:
        """A decision's input: the state now."""
        frame = self.frame
        if frame is None:  # made at the first decision: a subclass may set its state up after __init__
            # The free arrays change only when the plan is carried out, after decide(): views, not copies.
            frame = self.frame = ShellFrame(self.cluster, *self.free_views, self.ledger, self.running_tuple,
                                            self.quotas, self.holding_view, self.running_by_tenant,
                                            self.session.queued_tenants, self.running_priorities)
        return frame.at(self.clock, self.session.queued, self.growable_views if self.growable else ())

    def running_tuple(self) -> tuple[JobView, ...]:
        running = self._running_tuple
        if running is None or len(running) != len(self.running_views):
            running = self._running_tuple = tuple(self.running_views.values())
        return running

    def placer_wake(self, plan: Plan) -> float:
        """The earliest time the placer's answer for a job left waiting for locality changes with time
        alone (Placer.next_change_s). Decisions happen only on events, so without this wake-up such a job
        would wait for the next arrival or completion even after its wait relaxed."""
        wake = math.inf
        if self.placer_static:
            return wake  # this placer's answers never change with time alone
        for view in self.session.waiting_for(WaitReason.LOCALITY_WAIT):
            at = self.sim.placer.next_change_s(view, self.snap)
            if at is not None and at > self.clock:
                wake = min(wake, at)
        return wake

    def growable_views(self) -> tuple[JobView, ...]:
        """Running elastic jobs below their maximum: the only ones decide() may grow."""
        if not self.growable:  # asked at every decision; a trace without elastic jobs never has any
            return ()
        return tuple(self.running_views[j] for j in self.growable)

    def running_by_tenant(self) -> dict[str, tuple[JobView, ...]]:
        return {t: tuple(views.values()) for t, views in self.tenant_running.items()}

    def running_priorities(self) -> dict[int, int]:
        counts = self._priorities
        if counts is None:
            counts = self._priorities = {}
            for view in self.running_views.values():
                tally(counts, view.spec.priority, 1)
        return counts

    def apply(self, plan: Plan) -> None:
        if plan.preempts or plan.resizes or plan.migrations or plan.rejects:  # most plans only start or wait
            self.apply_stops(plan)
        for st in plan.starts:
            self.start(self.dequeue(st.job_id), st.allocation)
        for w in plan.waits:
            live = self.queued[w.job_id]
            if live.reason != w.reason:
                self.close_wait(live)
                live.reason = w.reason
                live.record.last_wait_reason = w.reason

    def apply_stops(self, plan: Plan) -> None:
        """What apply() does before the starts: preemptions, resizes, moves and rejections, in that order."""
        for p in plan.preempts:
            self.preempt(self.running[p.job_id])
        for z in plan.resizes:
            self.resize(self.running[z.job_id], z.allocation)
        # Every move stops before any restarts: one job's new servers may be what another left.
        moving = [(self.running[m.job_id], m.allocation, self.checkpoint(self.running[m.job_id]))
                  for m in plan.migrations]
        for live, _, _ in moving:
            self.stop_only(live)
        for live, alloc, (kept, attained) in moving:
            self.migrate(live, alloc, kept, attained)
        for r in plan.rejects:
            live = self.dequeue(r.job_id)
            live.record.reject_reason = r.reason
            self.close_wait(live)
            self.set_status(live, JobStatus.FAILED)
            self.finish(live)

    def close_wait(self, live: _Live) -> None:
        """Book the time waited since the last reason change under that reason."""
        waited = self.clock - live.reason_since
        if waited > 0:
            key = live.reason or "undecided"
            live.record.wait_s[key] = live.record.wait_s.get(key, 0.0) + waited
        live.reason_since = self.clock

    def hold(self, alloc: Allocation, sign: int, busy: bool = True) -> None:
        """Take (sign +1) or release (-1) an allocation's resources; capacity must never go negative.
        busy=False for learners that hold GPUs without computing (a partial gang, learner_at_a_time.py)."""
        g, c, m = alloc.gpus_per_learner, alloc.cpus_per_learner, alloc.mem_gb_per_learner
        nodes = alloc.learner_nodes
        if len(nodes) == 1 and not (c or m):
            # One learner, no CPUs or memory asked (most of a Philly trace's gangs): the loop below, unrolled.
            if self.ledger.shift_gpus(self.free_gpus, nodes[0], sign * g) < -1e-9:
                raise AssertionError(f"capacity exceeded on node {nodes[0]} placing {alloc.job_id}: {alloc}")
            if busy:
                self.busy += sign * g
            return
        gpus, cpus, mem = self.free_gpus, self.free_cpus, self.free_mem
        shift_gpus, shift_cpus_mem = self.ledger.shift_gpus, self.ledger.shift_cpus_mem
        # A gang on one server (most of them): no per-node count to make.
        for node, count in ((nodes[0], 1),) if len(nodes) == 1 else alloc.per_node().items():
            left_g = shift_gpus(gpus, node, sign * count * g)
            if c or m:
                # Traces without CPU or memory requests (Philly's) leave these arrays as they are: x + 0.0 is x.
                left_c, left_m = shift_cpus_mem(cpus, mem, node, -sign * count * c, -sign * count * m)
                if left_c < -1e-6 or left_m < -1e-6:
                    raise AssertionError(f"capacity exceeded on node {node} placing {alloc.job_id}: {alloc}")
            if left_g < -1e-9:
                raise AssertionError(f"capacity exceeded on node {node} placing {alloc.job_id}: {alloc}")
        if busy:
            self.busy += sign * len(nodes) * g

    def start(self, live: _Live, alloc: Allocation) -> None:
        # A lone arrival started at once waited nothing: close_wait() would only set reason_since to the clock,
        # where it is (one call less per start).
        if live.reason_since != self.clock:
            self.close_wait(live)
        live.reason = ""
        self.set_status(live, _PROCESSING)
        record = live.record
        if record.first_start_s is None:
            record.first_start_s = self.clock
        if record.attempts_run <= live.attempt_idx:  # max(attempts_run, attempt_idx + 1) without the call
            record.attempts_run = live.attempt_idx + 1
        view = live.view
        restarted = view.work_done_s > 0 or view.preemptions > 0
        self.launch(live, alloc, self.sim.config.restart_overhead_s if restarted else 0.0)

    def resize(self, live: _Live, alloc: Allocation) -> None:
        """Elastic scale up or down by checkpoint/restart: no work is lost, the restart overhead is paid."""
        view = live.view
        attained = view.attained_at(self.clock)
        work = self.stop_running(live)
        live.view = JobView(view.spec, view.queued_since, view.attempt, None, work, 0.0, self.clock, attained,
                            view.preemptions, None)
        live.record.resizes += 1
        self.resizes += 1
        self.launch(live, alloc, self.sim.config.restart_overhead_s)

    def launch(self, live: _Live, alloc: Allocation, overhead: float) -> None:
        """Hold `alloc` and schedule the end of the current attempt at the allocation's speed."""
        old = live.view
        spec = old.spec
        job_id = spec.job_id
        learners = len(alloc.learner_nodes)
        high = spec.max_learners or spec.learners
        if learners != spec.learners and not (spec.elastic and (spec.min_learners or spec.learners) <= learners
                                              <= high):
            raise AssertionError(f"partial gang for {job_id}: {learners}/{spec.learners}")
        self.hold(alloc, +1)
        if learners < high:
            self.growable[job_id] = None
        elif self.growable:
            self.growable.pop(job_id, None)
        rate = self.rate_of(spec, alloc)
        if rate <= 0:
            raise AssertionError(f"non-positive rate for {job_id}")
        clock = self.clock
        begins = clock + overhead
        view = live.view = JobView(spec, old.queued_since, live.attempt_idx + 1, alloc, old.work_done_s, rate, begins,
                                   old.attained_gpu_s, old.preemptions, clock)
        live.run_start = clock
        target = live.attempts.runtimes[live.attempt_idx]
        if live.smoking:
            # Whether the job crashes is a matter of time, not speed: a smoke test (re)starts from scratch and
            # lasts its length, or until the attempt fails if that comes first.
            end = begins + (min(target, self.sim.config.smoke_test_s) if self.fails(live)
                            else self.sim.config.smoke_test_s)
        else:
            left = target - old.work_done_s
            end = begins + (left if left > 0.0 else 0.0) / rate  # max(0.0, left), as max() gives it
        live.token += 1
        self.push_event(end, live.index, live.token)
        self.running[job_id] = live
        self.running_views[job_id] = view
        self._running_tuple = None
        if self._priorities is not None:
            tally(self._priorities, spec.priority, 1)
        tenant = spec.tenant
        had = self.tenant_gpus.get(tenant, 0)
        holds = self.tenant_gpus[tenant] = had + learners * alloc.gpus_per_learner
        if had:
            self._holding[tenant] = holds
        else:  # back among the holders, in its first-run place (a snapshot's tenant order is that order)
            self._holding.clear()
            self._holding.update((t, g) for t, g in self.tenant_gpus.items() if g)
        running = self.tenant_running.get(tenant)
        if running is None:
            running = self.tenant_running[tenant] = {}
        running[job_id] = view

    def stop_running(self, live: _Live) -> float:
        """Release the job's GPUs; returns its work done. Books GPU time."""
        self.stop_only(live)
        return live.view.work_at(self.clock)

    def stop_only(self, live: _Live) -> None:
        """stop_running() for a caller that has no use for the work done (an attempt's end, a preemption or
        a move, which work out what they keep themselves)."""
        view = live.view
        alloc = view.allocation
        assert alloc is not None
        job_id = view.spec.job_id
        del self.running[job_id]
        del self.running_views[job_id]
        self._running_tuple = None
        if self._priorities is not None:
            tally(self._priorities, view.spec.priority, -1)
        if self.growable:
            self.growable.pop(job_id, None)
        gpus = len(alloc.learner_nodes) * alloc.gpus_per_learner
        tenant = view.spec.tenant
        holds = self.tenant_gpus[tenant] = self.tenant_gpus[tenant] - gpus
        if holds:
            self._holding[tenant] = holds
        else:
            self._holding.pop(tenant, None)
        del self.tenant_running[tenant][job_id]
        self.hold(alloc, -1)
        held = (self.clock - live.run_start) * gpus
        live.record.gpu_s += held
        live.attempt_gpu_s += held
        live.token += 1

    def requeue(self, live: _Live, work_done: float, attained: float, preemptions: int) -> None:
        self.set_status(live, JobStatus.QUEUED)
        live.view = JobView(live.view.spec, self.clock, live.attempt_idx + 1, None, work_done, 0.0, self.clock,
                            attained, preemptions, None)
        live.reason = ""
        live.reason_since = self.clock
        self.enqueue(live)

    def checkpoint(self, live: _Live) -> tuple[float, float]:
        """(work kept, attained service) of a running job stopped now: its work as of its last checkpoint.
        Books the GPU time of the work thrown away."""
        view = live.view
        assert view.allocation is not None
        work = view.work_at(self.clock)
        ckpt = self.sim.config.checkpoint_interval_s
        kept = math.floor(work / ckpt) * ckpt if ckpt > 0 else 0.0
        live.record.gpu_s_lost += (work - kept) / max(view.rate, 1e-12) * view.allocation.gpus
        return kept, view.attained_at(self.clock)

    def migrate(self, live: _Live, alloc: Allocation, kept: float, attained: float) -> None:
        """Restart a stopped job at once on `alloc`: it keeps its attempt and its place, it pays the restart
        overhead and loses the work since its last checkpoint (checkpoint() booked it)."""
        view = live.view
        lost = view.work_at(self.clock) - kept
        assert view.allocation is not None
        live.record.gpu_s_lost_migrating += lost / max(view.rate, 1e-12) * view.allocation.gpus
        live.record.migrations += 1
        self.migrations += 1
        live.view = JobView(view.spec, view.queued_since, view.attempt, None, kept, 0.0, self.clock, attained,
                            view.preemptions, None)
        self.launch(live, alloc, self.sim.config.restart_overhead_s)

    def preempt(self, live: _Live) -> None:
        view = live.view
        assert view.allocation is not None
        kept, attained = self.checkpoint(live)
        self.stop_only(live)
        live.record.preemptions += 1
        self.preemptions += 1
        self.requeue(live, kept, attained, view.preemptions + 1)

    def fails(self, live: _Live) -> bool:
        """Whether the current attempt ends in failure (not the last one, or the last one failing)."""
        return live.attempt_idx < live.attempts.attempts - 1 or live.attempts.outcome is JobStatus.FAILED

    def smoke_first(self, live: _Live) -> None:
        """With smoke tests on, a multi-GPU job's new attempt queues as its one-GPU smoke test."""
        spec = live.record.spec
        if self.sim.config.smoke_test_s <= 0 or spec.gpus <= 1:
            return
        live.smoking = True
        live.view = replace(live.view, spec=smoke_spec(spec, self.sim.config.smoke_test_s))

    def end_attempt(self, live: _Live) -> None:
        view = live.view
        assert view.allocation is not None
        self.stop_only(live)
        if live.smoking:
            attained = view.attained_at(self.clock)
            self.smoke.gpu_s += live.attempt_gpu_s
            self.smoke.runs += 1
            if live.attempts.runtimes[live.attempt_idx] > self.sim.config.smoke_test_s or not self.fails(live):
                # It survived the test (an attempt that succeeds, however short, is not ended by it: it ran on
                # one GPU only as a test): the attempt proper queues for its whole gang, from scratch.
                live.smoking = False
                live.attempt_gpu_s = 0.0
                live.view = replace(view, spec=live.record.spec)
                self.requeue(live, 0.0, attained, view.preemptions)
                return
        held, live.attempt_gpu_s = live.attempt_gpu_s, 0.0
        last = live.attempt_idx == len(live.attempts.runtimes) - 1  # attempts.attempts without the call
        outcome = live.attempts.outcome if last else JobStatus.FAILED
        if live.smoking and outcome is JobStatus.FAILED:
            self.smoke.caught += 1
            self.smoke.caught_gang_gpu_s += live.attempts.runtimes[live.attempt_idx] * live.record.spec.gpus
        if outcome is _FAILED:
            live.record.gpu_s_failed += held
            cats = live.attempts.categories
            if live.attempt_idx < len(cats):
                live.record.failure_categories += (cats[live.attempt_idx].value,)
        if not last:
            # Attained service as of the end (stop_only() changed neither the view nor the clock); a job that
            # ends here for good never needs it.
            attained = view.attained_at(self.clock)
            live.attempt_idx += 1
            if not live.smoking:
                if live.view.spec is not live.record.spec:
                    live.view = replace(live.view, spec=live.record.spec)
                self.smoke_first(live)
            self.requeue(live, 0.0, attained, view.preemptions)
            return
        self.set_status(live, outcome)
        self.finish(live)

    def finish(self, live: _Live) -> None:
        record = live.record
        record.finish_s = self.clock
        life = self.clock - record.spec.submit_time_s
        if life > 0:
            avg = (self.contention_integral - live.contention_at_submit) / life
            record.contention_avg = avg if avg > 1.0 else 1.0  # max(1.0, avg) without the call (once per job)
        spec = record.spec
        share = self.cluster.total_gpus / record.contention_avg
        work = sum(live.attempts.runtimes[: live.attempt_idx + 1])
        if record.first_start_s is None:
            record.ideal_s = 0.0  # rejected before it ran: finish-time fairness does not apply
        else:
            gpus = spec.learners * spec.gpus_per_learner  # spec.gpus
            stretch = gpus / share
            record.ideal_s = work * (stretch if stretch > 1.0 else 1.0) if gpus > 0 else work
        self.finished += 1
        self.live[live.index] = None

    def close_unfinished(self) -> None:
        for live in list(self.running.values()):
            work = self.stop_running(live)
            live.view = JobView(live.view.spec, live.view.queued_since, live.view.attempt, None, work)
        for live in self.queued.values():
            self.close_wait(live)
