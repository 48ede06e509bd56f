"""Store rows -> the Snapshot that decide() reads: the same input the simulator builds, from live jobs.

- A queued job's JobSpec comes from its manifest (learners, resources per learner, elastic range,
  placement) and its row (priority, a user's scale target); its duration is the expected one (manifest,
  else learned from reported progress, else a default).
- A running job holds its allocation; its progress is `work_done_s` as of its last progress update,
  extrapolated at one work-second per second while its learners run.
- Jobs that are stopping for good (preempted, halted, cancelled, out of time) count as gone: the
  scheduler may hand out their resources, whose learners are launched once the stopping ones exited.
  Starts waiting for that count as running, holding what they were given.
- Free capacity is the cluster minus what the running views hold; tenants come from the tenants table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation, JobSpec, JobStatus
from loadmaster.platform.control.allocation import to_allocation
from loadmaster.platform.control.rows import JobRow
from loadmaster.platform.control.state import PendingStart, Phase, RunState
from loadmaster.platform.manifest import JobManifest, Locality, PlacementStrategy
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota, free_after

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
class Built:
    snapshot: Snapshot
    queued: dict[str, JobRow]  # the rows decide() sees as queued
    tenant_of: dict[str, str]  # job id -> tenant name, for every job in the snapshot


class SnapshotBuilder:
    def __init__(self, cluster: Cluster, default_duration_s: float = DEFAULT_DURATION_S) -> None:
        self.cluster = cluster
        self.default_duration_s = default_duration_s
        self.node_index = {n.name: i for i, n in enumerate(cluster.nodes)}
        # JobSpec validates itself on construction: keep each job's until what it is built from changes.
        self._specs: dict[str, tuple[tuple[object, ...], JobSpec]] = {}
        # The views of the last build, with what they were built from: a long queue that did not change
        # costs one comparison per job.
        self._views: dict[str, tuple[tuple[object, ...], JobView | None]] = {}

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
                       max_learners=high, placement=placer_name(manifest))
        self._specs[row.id] = (key, spec)
        return spec

    def forget(self, keep: set[str]) -> None:
        for job_id in [j for j in self._specs if j not in keep]:
            del self._specs[job_id]

    def build(self, now: float, rows: list[JobRow], manifests: Mapping[str, JobManifest],
              tenant_names: Mapping[int, str], quotas: Mapping[str, TenantQuota], runs: Mapping[str, RunState],
              pending: Mapping[str, PendingStart]) -> Built:
        queued: list[JobView] = []
        running: list[JobView] = []
        queued_rows: dict[str, JobRow] = {}
        tenant_of: dict[str, str] = {}
        views: dict[str, tuple[tuple[object, ...], JobView | None]] = {}
        for row in rows:
            manifest = manifests.get(row.id)
            if manifest is None:
                continue
            tenant = tenant_names.get(row.tenant_id, f"tenant-{row.tenant_id}")
            start = pending.get(row.id)
            run = runs.get(row.id)
            key = (row, tenant, start,
                   None if run is None else (run.phase, run.stop, run.allocation, run.resize_to, run.started_at))
            cached = self._views.get(row.id)
            if cached is not None and cached[0] == key:
                view = cached[1]
            else:
                view = self.view(row, manifest, tenant, start, run)
            views[row.id] = (key, view)
            if view is None:
                continue
            tenant_of[row.id] = tenant
            if view.allocation is None:
                queued.append(view)
                queued_rows[row.id] = row
            else:
                running.append(view)
        self._views = views
        free_gpus, free_cpus, free_mem = self.free(running)
        snap = Snapshot.build(now, self.cluster, free_gpus, free_cpus, free_mem, tuple(queued), tuple(running),
                              quotas)
        return Built(snap, queued_rows, tenant_of)

    def view(self, row: JobRow, manifest: JobManifest, tenant: str, start: PendingStart | None,
             run: RunState | None) -> JobView | None:
        """The job as decide() sees it: queued (no allocation), holding an allocation, or absent (None)."""
        status = row.state
        if status is JobStatus.QUEUED and start is None and run is None:
            if row.halt_requested or row.cancel_requested:
                return None  # the loop acts on the request this round
            spec = self.spec(row, manifest, tenant, None)
            return JobView(spec, row.queued_since, row.attempts + 1, None, row.work_done_s, 0.0, row.queued_since,
                           row.attained_gpu_s, row.preemptions, None)
        alloc: Allocation | None = None
        rate = 0.0
        # Views of jobs whose learners do not compute yet are stamped with when they got their resources,
        # so that they stay equal (and cached) from round to round.
        since = start.since if start is not None else (run.started_at if run is not None else row.queued_since)
        as_of = started = since
        if start is not None:
            alloc = start.allocation
        elif run is not None:  # the loop's memory is fresher than a row read before this round's launches
            if run.stop is not None and run.stop.kind.frees_resources:
                return None  # stopping for good: its resources are the scheduler's again
            alloc = run.resize_to or run.allocation
            if run.phase is Phase.RUNNING and row.run_started_at is not None:
                rate = 1.0
                as_of = max(row.run_started_at, row.last_report_at or 0.0)
                started = row.run_started_at
        elif row.allocation is not None and status is not JobStatus.STORING:
            alloc = to_allocation(row.id, row.allocation, self.node_index)
        if alloc is None:
            return None  # STORING (learners gone), or an allocation on nodes this cluster lacks
        spec = self.spec(row, manifest, tenant, alloc)
        return JobView(spec, row.queued_since, max(row.attempts, 1), alloc, row.work_done_s, rate, as_of,
                       row.attained_gpu_s, row.preemptions, started)

    def free(self, running: list[JobView]) -> tuple[Vector, Vector, Vector]:
        gpus, cpus, mem = free_after(self.cluster, running)
        # Never below zero: an overcommitted node (a cluster shrunk under running jobs) is merely full.
        return np.maximum(gpus, 0.0), np.maximum(cpus, 0.0), np.maximum(mem, 0.0)
