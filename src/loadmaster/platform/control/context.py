"""What the parts of the control loop share: the store, the cluster, the executor, the job layout, and the
loop's memory of attempts in flight. One instance per ControlLoop; nothing here is global."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loadmaster.core.cluster import Cluster
from loadmaster.platform.control.allocation import HeldGpus
from loadmaster.platform.control.launcher import Launcher
from loadmaster.platform.control.reports import TickReport
from loadmaster.platform.control.rows import read_manifests
from loadmaster.platform.control.stages import Stager
from loadmaster.platform.control.state import PendingStart, RunState
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
    runs: dict[str, RunState] = field(default_factory=dict)  # job id -> its attempt in flight
    pending: dict[str, PendingStart] = field(default_factory=dict)  # starts waiting for GPUs to be released
    manifests: dict[str, JobManifest] = field(default_factory=dict)  # parsed once per job
    report: TickReport = field(default_factory=lambda: TickReport(at=0.0))
    # GPU indices and rendezvous ports that stored allocations hold (rebuilt from the rows each round).
    held: HeldGpus = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)
    dirty: bool = True  # something happened that may change the next decision
    progress_flush_s: float = 2.0  # a running job's progress is written to the store at most this often

    def __post_init__(self) -> None:
        self.node_index = {n.name: i for i, n in enumerate(self.cluster.nodes)}

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

    def forget(self, keep: set[str]) -> None:
        """Drop cached manifests of jobs that left the active set (bounded memory on a long-lived server)."""
        for job_id in [j for j in self.manifests if j not in keep and j not in self.runs]:
            del self.manifests[job_id]
