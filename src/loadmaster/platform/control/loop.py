"""The control loop: the live shell around decide(), as the simulator is the virtual one.

One round (tick):
1. sync: read the jobs changed since the last round (table.py: change numbers; an idle round costs one
   tiny query) and the tenants if their limits changed;
2. collect what happened: data and results copies done, launches done, attempts ended and progress
   (executor.poll()), users' requests, jobs past max_runtime_s, starts waiting for GPUs; route them all
   (router.py) in one store transaction;
3. reconcile, every `reconcile_s` (reconcile.py);
4. decide, if anything may have changed (a change in the store, an event, a memory change) or the time the
   policy (round_s), a placer (next_change_s) or a launch backoff named has come: build the Snapshot
   incrementally (snapshot.py), decide through the builder's Session (decide()'s plan, at the cost of
   what changed since the last round: the queue stays in the policy's order between rounds, and the
   plan's waits are only the reasons that changed), and route the Plan in one transaction (the
   statement: every start, stop, rejection and changed wait reason, committed or discarded as one);
5. write progress (one transaction), offer the snapshot to the queue estimator when the queue changed.

A store error anywhere stops the round; nothing half-done stays in memory (effects run after commits) and
the sources offer their events again at the next round. Users' requests reach the loop through the store
(the API writes, then calls wake()), never by calls into it, so the loop is the only writer of attempts
and allocations.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, partial

from sqlalchemy import bindparam, func, select, update

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import JobStatus
from loadmaster.platform.control import events as ev
from loadmaster.platform.control import progress, reconcile, requests
from loadmaster.platform.control.allocation import Bookings
from loadmaster.platform.control.batch import Batch, commit
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.gates import Gates
from loadmaster.platform.control.launcher import Launcher
from loadmaster.platform.control.membership import Membership, drain_moves
from loadmaster.platform.control.metrics import Gauges, LoopMetrics
from loadmaster.platform.control.recovery import recover
from loadmaster.platform.control.reports import QueueEntry, RecoveryReport, TickReport
from loadmaster.platform.control.router import route_all
from loadmaster.platform.control.snapshot import DEFAULT_DURATION_S, JobInputs, SnapshotBuilder
from loadmaster.platform.control.stages import Stager
from loadmaster.platform.control.starting import stale_target
from loadmaster.platform.control.state import Phase, StopIntent, StopKind
from loadmaster.platform.control.stopping import runtime_exceeded, smoke_done
from loadmaster.platform.control.table import JobTable, read_tenants
from loadmaster.platform.estimates import Estimator
from loadmaster.platform.executors.base import Executor, MembershipSource
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store, transient
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.platform.tenancy import Isolation
from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.placement.per_job import PerJobPlacer
from loadmaster.scheduling.plan import Migrate, Plan, Wait, WaitReason
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.snapshot import Snapshot, TenantQuota
from loadmaster.sim.forecast import DEFAULT_HORIZON_S

log = logging.getLogger("loadmaster.control")
rounds_log = logging.getLogger("loadmaster.rounds")

STARTING = "starting"  # the queue's reason for a start waiting for GPUs that stopping learners hold
LAUNCH_FAILED = "launch_failed"  # the queue's reason for a job whose launch could not be made (backing off)


@dataclass(frozen=True)
class QueueView:
    """The latest round's queue: starts waiting for GPUs first, then the plan's waits in policy order, then
    jobs whose launch is backing off, then jobs the gates hold (dependencies, array limits). Kept as the round
    left it; its entries are made on first use (most rounds' queues are never asked for)."""

    made_at: float
    starting: tuple[tuple[str, str, str], ...] = ()  # (job id, tenant, wait reason)
    backing: tuple[tuple[str, str, str], ...] = ()
    snapshot: Snapshot | None = None  # the tenants of the waits
    # Every waiting job's Wait in policy order. The round's plan holds only the reasons that changed (its
    # Session's), so the whole list is decide() again on the round's snapshot, made on first use.
    ranked: Callable[[], tuple[Wait, ...]] | None = None

    @cached_property
    def waits(self) -> tuple[Wait, ...]:
        return self.ranked() if self.ranked is not None else ()

    @cached_property
    def entries(self) -> tuple[tuple[str, str, str], ...]:
        """(job id, tenant, wait reason); position = index + 1."""
        tenant_of = {v.job_id: v.spec.tenant for v in self.snapshot.queued} if self.snapshot is not None else {}
        waiting = tuple((w.job_id, tenant_of.get(w.job_id, ""), str(w.reason)) for w in self.waits)
        return self.starting + waiting + self.backing

    @cached_property
    def index(self) -> dict[str, int]:
        """job id -> its index in entries."""
        return {job_id: i for i, (job_id, _, _) in enumerate(self.entries)}


class ControlLoop:
    def __init__(self, store: Store, cluster: Cluster, executor: Executor, dirs: JobDirs, *,
                 policy: Policy, placer: Placer, clock: Callable[[], float] = time.time,
                 tick_s: float = 0.5, grace_s: float = 10.0, default_duration_s: float = DEFAULT_DURATION_S,
                 progress_flush_s: float = 2.0, estimates: bool = True, reconcile_s: float = 10.0,
                 estimate_interval_s: float = 5.0, estimate_horizon_s: float = DEFAULT_HORIZON_S,
                 stuck_after_s: float | None = None, coalesce_s: float = 0.02,
                 isolation: Isolation | None = None, nodes_every_s: float = 1.0, migrate: bool = False,
                 smoke_test_s: float = 0.0) -> None:
        self.policy = policy
        # Manifests may name their own placement; the server's placer places the rest.
        self.placer = PerJobPlacer(placer, PLACERS)
        self.tick_s = tick_s
        self.coalesce_s = coalesce_s  # after a busy round, the next one waits this long for more to collect
        self.reconcile_s = reconcile_s
        # /health says the loop is stuck when no round completed for this long.
        self.stuck_after_s = stuck_after_s if stuck_after_s is not None else max(30.0, 20 * tick_s)
        self.metrics = LoopMetrics()
        self.ctx = Context(store, cluster, executor, dirs, clock, grace_s, Stager(self.wake),
                           Launcher(executor, self.wake), JobTable(store), Bookings(clock), self.metrics,
                           progress_flush_s=progress_flush_s, isolation=isolation or Isolation(),
                           smoke_test_s=smoke_test_s)
        self.builder = SnapshotBuilder(cluster, default_duration_s, policy=policy, placer=self.placer,
                                       migrate=migrate, smoke_test_s=smoke_test_s,
                                       smoke_passed=self.ctx.smoke_passed)
        self.gates = Gates(store)  # dependencies and array limits: queued jobs held out of decide()'s sight
        # What a sync read but the gates have not judged yet: the table's change number has moved past these
        # rows, so a store error between the read and the judgement (loading manifests, reading dependencies)
        # must not lose them, or a job whose afterok dependency failed would be started instead of rejected.
        self._unjudged: set[str] = set()
        self._unjudged_gone: set[str] = set()
        # Ray's nodes join, die and drain under the loop; the local executor's stay (drains still apply).
        self.membership = Membership(cluster, executor if isinstance(executor, MembershipSource) else None,
                                     store, every_s=nodes_every_s)
        self.estimator: Estimator | None = Estimator(store, interval_s=estimate_interval_s,
                                                     horizon_s=estimate_horizon_s, clock=clock) if estimates else None
        self.last_tick: TickReport | None = None
        self.decisions = 0
        self.rounds = 0
        self._lock = threading.RLock()
        self._event = threading.Event()
        self._woken = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._recovered: RecoveryReport | None = None
        self._due_at = -math.inf  # the first round decides
        self._reconcile_at = -math.inf
        self._queue = QueueView(0.0)
        self._queue_version = -1  # the builder's queue_version the estimator last saw
        self._names: dict[int, str] = {}
        self._quotas: dict[str, TenantQuota] = {}
        self._last_round_at: float | None = None  # monotonic time of the last completed round
        self._degraded = False  # the last round met a store error: hand-offs go one transaction each
        self.metrics.read_gauges(self._gauges)
        executor.notify(self.wake)

    # -- the seam ---------------------------------------------------------------------------------------
    def recover(self) -> RecoveryReport:
        """At start, before the API serves: adopt, restage or requeue what the previous server left
        running; then reconcile once."""
        with self._lock:
            if self._recovered is None:
                self._sync()
                self._follow_nodes(force=True)
                self._recovered = recover(self.ctx)
                self._reconcile(self.ctx.clock())
                log.info("recovered: %s", self._recovered)
            return self._recovered

    def tick(self) -> TickReport:
        estimator = self.estimator
        if estimator is not None:
            estimator.pause()
        try:
            return self._tick()
        finally:
            if estimator is not None:
                estimator.resume()

    def start(self) -> None:
        """Run tick() in a background thread, every tick_s or sooner after wake()."""
        if self._thread is not None and self._thread.is_alive():
            return
        self.recover()
        if self.ctx.stager.closed:
            self.ctx.stager = Stager(self.wake)
        if self.ctx.launcher.closed:
            self.ctx.launcher = Launcher(self.ctx.executor, self.wake)
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="loadmaster-control", daemon=True)
        self._thread.start()
        if self.estimator is not None:
            self.estimator.start()

    def stop(self) -> None:
        """Stop the thread. Learners keep running; the next server's recover() re-attaches them."""
        self._stopping.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        if self.estimator is not None:
            self.estimator.stop()
        self.ctx.stager.close()
        # Launches under way finish, and their learners are recorded (running), so the next server
        # re-attaches them at once (it would find them by their files too).
        self.ctx.launcher.close()
        with self._lock:
            try:
                self._route(self._launches())
            except Exception as err:  # the store is gone: the next start finds the learners by their files
                log.warning("launches under way at shutdown not recorded: %s", err)

    def wake(self) -> None:
        """Something changed (submission, halt, cancel, scale, a learner exited): a round soon."""
        self._woken = True
        self._event.set()

    def queue(self) -> list[QueueEntry]:
        """The latest round's view of the queue, in policy order."""
        view = self._queue
        estimates = self.estimator.latest if self.estimator is not None else {}
        now = self.ctx.clock()
        return [self._entry(i, job_id, tenant, reason, estimates, now)
                for i, (job_id, tenant, reason) in enumerate(view.entries)]

    def queue_entry(self, job_id: str) -> QueueEntry | None:
        """One job's entry in the latest queue (None if it is not in it)."""
        view = self._queue
        i = view.index.get(job_id)
        if i is None:
            return None
        estimates = self.estimator.latest if self.estimator is not None else {}
        return self._entry(i, *view.entries[i], estimates, self.ctx.clock())

    @staticmethod
    def _entry(i: int, job_id: str, tenant: str, reason: str, estimates: Mapping[str, float | None],
               now: float) -> QueueEntry:
        at = now if reason == STARTING else estimates.get(job_id)
        return QueueEntry(job_id, tenant, i + 1, reason, None if at is None else max(at, now))

    def queue_view(self) -> QueueView:
        return self._queue

    def queue_made_at(self) -> float:
        """When the latest queue was made (jobs queued since are not in it yet)."""
        return self._queue.made_at

    def health(self) -> tuple[bool, float | None]:
        """(healthy, seconds since the last completed round): unhealthy when the loop's thread died or no
        round completed for stuck_after_s."""
        at = self._last_round_at
        age = None if at is None else time.monotonic() - at
        alive = self._thread is None or self._thread.is_alive()
        stuck = self._thread is not None and (not alive or age is None or age > self.stuck_after_s)
        return not stuck, age

    # -- a round ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._event.clear()  # before the round: a wake() during it makes the next one come at once
            try:
                report = self.tick()
            except Exception as err:  # a round that fails (a bug) must not end the loop
                log.exception("control loop round failed; trying again")
                self.metrics.round_failures.labels(type(err).__name__).inc()
                report = None
            if report is not None and report.store_error:
                self._stopping.wait(self.tick_s)  # the store is in trouble: do not hammer it
            elif report is None or not (report.events or report.decided):
                self._event.wait(self.tick_s)
            else:
                self._coalesce()

    def _coalesce(self) -> None:
        """After a busy round: what happens in the next moment (more learners exiting, more launches done) is
        handled together, one transaction for all, instead of one round each. The wait is coalesce_s at most;
        when launches are under way it ends as soon as the last of them has finished: their results (a tiny
        job's end comes with its launch) are what the next round is for, and waiting on would only delay the
        GPUs they free (a wake() from anything else does not end it)."""
        wait_s = min(self.coalesce_s, self.tick_s)
        launcher = self.ctx.launcher
        if launcher.under_way() == 0:
            if not self._stopping.wait(wait_s):
                self.metrics.coalesce_waits.labels("full").inc()
            return
        deadline = time.monotonic() + wait_s
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if launcher.under_way() == 0:
                self.metrics.coalesce_waits.labels("launches").inc()
                return
            if left <= 0:
                self.metrics.coalesce_waits.labels("full").inc()
                return
            self._event.wait(left)  # a finished launch wakes the loop; so does stop()
            self._event.clear()  # the round that follows collects whatever woke it

    def _tick(self) -> TickReport:
        with self._lock:
            started = time.perf_counter()
            ctx = self.ctx
            now = ctx.clock()
            ctx.report = report = TickReport(at=now)
            woken, self._woken = self._woken, False
            stage = "recover"
            try:
                self.recover()
                stage = "sync"
                report.read = self._sync()
                stage = "nodes"
                self._follow_nodes()
                stage = "collect"
                self._collect(now)
                if now >= self._reconcile_at:
                    stage = "reconcile"
                    self._reconcile(now)
                if report.events:
                    # What this round committed (ends give GPUs back, requeues) is in the store, but the table
                    # holds the rows as the sync above read them: an ended job's row still books its GPUs.
                    # Read them again, so that this round's decision starts jobs on those GPUs instead of the
                    # next round's (short jobs: a round less per job).
                    stage = "sync"
                    report.read += self._sync()
                stage = "decide"
                self._maybe_decide(now, woken)
                stage = "progress"
                progress.flush(ctx, ctx.clock())
                self._estimate()
                self._degraded = False
            except Exception as err:
                if not transient(err):
                    raise
                self._degraded = True
                report.store_error = f"{stage}: {type(err).__name__}"
                self.metrics.store_errors.labels(stage).inc()
                log.warning("control loop: store error during %s (the round is tried again): %s", stage, err)
            report.running = len(ctx.runs)
            report.queued = len(self.builder.queued)
            report.duration_s = time.perf_counter() - started
            self.last_tick = report
            self.rounds += 1
            self._last_round_at = time.monotonic()
            self.metrics.rounds.inc()
            self.metrics.round_seconds.observe(report.duration_s)
            if report.busy:
                rounds_log.info("round %d %s", self.rounds, report.log_line())
            return report

    def _sync(self) -> int:
        """Read what changed in the store; the jobs concerned have their views rebuilt at the next snapshot.
        Every step is safe to fail: what it needs is asked for again at the next round."""
        ctx = self.ctx
        delta = ctx.table.sync()
        ctx.touched.update(delta.changed)
        ctx.touched.update(delta.gone)
        if not delta.empty:
            ctx.dirty = True
        for job_id in delta.gone:
            ctx.forget(job_id)
        if delta.tenants is not None:
            names, quotas = read_tenants(ctx.store)
            if names != self._names:
                ctx.touched.update(ctx.table.rows)
            if quotas != self._quotas:
                self.builder.quotas_changed()
            self._names, self._quotas = names, quotas
            ctx.table.tenants_read(delta.tenants)
        self._unjudged.update(delta.changed)
        self._unjudged.difference_update(delta.gone)
        self._unjudged_gone.update(delta.gone)
        changed = [j for j in self._unjudged if j in ctx.table.rows]
        ctx.load_manifests(changed)
        held, rejects = self.gates.dependencies(ctx.table, ctx.manifests, changed, list(self._unjudged_gone))
        self._unjudged.clear()
        self._unjudged_gone.clear()
        for job_id in held:
            ctx.changed(job_id)
        self._route(list(rejects))
        return delta.read

    def _follow_nodes(self, force: bool = False) -> None:
        """The cluster follows the executor's nodes and the drains (membership.py): decide again when it
        changed, with joined nodes schedulable and dead or drained ones not, in this very round."""
        m, ctx = self.membership, self.ctx
        if not m.refresh(force=force):
            return
        if m.cluster is not ctx.cluster:
            ctx.cluster = m.cluster
            ctx.node_index = {n.name: i for i, n in enumerate(m.cluster.nodes)}
            self.builder.grow(m.cluster)
            log.info("cluster now %s", m.cluster.describe())
        self.builder.down = sorted(ctx.node_index[name] for name in m.down)
        self.builder.reset_session()  # what the Session knew of where jobs fit no longer holds
        ctx.dirty = True

    def nodes_changed(self) -> None:
        """A drain or undrain was stored: read it in the next round."""
        with self._lock:
            self._follow_nodes(force=True)
        self.wake()

    def _collect(self, now: float) -> None:
        """What happened since the last round, routed in one transaction."""
        ctx = self.ctx
        events: list[ev.Event] = [ev.Staged(done) for done in ctx.stager.results()]
        launches = self._launches()
        polled = ctx.executor.poll()
        progress.take_progress(ctx, polled.progress)
        confirmed = {e.run.key: (i, e) for i, e in enumerate(launches) if isinstance(e, ev.Launched)}
        ends: list[ev.Event] = []
        for ended in polled.ended:
            run = ctx.runs.get(ended.job_id)
            if run is not None and run.attempt == ended.attempt:
                if run.phase is Phase.LAUNCHING:
                    # Learners as short as their launch: the launch's confirmation carries the end, one batch
                    # for both; without it (not collected yet) the executor reports the end again.
                    found = confirmed.get((ended.job_id, ended.attempt))
                    if found is not None:
                        launches[found[0]] = dataclasses.replace(found[1], ended=ended)
                    continue
                ends.append(ev.Ended(ended, run))
            else:
                ends.append(ev.Ended(ended, None))  # an attempt nobody waits for: settled all the same
        events += launches + ends
        events += requests.pending_requests(ctx)
        manifests = ctx.manifests
        for run in ctx.runs.values():  # every running job, every round: the cheap tests first
            if run.stop is not None:
                continue  # stopping already: none of these applies
            if run.running_since is None:
                intent = run.early_stop  # a time limit or a smoke test counts from the learners' start
            else:
                manifest = manifests.get(run.job_id) or ctx.manifest(run.job_id)
                intent = runtime_exceeded(run, manifest.max_runtime_s, now) or run.early_stop or \
                    smoke_done(ctx, run, now)
            if intent is not None:
                events.append(ev.Stop(run.job_id, intent))
        events += self._pending_starts(now)
        events += drain_moves(ctx, self.membership.drained)
        self._route(events)
        if any(ended.lost for ended in polled.ended):
            self._follow_nodes(force=True)  # the lost node is down before anything is relaunched

    def _launches(self) -> list[ev.Event]:
        ctx = self.ctx
        out: list[ev.Event] = []
        for done in ctx.launcher.results():
            run = ctx.runs.get(done.job_id)
            if run is None or run.attempt != done.attempt or run.phase is not Phase.LAUNCHING:
                ctx.launcher.forget((done.job_id, done.attempt))
                if done.handle is not None:  # nobody waits for these learners any more
                    ctx.executor.stop(done.job_id, done.attempt, 0.0)
                continue
            if done.handle is not None:
                out.append(ev.Launched(run, done.handle))
            else:
                out.append(ev.LaunchFailed(run, done.error or "unknown launch error"))
        return out

    def _pending_starts(self, now: float) -> list[ev.Event]:
        """Starts waiting for GPUs: tried again each round (learners that ignore SIGTERM are killed after the
        grace period, so a start never waits much longer; one that does is dropped and decided again)."""
        ctx = self.ctx
        patience = max(60.0, 3 * ctx.grace_s)
        out: list[ev.Event] = []
        for start in list(ctx.pending.values()):
            stale = stale_target(ctx, start.allocation, self.membership.down) if start.hint else None
            if now - start.since > patience or stale is not None:
                del ctx.pending[start.job_id]
                ctx.changed(start.job_id)
                if stale is not None:  # a moved job whose target went: decide() places it like any other
                    log.info("job %s: not restarted at its move's target (%s): placed anew", start.job_id, stale)
                if start.relaunch:  # a resized job with no learners left: back to the queue
                    out.append(ev.Unbook(start.job_id, "the GPUs of its new size did not become free"))
                continue
            out.append(ev.Start(start.job_id, start.allocation, start.since, start.relaunch, start.previous,
                                start.hint))
        return out

    def _route(self, events: list[ev.Event]) -> None:
        """Route the events in one transaction; after a store error, one transaction each (a store that
        fails some writes still lets the small ones through), until a round succeeds whole."""
        if not events:
            return
        ctx = self.ctx
        ctx.report.events += len(events)
        if not self._degraded:
            commit(ctx.store, ctx.clock(), lambda b: route_all(b, ctx, events))
            return
        failed: Exception | None = None
        for event in events:
            try:
                commit(ctx.store, ctx.clock(), lambda b, e=event: route_all(b, ctx, [e]))  # type: ignore[misc]
            except Exception as err:  # each is independent: the others still go through
                if not transient(err):
                    raise
                failed = err
        if failed is not None:
            raise failed

    def _reconcile(self, now: float) -> None:
        ctx = self.ctx
        self._reconcile_at = now + self.reconcile_s
        found = reconcile.reconcile(ctx)
        ctx.report.repairs += len(found.repairs)
        self._route(found.events)
        reconcile.take(ctx, found)

    # -- deciding ---------------------------------------------------------------------------------------
    def _maybe_decide(self, now: float, woken: bool) -> None:
        ctx = self.ctx
        why = []
        if ctx.dirty:
            why.append("changes")
        if now >= self._due_at:
            why.append("due")
        for job_id, (until, _) in list(ctx.backoff.items()):
            if until <= now:  # its launch may be tried again
                del ctx.backoff[job_id]
                ctx.changed(job_id)
                why.append("backoff")
        if not why:
            return
        started = time.perf_counter()
        ctx.dirty = False
        try:
            snap = self._snapshot(now)
            scaling = requests.scaling(ctx, snap, self.placer) if ctx.table.requested else []
            if scaling:
                self._route(list(scaling))
                snap = self._snapshot(now)
            core = time.perf_counter()
            plan = self.builder.decide(snap)
            ctx.report.decide_only_s = time.perf_counter() - core
            self.metrics.decide_seconds.observe(ctx.report.decide_only_s)
            self.decisions += 1
            self._apply(plan)
        except BaseException:
            ctx.dirty = True  # the plan was not carried out: decide again at the next round
            self.builder.reset_session()  # and give every reason again (the Session took them as given)
            raise
        self._due_at = self._next_due(plan, snap, now)
        self._remember_queue(plan, snap)
        ctx.report.decided = True
        ctx.report.why = why
        ctx.report.decide_s = time.perf_counter() - started

    def _snapshot(self, now: float) -> Snapshot:
        ctx = self.ctx
        touched = ctx.touched
        ctx.load_manifests([j for j in touched if j in ctx.table.rows])  # those a failed round did not load
        touched |= self.gates.arrays(ctx.table, ctx.manifests, list(touched), set(ctx.pending) | set(ctx.runs))
        gated = self.gates.held
        for job_id in touched:
            row = ctx.table.rows.get(job_id)
            manifest = ctx.manifests.get(job_id) if row is not None else None
            if row is None or manifest is None:
                self.builder.update(job_id, None)
                continue
            held = (job_id in ctx.backoff and ctx.backoff[job_id][0] > now) or job_id in gated
            tenant = self._names.get(row.tenant_id, f"tenant-{row.tenant_id}")
            self.builder.update(job_id, JobInputs(row, manifest, tenant, ctx.pending.get(job_id),
                                                  ctx.runs.get(job_id), held))
        ctx.touched = set()
        return self.builder.build(now, self._quotas)

    def _apply(self, plan: Plan) -> None:
        """The plan as one statement: stops, resizes, rejections, starts and the changed wait reasons."""
        ctx = self.ctx
        events: list[ev.Event] = []
        for p in plan.preempts:
            why = f"preempted by {p.for_job}" if p.for_job else p.reason
            events.append(ev.Stop(p.job_id, StopIntent(StopKind.PREEMPT, why)))
        # A move is carried out as a stop (the learner checkpoints on should_preempt()) and a restart at the
        # move's target, held for the job meanwhile (snapshot.py); a stale target places it anew (_pending_starts).
        events += [ev.Stop(m.job_id, StopIntent(StopKind.PREEMPT, _move_reason(m)), move_to=m.allocation)
                   for m in plan.migrations]
        events += [*plan.resizes, *plan.rejects]
        now = ctx.clock()
        events += [ev.Start(s.job_id, s.allocation, now) for s in plan.starts]
        rows = ctx.table.rows
        changed = [{"jid": w.job_id, "reason": str(w.reason)} for w in plan.waits
                   if (row := rows.get(w.job_id)) is not None and row.wait_reason != w.reason]
        changed += [{"jid": job_id, "reason": reason} for job_id, reason in self.gates.held.items()
                    if (row := rows.get(job_id)) is not None and row.wait_reason != reason]
        if not self._degraded:
            ctx.report.events += len(events)

        def fill(b: Batch) -> None:
            route_all(b, ctx, events)
            if changed:
                # The loop's own figures, not stamped with change numbers (nobody else acts on them): the table
                # takes them once they are committed instead of reading them back.
                jobs = Job.metadata.tables[Job.__tablename__]
                b.s.connection().execute(
                    update(jobs).where(jobs.c.id == bindparam("jid"), jobs.c.status == JobStatus.QUEUED.value)
                    .values(wait_reason=bindparam("reason")), changed)
                b.after(lambda: ctx.table.note_wait_reasons({c["jid"]: c["reason"] for c in changed}))

        if self._degraded:  # one transaction each (see _route), the wait reasons last
            self._route(events)
            events = []
        if events or changed:
            commit(ctx.store, now, fill)

    def _next_due(self, plan: Plan, snap: Snapshot, now: float) -> float:
        """When time alone may change the answer: the policy's round, a placer's relaxation, a backoff."""
        due = math.inf
        leaving = {s.job_id for s in plan.starts} | {r.job_id for r in plan.rejects}
        if len(snap.queued) > len(leaving) and self.policy.round_s:  # jobs still wait
            due = now + self.policy.round_s
        for view in self.builder.session().waiting_for(WaitReason.LOCALITY_WAIT):
            if view.job_id not in leaving:
                at = self.placer.next_change_s(view, snap)
                if at is not None and at > now:
                    due = min(due, at)
        for until, _ in self.ctx.backoff.values():
            due = min(due, until)
        return due

    def _remember_queue(self, plan: Plan, snap: Snapshot) -> None:
        ctx = self.ctx
        starting = tuple((j, self._tenant_of(j), STARTING) for j, p in ctx.pending.items() if not p.relaunch)
        backing = tuple((j, self._tenant_of(j), LAUNCH_FAILED) for j in ctx.backoff if j in ctx.table.rows)
        backing += tuple((j, self._tenant_of(j), reason) for j, reason in self.gates.held.items()
                         if j in ctx.table.rows and j not in ctx.backoff)
        self._queue = QueueView(ctx.clock(), starting, backing, snap, partial(self._all_waits, snap))
        if self.estimator is not None:
            # The queue's members changed (jobs queued, started, rejected or gone): the estimates are stale.
            version = self.builder.queue_version
            if version != self._queue_version or plan.starts or plan.rejects:
                self.estimator.mark_stale()
            self._queue_version = version

    def _all_waits(self, snap: Snapshot) -> tuple[Wait, ...]:
        """Every waiting job's Wait on the round's snapshot, in policy order: decide() again (the Session's
        answers are its answers), under the loop's lock (policies keep memos between calls)."""
        with self._lock:
            return decide(snap, self.policy, self.placer).waits

    def _tenant_of(self, job_id: str) -> str:
        row = self.ctx.table.rows.get(job_id)
        return self._names.get(row.tenant_id, "") if row is not None else ""

    def _estimate(self) -> None:
        estimator = self.estimator
        if estimator is None or not estimator.wants(self.ctx.clock()):
            return
        snap = self._snapshot(self.ctx.clock())
        if snap.queued:
            estimator.offer(snap, self.policy, self.placer)
        else:
            estimator.clear()

    # -- metrics ----------------------------------------------------------------------------------------
    def _gauges(self) -> Gauges:
        ctx = self.ctx
        with ctx.store.session() as s:
            counts = s.execute(select(Tenant.name, Job.status, func.count()).join(Tenant, Job.tenant_id == Tenant.id)
                               .group_by(Tenant.name, Job.status)).all()
        with self._lock:
            booked_by_job = ctx.bookings.held_by()
            per_node = {name: len(owned) for name, owned in ctx.bookings.owners.items()}
            tenant_gpus: dict[str, int] = {}
            for job_id, gpus in booked_by_job.items():
                row = ctx.table.rows.get(job_id)
                tenant = self._names.get(row.tenant_id, "") if row is not None else ""
                tenant_gpus[tenant] = tenant_gpus.get(tenant, 0) + gpus
            queued = sum(1 for r in ctx.table.rows.values() if r.state is JobStatus.QUEUED)
            in_flight = len(ctx.runs)
        _, age = self.health()
        return Gauges(
            jobs={(str(status), str(tenant)): int(n) for tenant, status, n in counts},
            queue_length=queued, in_flight=in_flight,
            gpus_booked={n.name: per_node.get(n.name, 0) for n in ctx.cluster.nodes},
            gpus_free={n.name: n.gpus - per_node.get(n.name, 0) for n in ctx.cluster.nodes},
            tenant_gpus=tenant_gpus, last_round_age_s=age)


def _move_reason(move: Migrate) -> str:
    # A defragmenting move makes room for a named job; a re-auction move (themis) is for the moved job itself.
    return f"moved for {move.for_job}" if move.for_job else "moved to GPUs it runs faster on (re-auction)"
