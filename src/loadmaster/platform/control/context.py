"""What the parts of the control loop share: the store, the cluster, the executor, the job layout, and the
loop's memory of attempts in flight. One instance per ControlLoop; nothing here is global."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select

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
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.platform.tenancy import Isolation, JobTenancy, job_tenancy, prepare_job_dirs


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
    isolation: Isolation = field(default_factory=Isolation)
    tenancies: dict[str, JobTenancy] = field(default_factory=dict)  # read at each start (roots may change)
    # --smoke-test: a multi-GPU job's attempt first runs this long on one GPU (0: off). smoke_passed: job id ->
    # its failure count when its latest test passed (a failure after it means testing again), as Job.smoke_passed
    # says (recover() reads it back: a restarted server does not test the job again).
    smoke_test_s: float = 0.0
    smoke_passed: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.node_index = {n.name: i for i, n in enumerate(self.cluster.nodes)}

    def smoke_test(self, job_id: str, gpus: int, failures: int, target_learners: int | None) -> float | None:
        """The seconds a new attempt holding `gpus` GPUs runs as the job's one-GPU smoke test (None: it is not
        one): --smoke-test is on, the job is a multi-GPU one of fixed size, and no test passed since its last
        failure (as SnapshotBuilder._smoke_due, which asked for the one GPU)."""
        if self.smoke_test_s <= 0 or gpus != 1:  # the common case, asked at every start
            return None
        manifest = self.manifest(job_id)
        due = (manifest.elastic is None and target_learners is None and manifest.gpus > 1
               and self.smoke_passed.get(job_id) != failures)
        return self.smoke_test_s if due else None

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

    def tenancy(self, job_id: str) -> JobTenancy:
        """The job's paths and OS user (as its latest start read them; at first use, as the store says now)."""
        found = self.tenancies.get(job_id)
        if found is None:
            with self.store.session() as s:
                row = s.execute(select(Tenant).join(Job, Job.tenant_id == Tenant.id).where(Job.id == job_id)
                                ).scalar_one()
                found = self._tenancy_of(job_id, row)
        return found

    def tenancy_now(self, tenant: Tenant, job_id: str) -> JobTenancy:
        """The job's tenancy from its tenant's row as the current transaction read it (at a start: roots and
        user may have changed since the job was submitted)."""
        return self._tenancy_of(job_id, tenant)

    def _tenancy_of(self, job_id: str, tenant: Tenant) -> JobTenancy:
        found = job_tenancy(self.dirs, self.isolation, job_id, self.manifest(job_id), tenant.name, tenant.id,
                            tenant.roots, tenant.os_uid, tenant.os_gid)
        self.tenancies[job_id] = found
        return found

    def download(self, job_id: str, attempt: int) -> None:
        """Stage the job's data in (as the tenant's OS user), into a data directory made for it."""
        t = self.tenancy(job_id)
        prepare_job_dirs(self.dirs, job_id, t)
        url = t.paths.data if t.paths is not None else None
        self.stager.download(job_id, attempt, url or str(self.manifest(job_id).data), self.dirs.data(job_id),
                             run_as=t.run_as, refusal=t.problem)

    def results_url(self, job_id: str) -> str | None:
        t = self.tenancy(job_id)
        return t.paths.results if t.paths is not None else self.manifest(job_id).results

    def upload(self, job_id: str, attempt: int) -> None:
        t = self.tenancy(job_id)
        url = self.results_url(job_id)
        assert url is not None
        self.stager.upload(job_id, attempt, self.dirs.results(job_id), url, run_as=t.run_as, refusal=t.problem)

    def load_manifests(self, ids: list[str]) -> None:
        missing = [j for j in ids if j not in self.manifests]
        if missing:
            self.manifests.update(read_manifests(self.store, missing))

    def forget(self, job_id: str) -> None:
        """A job left the unfinished statuses: drop what the loop kept of it (bounded memory)."""
        if job_id not in self.runs:
            self.manifests.pop(job_id, None)
            self.tenancies.pop(job_id, None)
        self.pending.pop(job_id, None)
        self.backoff.pop(job_id, None)
        self.smoke_passed.pop(job_id, None)
        self.touched.add(job_id)
