"""Queued jobs the scheduler may not see yet: Slurm's dependencies and array limits.

- Dependencies (manifest `after`, `afterany`, `afterok`): a queued job is held until each job of `after` has
  started or ended, each of `afterany` has ended, each of `afterok` has COMPLETED. An `afterok` job that
  ended otherwise (or is gone) can never be satisfied: the job is rejected (FAILED) with that reason, so that
  nothing waits forever (Slurm's kill_invalid_depend). A job's dependencies are looked at when it joins the
  loop's table and again only when one of them changes (the table's delta names it); once met, never again
  (a dependency cannot un-start or un-end).
- Array limits (`array: 0-9%N`): of an array's queued tasks, only as many as N minus its tasks that hold
  resources (starting, running, storing) are shown to the scheduler, lowest index first, so one decision
  never starts more than N. Worked out again for an array whenever one of its tasks changed.

Held jobs keep a wait reason of their own (DEPENDENCY, ARRAY_LIMIT) in the store and in `loadmaster queue`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select

from loadmaster.core.job import JobStatus
from loadmaster.platform.control.table import JobTable
from loadmaster.platform.manifest import JobManifest, array_tasks
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Job
from loadmaster.scheduling.plan import Reject

DEPENDENCY = "dependency"
ARRAY_LIMIT = "array_limit"
_ENDED = frozenset(s.value for s in JobStatus if s.terminal)


def has_dependencies(manifest: JobManifest) -> bool:
    return bool(manifest.after or manifest.afterany or manifest.afterok)


def _verdict(manifest: JobManifest, found: dict[str, tuple[str, float | None]]) -> tuple[bool, str | None]:
    """(met, why it can never be met) of one job's dependencies, from their (status, first start)."""
    for dep in manifest.afterok:
        status, _ = found.get(dep, ("", None))
        if status == JobStatus.COMPLETED.value:
            continue
        if not status:
            return False, f"afterok dependency {dep} no longer exists, so this job can never run"
        if status in _ENDED:
            return False, f"afterok dependency {dep} ended {status}, not COMPLETED, so this job can never run"
        return False, None
    for dep in manifest.afterany:
        status, _ = found.get(dep, ("", None))
        if status and status not in _ENDED:
            return False, None
    for dep in manifest.after:
        status, started = found.get(dep, ("", None))
        if status and status not in _ENDED and started is None:
            return False, None
    return True, None


