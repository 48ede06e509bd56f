"""The control loop: the live shell around decide(), as the simulator is the virtual one.

One round (tick):
1. poll the executor: attempts that ended (-> finish.py) and progress reports (-> progress.py);
   collect finished data/results copies (-> stages.py);
2. read the unfinished jobs (rows.py) and act on users' cancel/halt requests (requests.py) and on jobs
   past their max_runtime_s; launch starts whose GPUs were freed by learners that exited;
3. decide, if anything may have changed: a submission, an end, a request, progress that moved an expected
   duration, or the time the policy (round_s) or a placer (next_change_s) asked to be woken at. Otherwise
   the round ends here: an idle loop reads the store and polls, nothing more;
4. build the Snapshot (snapshot.py), decide(snapshot, policy, placer), carry out the Plan (apply.py),
   and offer the snapshot to the queue estimator when the queue changed (estimates.py).

Users' requests reach the loop through the store (the API writes, then calls wake()), never by calls
into it, so the loop is the only writer of attempts and allocations.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import JobStatus
from loadmaster.platform.control.allocation import held_gpus
from loadmaster.platform.control.apply import apply_plan, launch_pending
from loadmaster.platform.control.context import Context
from loadmaster.platform.control.finish import attempt_ended, stage_done
from loadmaster.platform.control.launch import launched
from loadmaster.platform.control.launcher import Launcher
from loadmaster.platform.control.progress import take_progress
from loadmaster.platform.control.recovery import recover
from loadmaster.platform.control.reports import QueueEntry, RecoveryReport, TickReport
from loadmaster.platform.control.requests import apply_requests, apply_scaling
from loadmaster.platform.control.rows import JobRow, RowReader, read_tenants
from loadmaster.platform.control.snapshot import DEFAULT_DURATION_S, Built, SnapshotBuilder
from loadmaster.platform.control.stages import Stager
from loadmaster.platform.control.stops import enforce_runtime
from loadmaster.platform.estimates import Estimator
from loadmaster.platform.executors.base import Executor
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.placement.per_job import PerJobPlacer
from loadmaster.scheduling.plan import Plan, WaitReason
from loadmaster.scheduling.policies.base import Policy
from loadmaster.sim.forecast import DEFAULT_HORIZON_S

log = logging.getLogger("loadmaster.control")

_QueueRow = tuple[str, str, int, str]  # job id, tenant, position, wait reason


class ControlLoop:
    def __init__(self, store: Store, cluster: Cluster, executor: Executor, dirs: JobDirs, *,
                 policy: Policy, placer: Placer, clock: Callable[[], float] = time.time,
                 tick_s: float = 0.5, grace_s: float = 10.0, default_duration_s: float = DEFAULT_DURATION_S,
                 resync_s: float = 2.0, progress_flush_s: float = 2.0, estimates: bool = True,
                 estimate_interval_s: float = 5.0, estimate_horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.policy = policy
        # Manifests may name their own placement; the server's placer places the rest.
        self.placer = PerJobPlacer(placer, PLACERS)
        self.tick_s = tick_s
        # Writes by others always wake the loop (the API calls wake()); reading the store at least this
        # often anyway keeps a missed wake-up from leaving a job unscheduled.
        self.resync_s = resync_s
        self.ctx = Context(store, cluster, executor, dirs, clock, grace_s, Stager(self.wake),
                           Launcher(executor, self.wake), progress_flush_s=progress_flush_s)
        self.builder = SnapshotBuilder(cluster, default_duration_s)
        self._rows = RowReader(store)
        self.estimator: Estimator | None = Estimator(store, interval_s=estimate_interval_s,
                                                     horizon_s=estimate_horizon_s, clock=clock) if estimates else None
        self.last_tick: TickReport | None = None
        self.decisions = 0
        self._lock = threading.RLock()
        self._event = threading.Event()
        self._woken = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._recovered: RecoveryReport | None = None
        self._fingerprint: dict[str, tuple[object, ...]] | None = None
        self._due_at = math.inf
        self._queue: tuple[_QueueRow, ...] = ()
        self._queued_ids: frozenset[str] = frozenset()
        self._read_at = -math.inf
        self._queued_count = 0

    # -- the seam ---------------------------------------------------------------------------------------
    def recover(self) -> RecoveryReport:
        """At start, before the API serves: adopt, restage or requeue what the previous server left running."""
        with self._lock:
            if self._recovered is None:
                self._recovered = recover(self.ctx)
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

    def _tick(self) -> TickReport:
        with self._lock:
            self.recover()
            started = time.perf_counter()
            ctx = self.ctx
            now = ctx.clock()
            ctx.report = report = TickReport(at=now)
            woken, self._woken = self._woken, False
            self._collect(now)
            if woken or ctx.dirty or ctx.pending or now >= self._due_at or now - self._read_at >= self.resync_s:
                self._round(woken, now)
            report.running = len(ctx.runs)
            report.queued = self._queued_count
            report.duration_s = time.perf_counter() - started
            self.last_tick = report
            return report

    def _collect(self, now: float) -> None:
        """What happened since the last round: launches done, attempts ended, progress, copies done."""
        ctx = self.ctx
        # Copies first: a copy that an attempt's end starts below is collected at the next tick, never in
        # the same one, so STORING (and DOWNLOADING) is always a state the store shows, however fast the copy.
        for copied in ctx.stager.collect():
            stage_done(ctx, copied)
        for done in ctx.launcher.collect():
            launched(ctx, done)
        polled = ctx.executor.poll()
        take_progress(ctx, polled.progress)
        for ended in polled.ended:
            attempt_ended(ctx, ended)
        for run in list(ctx.runs.values()):
            enforce_runtime(ctx, run, ctx.manifest(run.job_id).max_runtime_s, now)

    def _round(self, woken: bool, now: float) -> None:
        """Read the store, act on requests, and decide if anything may have changed."""
        ctx = self.ctx
        rows = self._read()
        gone = apply_requests(ctx, rows)
        if gone:
            rows = [r for r in rows if r.id not in gone]
        if ctx.pending:
            launch_pending(ctx)  # the snapshot takes what it launched from the loop's memory, not the rows
        fingerprint = {r.id: r.fingerprint() for r in rows}
        built: Built | None = None
        if ctx.dirty or woken or fingerprint != self._fingerprint or ctx.clock() >= self._due_at:
            built = self._decide(rows, now)
            self._fingerprint = fingerprint
        self._queued_count = sum(1 for r in rows if r.state is JobStatus.QUEUED)
        self._estimate(rows, built)

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
        # Launches under way finish, and their learners are recorded (PROCESSING), so the next server
        # re-attaches them instead of finding a launch cut short.
        self.ctx.launcher.close()
        with self._lock:
            for done in self.ctx.launcher.collect():
                launched(self.ctx, done)

    def wake(self) -> None:
        """Something changed (submission, halt, cancel, scale): decide soon."""
        self._woken = True
        self._event.set()

    def queue(self) -> list[QueueEntry]:
        """The latest round's view of the queue, in policy order."""
        estimates = self.estimator.latest if self.estimator is not None else {}
        now = self.ctx.clock()
        out = []
        for job_id, tenant, position, reason in self._queue:
            at = now if reason == "starting" else estimates.get(job_id)
            out.append(QueueEntry(job_id, tenant, position, reason, None if at is None else max(at, now)))
        return out

    # -- inside a round ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._event.clear()  # before the round: a wake() during it makes the next one come at once
            try:
                self.tick()
            except Exception:  # a round that fails (the store unreachable a moment) must not end the loop
                log.exception("control loop round failed; trying again")
            self._event.wait(self.tick_s)

    def _read(self) -> list[JobRow]:
        self._read_at = self.ctx.clock()
        rows = self._rows.read()
        self.ctx.load_manifests([r.id for r in rows])
        self.ctx.held = held_gpus(r.allocation for r in rows)
        self.ctx.ports = {int(r.allocation.get("master_port", 0)) for r in rows if r.allocation}
        return rows

    def _build(self, rows: list[JobRow], now: float) -> Built:
        names, quotas = read_tenants(self.ctx.store)
        return self.builder.build(now, rows, self.ctx.manifests, names, quotas, self.ctx.runs, self.ctx.pending)

    def _decide(self, rows: list[JobRow], now: float) -> Built:
        ctx = self.ctx
        started = time.perf_counter()
        built = self._build(rows, now)
        if any(r.target_learners is not None and r.state is JobStatus.PROCESSING for r in rows) and \
                apply_scaling(ctx, rows, built.snapshot, self.placer):
            built = self._build(rows, now)
        ctx.dirty = False
        plan = decide(built.snapshot, self.policy, self.placer)
        self.decisions += 1
        apply_plan(ctx, plan, built.queued)
        self._due_at = self._next_due(plan, built, now)
        self._remember_queue(plan, built)
        keep = {r.id for r in rows}
        ctx.forget(keep)
        self.builder.forget(keep)
        ctx.report.decided = True
        ctx.report.decide_s = time.perf_counter() - started
        return built

    def _next_due(self, plan: Plan, built: Built, now: float) -> float:
        """When time alone may change the answer: the policy's round, a placer's relaxation."""
        due = math.inf
        if plan.waits and self.policy.round_s:
            due = now + self.policy.round_s
        views = None
        for w in plan.waits:
            if w.reason is WaitReason.LOCALITY_WAIT:
                views = views or {v.job_id: v for v in built.snapshot.queued}
                at = self.placer.next_change_s(views[w.job_id], built.snapshot)
                if at is not None and at > now:
                    due = min(due, at)
        return due

    def _remember_queue(self, plan: Plan, built: Built) -> None:
        starting = [(j, built.tenant_of.get(j, ""), "starting") for j in self.ctx.pending
                    if not self.ctx.pending[j].relaunch]
        waiting = [(w.job_id, built.tenant_of.get(w.job_id, ""), w.reason.value) for w in plan.waits]
        self._queue = tuple((j, t, i + 1, r) for i, (j, t, r) in enumerate(starting + waiting))
        ids = frozenset(j for j, _, _ in waiting)
        if ids != self._queued_ids and self.estimator is not None:
            self.estimator.mark_stale()
        self._queued_ids = ids

    def _estimate(self, rows: list[JobRow], built: Built | None) -> None:
        estimator = self.estimator
        if estimator is None or not estimator.wants(self.ctx.clock()):
            return
        if built is None:
            built = self._build(rows, self.ctx.clock())
        if built.snapshot.queued:
            estimator.offer(built.snapshot, self.policy, self.placer)
        else:
            estimator.clear()
