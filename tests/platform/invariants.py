"""The store's invariants (docs/platform.md), checked against a real store, and the record of what the
learners actually ran (each learner of the chaos tests appends one line when its command starts).

check_store() is what the fault tests, the state machine and the chaos suite assert after every step:
- a job that may not book GPUs (QUEUED, HALTED, STORING, finished) books none: a queued job holds no GPU;
- a job has at most one open attempt, its latest, and only while DOWNLOADING or PROCESSING; a job that books
  GPUs has it;
- no GPU is booked twice;
- a job reaches a final status once, and nothing follows it.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Attempt, Job, Transition
from tests.platform.executor_helpers import processes_with

BOOKING = ("DOWNLOADING", "PROCESSING")
FINAL = ("COMPLETED", "FAILED", "CANCELLED")


def check_store(store: Store, *, settled: bool = False) -> list[str]:
    """What breaks an invariant, one line each ([] when all hold). settled: no hand-off is under way, so a
    DOWNLOADING or PROCESSING job must have its open attempt (between a resize's two attempts it may not)."""
    problems: list[str] = []
    with store.session() as s:
        jobs = {j.id: j for j in s.scalars(select(Job))}
        open_attempts: dict[str, list[int]] = defaultdict(list)
        for job_id, number in s.execute(select(Attempt.job_id, Attempt.number).where(Attempt.ended_at.is_(None))):
            open_attempts[job_id].append(number)
        finals: Counter[str] = Counter()
        last: dict[str, str] = {}
        for job_id, to in s.execute(select(Transition.job_id, Transition.to_status).order_by(Transition.id)):
            if last.get(job_id) in FINAL:
                problems.append(f"{job_id}: moved to {to} after {last[job_id]}")
            last[job_id] = to
            if to in FINAL:
                finals[job_id] += 1
    owners: dict[tuple[str, int], list[str]] = defaultdict(list)
    for job_id, job in jobs.items():
        opened = open_attempts.get(job_id, [])
        if job.status not in BOOKING and job.allocation is not None:
            problems.append(f"{job_id}: {job.status} but books GPUs {job.allocation}")
        if len(opened) > 1:
            problems.append(f"{job_id}: {len(opened)} open attempts {opened}")
        if opened and job.status not in BOOKING:
            problems.append(f"{job_id}: {job.status} with open attempt {opened}")
        if opened and opened != [job.attempts]:
            problems.append(f"{job_id}: open attempt {opened} is not its latest ({job.attempts})")
        if job.allocation is not None and not opened:
            problems.append(f"{job_id}: {job.status} books GPUs without an open attempt")
        if settled and job.status in BOOKING and not opened:
            problems.append(f"{job_id}: {job.status} without an open attempt")
        if finals[job_id] > 1:
            problems.append(f"{job_id}: reached a final status {finals[job_id]} times")
        if job.status in FINAL and finals[job_id] != 1:
            problems.append(f"{job_id}: {job.status} without one final transition")
        for learner in (job.allocation or {}).get("learners", ()):
            for gpu in learner["gpu_ids"]:
                owners[(learner["node"], gpu)].append(job_id)
    for (node, gpu), holders in owners.items():
        if len(holders) > 1:
            problems.append(f"GPU {gpu} of {node} booked by {holders}")
    return problems


# What a learner of the chaos tests runs: one line per start, then its work (appended with O_APPEND: the
# lines of concurrent learners never mix).
RECORD = 'echo "$LOADMASTER_JOB_ID $LOADMASTER_ATTEMPT $RANK $$" >> {runs}; {then}'


def recording(runs: Path, then: str = "sleep 0.2") -> list[str]:
    """A manifest command that records its start in `runs`, then does `then`."""
    return ["/bin/sh", "-c", RECORD.format(runs=runs, then=then)]


@dataclass(frozen=True)
class Runs:
    """What the learners recorded: (job, attempt, rank) -> how many times it started."""

    starts: Counter[tuple[str, int, int]]

    @classmethod
    def read(cls, runs: Path) -> Runs:
        starts: Counter[tuple[str, int, int]] = Counter()
        if runs.exists():
            for line in runs.read_text().splitlines():
                job, attempt, rank, _ = line.split()
                starts[(job, int(attempt), int(rank))] += 1
        return cls(starts)

    def problems(self, attempts: dict[str, int]) -> list[str]:
        """A learner that started twice for one attempt, or an attempt that ran beyond the job's count."""
        out = [f"{job} attempt {a} rank {r} started {n} times" for (job, a, r), n in self.starts.items() if n > 1]
        out += [f"{job} attempt {a} ran but the job counts {attempts.get(job, 0)} attempts"
                for (job, a, _) in self.starts if a > attempts.get(job, 0)]
        return out


def attempts_of(store: Store) -> dict[str, int]:
    with store.session() as s:
        return {job_id: n for job_id, n in s.execute(select(Job.id, Job.attempts))}


def learner_processes(root: Path) -> list[int]:
    """Live learners whose checkpoint directory is under `root` (their environment says so)."""
    prefix = f"LOADMASTER_CHECKPOINT_DIR={root.resolve()}{os.sep}".encode()
    return processes_with(lambda environ: any(item.startswith(prefix) for item in environ))