@dataclass
class Gates:
    store: Store
    held: dict[str, str] = field(default_factory=dict)  # job id -> DEPENDENCY or ARRAY_LIMIT
    _cleared: set[str] = field(default_factory=set)  # jobs whose dependencies are met
    _waiting_on: dict[str, set[str]] = field(default_factory=dict)  # dependency -> jobs held by it
    _arrays: dict[tuple[int, str], set[str]] = field(default_factory=dict)  # (tenant, array) -> active tasks
    _array_of: dict[str, tuple[int, str]] = field(default_factory=dict)
    _due: set[tuple[int, str]] = field(default_factory=set)  # arrays a task left: a slot may be free
    _limits: dict[str, int | None] = field(default_factory=dict)  # array spec -> its %N
    # Kept until done, so that a round that fails (a store error) loses none of them: the jobs still to look
    # at, and those to reject (asked again each round until the rejection has committed and the job left).
    _look: set[str] = field(default_factory=set)
    _doomed: dict[str, str] = field(default_factory=dict)

    def _limit(self, manifest: JobManifest) -> int | None:
        spec = manifest.array or ""
        if spec not in self._limits:
            self._limits[spec] = array_tasks(spec)[1] if spec else None
        return self._limits[spec]

    def dependencies(self, table: JobTable, manifests: dict[str, JobManifest], changed: Iterable[str],
                     gone: Iterable[str]) -> tuple[set[str], list[Reject]]:
        """After a sync: the jobs whose hold changed, and the jobs to reject (an afterok that failed)."""
        look = self._look
        for job_id in gone:
            self._forget(job_id)
        for job_id in (*changed, *gone):
            look |= self._waiting_on.pop(job_id, set())
        for job_id in changed:
            manifest = manifests.get(job_id)
            row = table.rows.get(job_id)
            if manifest is not None and row is not None and row.state is JobStatus.QUEUED \
                    and job_id not in self._cleared and has_dependencies(manifest):
                look.add(job_id)
        look = self._look = {j for j in look if j in table.rows and j in manifests}
        touched: set[str] = set()
        if look:
            deps = {d for j in look for d in (*manifests[j].after, *manifests[j].afterany, *manifests[j].afterok)}
            found = self._read(deps)  # a store error here leaves self._look for the next round
            self._look = set()
            touched = self._judge(look, manifests, found)
        return touched, [Reject(j, why) for j, why in self._doomed.items() if j in table.rows]

    def _judge(self, look: set[str], manifests: dict[str, JobManifest],
               found: dict[str, tuple[str, float | None]]) -> set[str]:
        touched: set[str] = set()
        for job_id in look:
            manifest = manifests[job_id]
            met, never = _verdict(manifest, found)
            was_held = self.held.get(job_id) == DEPENDENCY
            if met:
                self._cleared.add(job_id)
                if was_held:
                    del self.held[job_id]
                    touched.add(job_id)
                continue
            if never is not None:
                self._doomed[job_id] = never
            for dep in (*manifest.after, *manifest.afterany, *manifest.afterok):
                self._waiting_on.setdefault(dep, set()).add(job_id)
            if not was_held:
                self.held[job_id] = DEPENDENCY
                touched.add(job_id)
        return touched

    def arrays(self, table: JobTable, manifests: dict[str, JobManifest], touched: Iterable[str],
               busy: set[str]) -> set[str]:
        """Before a snapshot: let as many of each touched array's queued tasks through as its limit allows
        (`busy`: tasks with a start pending or an attempt in flight). The tasks whose hold changed."""
        due, self._due = self._due, set()
        for job_id in touched:
            row = table.rows.get(job_id)
            manifest = manifests.get(job_id)
            key = self._array_of.get(job_id)
            if row is None or manifest is None or manifest.array_job is None or self._limit(manifest) is None:
                if key is not None:
                    self._forget(job_id)
                    due.add(key)
                continue  # not an array task, or an array without a limit: nothing to hold
            key = (row.tenant_id, manifest.array_job)
            self._array_of[job_id] = key
            self._arrays.setdefault(key, set()).add(job_id)
            due.add(key)
        changed: set[str] = set()
        for key in due:
            tasks = self._arrays.get(key)
            if not tasks:
                self._arrays.pop(key, None)
                continue
            limit = self._limit(manifests[next(iter(tasks))]) or 0
            queued = sorted((j for j in tasks if table.rows[j].state is JobStatus.QUEUED and j not in busy),
                            key=lambda j: manifests[j].array_index or 0)
            room = max(0, limit - (len(tasks) - len(queued)))
            for n, job_id in enumerate(queued):
                hold = n >= room
                if hold and job_id not in self.held:
                    self.held[job_id] = ARRAY_LIMIT
                    changed.add(job_id)
                elif not hold and self.held.get(job_id) == ARRAY_LIMIT:
                    del self.held[job_id]
                    changed.add(job_id)
        return changed

    def _forget(self, job_id: str) -> None:
        self.held.pop(job_id, None)
        self._cleared.discard(job_id)
        self._doomed.pop(job_id, None)
        self._look.discard(job_id)
        key = self._array_of.pop(job_id, None)
        if key is not None:
            self._due.add(key)
            tasks = self._arrays.get(key)
            if tasks is not None:
                tasks.discard(job_id)

    def _read(self, ids: set[str]) -> dict[str, tuple[str, float | None]]:
        wanted = sorted(ids)
        out: dict[str, tuple[str, float | None]] = {}
        with self.store.reading() as conn:
            for start in range(0, len(wanted), 500):  # bounded IN lists
                rows = conn.execute(select(Job.id, Job.status, Job.first_started_at)
                                 .where(Job.id.in_(wanted[start:start + 500])))
                out.update({job_id: (status, started) for job_id, status, started in rows})
        return out
