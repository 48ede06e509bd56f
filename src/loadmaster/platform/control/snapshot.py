"""The loop's jobs -> the Snapshot that decide() reads: the same input the simulator builds, from live jobs.

- A queued job's JobSpec comes from its manifest (learners, resources per learner, elastic range,
  placement) and its row (priority, a user's scale target); its duration is the expected one (manifest,
  else learned from reported progress, else a default).
- A running job holds its allocation; its progress is `work_done_s` as of its last progress update,
  extrapolated at one work-second per second while its learners run.
- Jobs that are stopping for good (preempted, halted, cancelled, out of time) count as gone: the
  scheduler may hand out their resources, whose learners are launched once the stopping ones exited. A job
  being moved (a Migrate) holds its move's target instead, where it restarts once its learners exited.
  Starts waiting for that count as running, holding what they were given.
- A job whose launch could not be made waits out its backoff outside the snapshot.
- Free capacity is the cluster minus what the running views hold; tenants come from the tenants table.
- With --smoke-test, a multi-GPU job not yet tested (since its last failure) is queued, and runs, as its
  one-GPU smoke test (the simulator's smoke_spec); with --migrate, decide() may move running jobs.

The builder is incremental: it keeps every job's view and rebuilds only those of jobs that changed (their
row, their run, their pending start), and keeps free capacity and each tenant's GPUs up to date as views
come and go, so that building the snapshot of 10,000 queued and 1,000 running jobs costs what changed.

Given a policy, it also keeps the queue in a scheduling.session.Session across rounds (decide()), so that
deciding costs what changed too: the same plan as decide(snapshot, policy, placer), except that its waits
are only the reasons that changed since the last plan. A Session may keep a queue in order only while no
queued job's placer key moves with time (a manifest asking for locality relaxes with the wait): while one
is queued, the Session decides over the whole queue each round (its full mode), and it is made again,
incremental, once none is. A plan that was not carried out (a store error) makes the Session forget what it
knew (reset_session): the next plan gives every job's reason again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.platform.admission import type_speed
from loadmaster.platform.control.allocation import to_allocation
from loadmaster.platform.control.state import PendingStart, Phase, RunState
from loadmaster.platform.control.table import JobRow
from loadmaster.platform.manifest import JobManifest, Locality, PlacementStrategy
from loadmaster.scheduling.placement.per_job import PerJobPlacer
from loadmaster.scheduling.plan import Plan
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota
from loadmaster.sim.simulator import smoke_spec

DEFAULT_DURATION_S = 3600.0
Vector = npt.NDArray[np.float64]


def placer_name(manifest: JobManifest) -> str:
    """The placer a manifest asks for; "" for the defaults (pack, no locality), which leave the choice to
    the server's --placement."""
    locality = manifest.placement.locality
    if locality is Locality.RELAXED:
        return "locality"
    if locality is Locality.STRICT:
        return "locality-strict"
    return "spread" if manifest.placement.strategy is PlacementStrategy.SPREAD else ""


@dataclass(frozen=True, slots=True)
class JobInputs:
    """Everything a job's view is built from."""

    row: JobRow
    manifest: JobManifest
    tenant: str
    start: PendingStart | None = None
    run: RunState | None = None
    held_back: bool = False  # waiting out a launch backoff


class _SteadyKeys(PerJobPlacer):
    """The loop's per-job placer for a Session while no queued job names a placer whose cache key moves with
    time: the same placements, and a promise the Session may keep its classes on."""

    time_dependent_key = False


