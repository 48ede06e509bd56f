"""A trace replayed as real jobs on a live server, and the same jobs through the simulator, side by side.

`plan_replay` picks a trace's first jobs that fit the cluster and compresses time by one factor (arrivals and
run times alike, so the load stays what the trace had), each job becoming a stand-in learner
(`loadmaster.runtime.synthetic`) that works for its compressed run time, checkpoints, obeys preemption and
fails at the end where the trace says the job failed. `run_replay` submits them at their compressed arrival
times through the HTTP API, as each tenant, and waits for every one to end. `live_summary` measures what
happened from the server's own records; the simulator runs the same compressed workload, so the two can be
compared key by key (`loadmaster demo`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.platform.client import Client
from loadmaster.scheduling.feasibility import never_fits

TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
# The keys both shells measure the same way (summary.json of a simulation has these and more).
# A stand-in learner mostly sleeps: it asks for a tenth of a CPU, so that virtual nodes that split a laptop's
# few cores still hold the trace's gangs.
LEARNER_CPUS = 0.1
LEARNER_MEM_GB = 0.25
COMPARED = ("jobs", "completed", "failed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_delay_s",
            "gpu_utilization", "preemptions")


class ReplayError(ValueError):
    """A replay that cannot be made as asked; the message names the option and the fix."""


@dataclass(frozen=True)
class Replay:
    source: str
    speedup: float  # trace seconds per replayed second
    workload: Workload  # the chosen jobs, compressed: submit times from 0, run times as replayed
    tenants: Mapping[str, int]  # tenant -> GPU quota (the cluster shared by each tenant's GPU-time demand)
    skipped: int  # jobs of the trace's first ones left out because they could never fit the cluster


def plan_replay(source: str, workload: Workload, cluster: Cluster, *, jobs: int, median_work_s: float,
                min_work_s: float = 1.0, max_work_s: float = 20.0) -> Replay:
    """The trace's first `jobs` jobs that fit `cluster`, with time compressed so that their median run time
    becomes `median_work_s`; run times are then kept within [min_work_s, max_work_s] so that a replay of a
    trace with week-long jobs still ends in minutes (the simulator gets the same clipped times)."""
    if jobs < 1:
        raise ReplayError(f"--jobs {jobs}: replay at least 1 job")
    if not median_work_s > 0:
        raise ReplayError(f"--median-work {median_work_s:g}: give the seconds a median job should run, more than 0")
    chosen: list[JobSpec] = []
    skipped = 0
    for spec in workload.jobs:
        if len(chosen) == jobs:
            break
        spec = replace(spec, cpus_per_learner=LEARNER_CPUS, mem_gb_per_learner=LEARNER_MEM_GB, failed_attempts_s=(),
                       min_learners=None, max_learners=None, type_speed=None, placement="")
        if never_fits(spec, cluster) is not None:
            skipped += 1
            continue
        chosen.append(spec)
    if not chosen:
        raise ReplayError(f"{source}: none of its first jobs fits this cluster ({cluster.total_gpus} GPUs): give "
                          "larger --nodes")
    durations = sorted(s.duration_s for s in chosen)
    speedup = max(durations[len(durations) // 2], 1e-9) / median_work_s
    start = chosen[0].submit_time_s
    compressed = [
        replace(s, submit_time_s=(s.submit_time_s - start) / speedup,
                duration_s=min(max_work_s, max(min_work_s, s.duration_s / speedup)))
        for s in chosen]
    report = LoadReport(source, read=len(chosen))
    if skipped:
        report.notes.append(f"{skipped} of the trace's first jobs never fit {cluster.total_gpus} GPUs: left out")
    return Replay(source, speedup, Workload(compressed, report), _quotas(compressed, cluster.total_gpus), skipped)


def _quotas(jobs: Sequence[JobSpec], gpus: int) -> dict[str, int]:
    """The cluster's GPUs shared by GPU-time demand: one each first (while there are enough), the rest in
    proportion, by largest remainders; the quotas add up to the cluster."""
    demand: dict[str, float] = {}
    for s in jobs:
        demand[s.tenant] = demand.get(s.tenant, 0.0) + s.gpus * s.duration_s
    base = 1 if len(demand) <= gpus else 0
    rest = gpus - base * len(demand)
    total = sum(demand.values()) or 1.0
    exact = {t: rest * d / total for t, d in demand.items()}
    quotas = {t: base + math.floor(x) for t, x in exact.items()}
    leftover = gpus - sum(quotas.values())
    for t in sorted(exact, key=lambda t: (math.floor(exact[t]) - exact[t], t))[:leftover]:
        quotas[t] += 1
    return quotas


def manifest_of(spec: JobSpec, python: str = sys.executable) -> dict[str, Any]:
    command = [python, "-m", "loadmaster.runtime.synthetic", "--work-s", f"{spec.duration_s:.3f}"]
    if spec.final_status is not FinalStatus.PASS:
        command.append("--fail")
    return {
        "name": f"replay-{spec.job_id}"[:128],
        "learners": spec.learners,
        "resources": {"gpus": spec.gpus_per_learner, "cpus": spec.cpus_per_learner,
                      "memory_gb": spec.mem_gb_per_learner},
        "command": command,
        "expected_duration_s": round(spec.duration_s, 3),
        "retry": {"policy": "never"},
    }


@dataclass(frozen=True)
class LiveJob:
    spec: JobSpec  # as replayed
    job_id: str  # the server's id
    submitted_at: float  # UNIX seconds, the server's
    summary: Mapping[str, Any]  # the job's listing entry at the end
    attempts: Sequence[Mapping[str, Any]]  # its attempt history


Progress = Callable[[float, Mapping[str, int]], None]


def run_replay(replay: Replay, admin: Client, connect: Callable[[str], Client], *, timeout_s: float,
               progress: Progress | None = None, poll_s: float = 0.5) -> tuple[float, list[LiveJob]]:
    """Create the tenants, submit every job at its compressed arrival time as its tenant, wait until each has
    ended (or cancel what is left after `timeout_s`); the epoch (UNIX seconds of the first submission) and
    the jobs with what the server recorded of them."""
    clients: dict[str, Client] = {}
    for tenant, gpus in replay.tenants.items():
        created = admin.create_tenant(tenant, gpus, None)  # idle quota may be borrowed, and is reclaimed
        clients[tenant] = connect(str(created["token"]))
    pending = list(replay.workload.jobs)
    submitted: list[tuple[JobSpec, str]] = []
    epoch = time.time()
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    try:
        while True:
            now = time.time() - epoch
            while pending and pending[0].submit_time_s <= now:
                spec = pending.pop(0)
                job = clients[spec.tenant].submit(manifest_of(spec))
                submitted.append((spec, str(job["id"])))
                states[str(job["id"])] = str(job["status"])
            for row in admin.jobs(limit=1000):
                if row["id"] in states:
                    states[row["id"]] = row["status"]
            if progress is not None:
                progress(now, _counts(states, len(pending)))
            if not pending and all(s in TERMINAL for s in states.values()):
                break
            if time.monotonic() > deadline:
                for job_id, status in states.items():
                    if status not in TERMINAL:
                        admin.action(job_id, "cancel")
                break
            time.sleep(poll_s)
    finally:
        for client in clients.values():
            client.close()
    out = []
    for spec, job_id in submitted:
        detail = admin.job(job_id)
        out.append(LiveJob(spec, job_id, float(detail["submitted_at"]), detail, detail["attempt_history"]))
    return epoch, out


def _counts(states: Mapping[str, str], not_submitted: int) -> dict[str, int]:
    counts = {"not submitted": not_submitted, "queued": 0, "running": 0, "ended": 0}
    for status in states.values():
        key = "ended" if status in TERMINAL else "queued" if status in ("QUEUED", "HALTED") else "running"
        counts[key] += 1
    return counts


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def live_summary(jobs: Sequence[LiveJob], gpus: int) -> dict[str, Any]:
    """The COMPARED keys, measured from the server's records (times from each job's submission)."""
    jcts: list[float] = []
    delays: list[float] = []
    busy_gpu_s = 0.0
    first = min((j.submitted_at for j in jobs), default=0.0)
    last = first
    for job in jobs:
        s = job.summary
        if s["first_started_at"] is not None:
            delays.append(s["first_started_at"] - job.submitted_at)
        if s["finished_at"] is not None:
            jcts.append(s["finished_at"] - job.submitted_at)
            last = max(last, s["finished_at"])
        for attempt in job.attempts:
            end = attempt["ended_at"] if attempt["ended_at"] is not None else attempt["started_at"]
            busy_gpu_s += (end - attempt["started_at"]) * job.spec.gpus
    makespan = last - first
    return {
        "jobs": len(jobs),
        "completed": sum(1 for j in jobs if j.summary["status"] == "COMPLETED"),
        "failed": sum(1 for j in jobs if j.summary["status"] == "FAILED"),
        "avg_jct_s": sum(jcts) / len(jcts) if jcts else 0.0,
        "p50_jct_s": _pct(jcts, 50),
        "p99_jct_s": _pct(jcts, 99),
        "makespan_s": makespan,
        "avg_queue_delay_s": sum(delays) / len(delays) if delays else 0.0,
        "gpu_utilization": min(1.0, busy_gpu_s / (gpus * makespan)) if makespan > 0 else 0.0,
        "preemptions": sum(int(j.summary["preemptions"]) for j in jobs),
    }
