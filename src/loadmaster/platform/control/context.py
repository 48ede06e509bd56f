"""What the parts of the control loop share: the store, the cluster, the executor, the job layout, and the
loop's memory of attempts in flight. One instance per ControlLoop; nothing here is global."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loadmaster.core.cluster import Cluster
from loadmaster.platform.control.allocation import Bookings
from loadmaster.platform.control.launcher import Launcher
from loadmaster.platform.control.metrics import LoopMetrics
from loadmaster.platform.control.reports import TickReport
from loadmaster.platform.control.stages import Stager
from loadmaster.platform.control.state import PendingStart, RunState
from loadmaster.platform.control.table import JobTable, read_manifests
from loadmaster.platform.executors.base import Executor
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.manifest import JobManifest
from loadmaster.platform.store.db import Store


@dataclass
class Context:
    store: Store
    cluster: Cluster
    executor: Executor
    dirs: JobDirs
    clock: Callable[[], float]
    grace_s: float
    stager: Stager
    launcher: Launcher
    table: JobTable
    bookings: Bookings
    metrics: LoopMetrics
    runs: dict[str, RunState] = field(default_factory=dict)  # job id -> its attempt in flight
    pending: dict[str, PendingStart] = field(default_factory=dict)  # starts waiting for GPUs to be released
    # Jobs whose launch could not be made: not considered again before this time (outcomes.NotLaunched).
    backoff: dict[str, tuple[float, float]] = field(default_factory=dict)  # job id -> (until, last delay)
    manifests: dict[str, JobManifest] = field(default_factory=dict)  # parsed once per job
    report: TickReport = field(default_factory=lambda: TickReport(at=0.0))
    dirty: bool = True  # something happened that may change the next decision
    # Jobs whose scheduling view must be rebuilt (their run, pending start or backoff changed).
    touched: set[str] = field(default_factory=set)
    progress_flush_s: float = 2.0  # a running job's progress is written to the store at most this often

    def __post_init__(self) -> None:
        self.node_index = {n.name: i for i, n in enumerate(self.cluster.nodes)}

    def changed(self, job_id: str) -> None:
        """The job's run, pending start or backoff changed: decide again, rebuilding its view."""
        self.touched.add(job_id)
        self.dirty = True

    def manifest(self, job_id: str) -> JobManifest:
        found = self.manifests.get(job_id)
        if found is None:
            found = read_manifests(self.store, [job_id])[job_id]
            self.manifests[job_id] = found
        return found

    def load_manifests(self, ids: list[str]) -> None:
        missing = [j for j in ids if j not in self.manifests]
        if missing:
            self.manifests.update(read_manifests(self.store, missing))

    def forget(self, job_id: str) -> None:
        """A job left the unfinished statuses: drop what the loop kept of it (bounded memory)."""
        if job_id not in self.runs:
            self.manifests.pop(job_id, None)
        self.pending.pop(job_id, None)
        self.backoff.pop(job_id, None)
        self.touched.add(job_id)
