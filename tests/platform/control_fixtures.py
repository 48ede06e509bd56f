"""Shared by the control-loop tests: a real store, the real LocalExecutor, a ControlLoop driven round by
round, and jobs that run control_learner.py as real processes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobStatus
from loadmaster.platform.control import ControlLoop
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job
from loadmaster.platform.store.models import Attempt, Job, Tenant, Transition
from loadmaster.scheduling import make_placer, make_policy

LEARNER = str(Path(__file__).with_name("control_learner.py"))
TWO_BY_FOUR = Cluster((Node("n0", 4, 16.0, 64.0), Node("n1", 4, 16.0, 64.0)), name="test")


def learner(*args: object) -> list[str]:
    return [sys.executable, LEARNER, *(str(a) for a in args)]


@dataclass
class Env:
    store: Store
    dirs: JobDirs
    cluster: Cluster
    tmp: Path
    tenant_id: int
    policy: str = "fifo"
    placement: str = "pack"
    loops: list[ControlLoop] = field(default_factory=list)

    def new_loop(self, **options: Any) -> ControlLoop:
        options.setdefault("grace_s", 5.0)
        options.setdefault("estimates", False)
        options.setdefault("progress_flush_s", 0.2)  # tests wait for progress in the store: keep it fresh
        loop = ControlLoop(self.store, self.cluster, LocalExecutor(), self.dirs, policy=make_policy(self.policy),
                           placer=make_placer(self.placement), **options)
        self.loops.append(loop)
        return loop

    @property
    def loop(self) -> ControlLoop:
        return self.loops[-1] if self.loops else self.new_loop()

    def submit(self, tenant_id: int | None = None, **manifest: Any) -> str:
        manifest.setdefault("name", "job")
        manifest.setdefault("resources", {"gpus": 1, "cpus": 1, "memory_gb": 1})
        with self.store.session() as s:
            job_id = add_job(s, tenant_id or self.tenant_id, parse_manifest(manifest), time.time()).id
        if self.loops:
            self.loop.wake()
        return job_id

    def add_tenant(self, name: str, gpus: int, borrow: int | None = None) -> int:
        with self.store.session() as s:
            tenant = Tenant(name=name, gpu_quota=gpus, borrow_limit=borrow, created_at=time.time())
            s.add(tenant)
            s.flush()
            return tenant.id

    def job(self, job_id: str) -> Job:
        with self.store.session() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job

    def status(self, job_id: str) -> JobStatus:
        return JobStatus(self.job(job_id).status)

    def history(self, job_id: str) -> list[tuple[str | None, str, str]]:
        with self.store.session() as s:
            rows = s.execute(select(Transition).where(Transition.job_id == job_id).order_by(Transition.id)).scalars()
            return [(t.from_status, t.to_status, t.reason) for t in rows]

    def statuses(self, job_id: str) -> list[str]:
        return [to for _, to, _ in self.history(job_id)]

    def attempts(self, job_id: str) -> list[Attempt]:
        with self.store.session() as s:
            return list(s.execute(select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)).scalars())

    def request(self, job_id: str, **values: Any) -> None:
        """What the API does for a job in flight: set a flag or a size, then wake the loop."""
        with self.store.session() as s:
            job = s.get(Job, job_id)
            assert job is not None
            for key, value in values.items():
                setattr(job, key, value)
        self.loop.wake()

    def drive(self, until: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition",
              loop: ControlLoop | None = None) -> None:
        """Run rounds until `until()` holds."""
        loop = loop or self.loop
        deadline = time.monotonic() + timeout_s
        while True:
            loop.tick()
            if until():
                return
            if time.monotonic() > deadline:
                states = {j.id: (j.status, j.status_reason) for j in self.all_jobs()}
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; jobs: {states}")
            time.sleep(0.03)

    def until_status(self, job_id: str, *wanted: JobStatus, timeout_s: float = 30.0) -> None:
        self.drive(lambda: self.status(job_id) in wanted, timeout_s, f"{job_id} to become {wanted}")

    def until_running(self, job_id: str, timeout_s: float = 30.0) -> None:
        """PROCESSING with its learners launched (the attempt `running`, the executor's handle stored)."""
        self.drive(lambda: self.job(job_id).executor_handle is not None, timeout_s, f"{job_id}'s learners to run")

    def all_jobs(self) -> list[Job]:
        with self.store.session() as s:
            return list(s.execute(select(Job)).scalars())

    def close(self) -> None:
        """Stop every learner still running (tests must leave no process behind), then the store."""
        for loop in self.loops:
            loop.stop()  # waits for launches under way, so that every learner started is known below
            ctx = loop.ctx
            for run in list(ctx.runs.values()):
                ctx.executor.stop(run.job_id, run.attempt, 0.0)
            deadline = time.monotonic() + 15
            while ctx.runs and time.monotonic() < deadline:
                for ended in ctx.executor.poll().ended:
                    ctx.runs.pop(ended.job_id, None)
                    ctx.executor.release(ended.job_id, ended.attempt)
                time.sleep(0.02)
            assert not ctx.runs, f"learners left running: {sorted(ctx.runs)}"
            ctx.executor.close()
        self.store.close()


def make_env(url: str, tmp: Path, *, cluster: Cluster = TWO_BY_FOUR, policy: str = "fifo",
             placement: str = "pack", quota: int = 8) -> Env:
    store = Store.open(url)
    with store.session() as s:
        # The test's own directory is a read-write root: its jobs stage data from and store results to it.
        tenant = Tenant(name="vision", gpu_quota=quota, borrow_limit=None, created_at=time.time(),
                        roots=[{"path": str(tmp), "writable": True}])
        s.add(tenant)
        s.flush()
        tenant_id = tenant.id
    return Env(store, JobDirs(tmp / "data"), cluster, tmp, tenant_id, policy, placement)