class SnapshotBuilder:
    def __init__(self, cluster: Cluster, default_duration_s: float = DEFAULT_DURATION_S, *,
                 policy: Policy | None = None, placer: PerJobPlacer | None = None, migrate: bool = False,
                 smoke_test_s: float = 0.0, smoke_passed: Mapping[str, int] | None = None) -> None:
        self.cluster = cluster
        self.default_duration_s = default_duration_s
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
        self.queued: dict[str, JobView] = {}
        self.running: dict[str, JobView] = {}
        # JobSpec validates itself on construction: keep each job's until what it is built from changes.
        self._specs: dict[str, tuple[tuple[object, ...], JobSpec]] = {}
        self._gpus = cluster.gpu_capacity.astype(np.float64)
        self._cpus = cluster.cpu_capacity.astype(np.float64)
        self._mem = cluster.mem_capacity.astype(np.float64)
        self._tenant_gpus: dict[str, int] = {}
        self.queue_version = 0  # counts the jobs that joined or left the queue
        # The Session (made on first decide()) and the queued jobs whose placer's key moves with time.
        self.policy = policy
        self.placer = placer
        self._steady = _SteadyKeys(placer.default, placer.registry) if placer is not None else None
        self._session: Session | None = None
        self.migrate = migrate  # the Session's decide() may move running jobs to defragment
        # --smoke-test (Context.smoke_test_s): a queued multi-GPU job not yet tested asks for one GPU.
        self.smoke_test_s = smoke_test_s
        self.smoke_passed: Mapping[str, int] = smoke_passed if smoke_passed is not None else {}
        self._session_full = False
        self._moving: set[str] = set()
        self.down: list[int] = []  # nodes nothing may be placed on (dead or drained): no free capacity

    def grow(self, cluster: Cluster) -> None:
        """Nodes joined (appended: the indices of the others stay): their whole capacity is free."""
        added = slice(len(self.cluster.nodes), len(cluster.nodes))
        self._gpus = np.concatenate([self._gpus, cluster.gpu_capacity[added].astype(np.float64)])
        self._cpus = np.concatenate([self._cpus, cluster.cpu_capacity[added].astype(np.float64)])
        self._mem = np.concatenate([self._mem, cluster.mem_capacity[added].astype(np.float64)])
        self.cluster = cluster
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes)}

    # -- keeping the views -------------------------------------------------------------------------------
    def update(self, job_id: str, inputs: JobInputs | None) -> None:
        """Rebuild one job's view from its inputs (None: the job is gone)."""
        was_queued = self.queued.get(job_id)
        self._drop(job_id)
        view: JobView | None = None
        if inputs is None:
            self._specs.pop(job_id, None)
        else:
            view = self.view(inputs)
        if view is not None and view.allocation is None:
            self.queued[job_id] = view
            if was_queued is None:
                self.queue_version += 1
            if view != was_queued:  # an unchanged view keeps its place and class in the Session
                self._session_add(view)
            return
        if was_queued is not None:
            self.queue_version += 1
            self._session_remove(job_id)
        if view is not None:
            self.running[job_id] = view
            self._hold(view, -1)

    def _drop(self, job_id: str) -> None:
        self.queued.pop(job_id, None)
        old = self.running.pop(job_id, None)
        if old is not None:
            self._hold(old, +1)

    def _hold(self, view: JobView, sign: int) -> None:
        alloc = view.allocation
        assert alloc is not None
        for node, count in alloc.per_node().items():
            self._gpus[node] += sign * count * alloc.gpus_per_learner
            self._cpus[node] += sign * count * alloc.cpus_per_learner
            self._mem[node] += sign * count * alloc.mem_gb_per_learner
        tenant = view.spec.tenant
        self._tenant_gpus[tenant] = self._tenant_gpus.get(tenant, 0) - sign * alloc.gpus

    def clear(self) -> None:
        for job_id in list(self.running) + list(self.queued):
            self._drop(job_id)
        self.queue_version += 1
        self._moving.clear()
        self.reset_session()

    # -- the queue in the policy's order -------------------------------------------------------------------
    def _session_add(self, view: JobView) -> None:
        placer = self.placer
        if placer is not None and placer.placer_for(view).time_dependent_key:
            self._moving.add(view.job_id)
        else:
            self._moving.discard(view.job_id)
        if self._session is not None:
            self._session.add(view)

    def _session_remove(self, job_id: str) -> None:
        self._moving.discard(job_id)
        if self._session is not None:
            self._session.remove(job_id)

    def session(self) -> Session:
        """The Session for the queue as it is: incremental while no queued job's placer key moves with time,
        else in full mode; (re)made with every queued job when the mode changes or after a reset."""
        assert self.policy is not None and self.placer is not None and self._steady is not None
        full = bool(self._moving)
        session = self._session
        if session is None or self._session_full != full:
            session = self._session = Session(self.policy, self.placer if full else self._steady, self.migrate)
            self._session_full = full
            for view in self.queued.values():
                session.add(view)
        return session

    def reset_session(self) -> None:
        """Forget the Session (its reasons were not carried out): the next decide() makes a new one."""
        self._session = None

    def quotas_changed(self) -> None:
        if self._session is not None:
            self._session.tenants_changed()

    def decide(self, snap: Snapshot) -> Plan:
        """decide(snap, policy, placer) through the Session: the same starts, preemptions, resizes and
        rejections; waits only for the jobs whose reason changed since the last plan. `snap` must be this
        builder's latest build()."""
        return self.session().decide(snap)

    # -- building ----------------------------------------------------------------------------------------
    def build(self, now: float, quotas: Mapping[str, TenantQuota]) -> Snapshot:
        # Never below zero: an overcommitted node (a cluster shrunk under running jobs) is merely full.
        free = (np.maximum(self._gpus, 0.0), np.maximum(self._cpus, 0.0), np.maximum(self._mem, 0.0))
        # The Session counts queued jobs per tenant: DRF need not walk the queue for them. A tuple behind a
        # partial, so that the snapshot stays picklable (the queue estimator's copy).
        tenants = partial(tuple, self._session.queued_tenants()) if self._session is not None else None
        for array in free:
            array[self.down] = 0.0
        return Snapshot.build(now, self.cluster, *free, tuple(self.queued.values()), tuple(self.running.values()),
                              quotas, tenant_gpus={t: g for t, g in self._tenant_gpus.items() if g},
                              queued_tenants=tenants)

    def spec(self, row: JobRow, manifest: JobManifest, tenant: str, running: Allocation | None) -> JobSpec:
        elastic = manifest.elastic
        target = row.target_learners
        if target is not None:
            # A user's scale request pins the size: decide() neither grows nor shrinks it (the loop resizes).
            learners, low, high = (running.learners if running is not None else target), None, None
        elif elastic is not None:
            learners, low, high = manifest.learners, elastic.min_learners, elastic.max_learners
        else:
            learners, low, high = manifest.learners, None, None
        duration = row.expected_duration_s or self.default_duration_s
        key = (tenant, row.priority, learners, low, high, duration)
        cached = self._specs.get(row.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        res = manifest.resources
        spec = JobSpec(job_id=row.id, tenant=tenant, submit_time_s=row.submitted_at, learners=learners,
                       gpus_per_learner=res.gpus, duration_s=duration, cpus_per_learner=res.cpus,
                       mem_gb_per_learner=res.memory_gb, priority=row.priority, min_learners=low,
                       max_learners=high, placement=placer_name(manifest),
                       type_speed=type_speed(manifest, self.cluster))
        self._specs[row.id] = (key, spec)
        return spec

    def _smoke_due(self, row: JobRow, manifest: JobManifest) -> bool:
        """Whether the job's next (or current) attempt is a one-GPU smoke test: --smoke-test is on, the job is a
        multi-GPU one of fixed size, and no test passed since its last failure."""
        return (self.smoke_test_s > 0 and manifest.elastic is None and row.target_learners is None
                and manifest.gpus > 1 and self.smoke_passed.get(row.id) != row.failures)

    def view(self, inputs: JobInputs) -> JobView | None:
        """The job as decide() sees it: queued (no allocation), holding an allocation, or absent (None)."""
        row, manifest, tenant, start, run = inputs.row, inputs.manifest, inputs.tenant, inputs.start, inputs.run
        status = row.state
        if status is JobStatus.QUEUED and start is None and run is None:
            if row.halt_requested or row.cancel_requested or inputs.held_back:
                return None  # the loop acts on the request this round; a backoff holds it out
            spec = self.spec(row, manifest, tenant, None)
            if self._smoke_due(row, manifest):
                spec = smoke_spec(spec, self.smoke_test_s)
            return JobView(spec, row.queued_since, row.attempts + 1, None, row.work_done_s, 0.0, row.queued_since,
                           row.attained_gpu_s, row.preemptions, None)
        alloc: Allocation | None = None
        rate = 0.0
        work, attained = row.work_done_s, row.attained_gpu_s
        # Views of jobs whose learners do not compute yet are stamped with when they got their resources,
        # so that they stay equal from round to round.
        since = start.since if start is not None else (run.started_at if run is not None else row.queued_since)
        as_of = started = since
        if start is not None:
            alloc = start.allocation
        elif run is not None:  # the loop's memory is fresher than the row
            work, attained = run.work_done_s, run.attained_gpu_s
            if run.stop is not None and run.stop.kind.frees_resources:
                if run.move_to is None:
                    return None  # stopping for good: its resources are the scheduler's again
                # Moving (a Migrate): its old GPUs are the scheduler's, its target is held for it, as for a
                # start waiting for GPUs; it computes nothing meanwhile.
                alloc = run.move_to
            elif run.phase is Phase.RUNNING and run.running_since is not None:
                alloc = run.resize_to or run.allocation
                rate = 1.0
                as_of = run.as_of
                started = run.running_since
            else:
                alloc = run.resize_to or run.allocation
        elif row.allocation is not None and status is not JobStatus.STORING:
            alloc = to_allocation(row.id, row.allocation, self.node_index)
        if alloc is None:
            return None  # STORING (learners gone), or an allocation on nodes this cluster lacks
        spec = self.spec(row, manifest, tenant, alloc)
        # Its smoke test runs (an attempt says so itself: a server restarted with another --smoke-test ends it
        # as it began), or is about to.
        smoke = run.smoke_s if run is not None else (
            self.smoke_test_s if self._smoke_due(row, manifest) and alloc.gpus == 1 else None)
        if smoke is not None:
            spec = smoke_spec(spec, smoke)
        return JobView(spec, row.queued_since, max(row.attempts, 1), alloc, work, rate, as_of, attained,
                       row.preemptions, started)

