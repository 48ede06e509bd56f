"""`trace analyze`: the Philly paper's characterisation (Jeon et al., ATC'19) of any trace loadmaster reads.

Sections (each a dict of plain numbers; `report.py` draws the same numbers):
  job_sizes     jobs and GPU time per size bucket (1, 2-4, 5-8, >8 GPUs)
  status_mix    jobs and GPU time per final status
  runtime       runtime CDF by final status and by size
  queueing      queueing-delay CDF by size (and for the largest VCs), and its split into fair-share and
                fragmentation delay (traces/queueing.py)
  locality      servers a large job ran on against how long it waited (Philly's figure 4)
  utilization   GPUs allocated over time; offered load when no start times are known
  failures      the failure table: trials, jobs, users, runtime to failure, GPU demand and GPU time
  retries       attempts per job, what retrying bought, the gap before a retry

Every section says whether it is `available` and, if not, why; whatever is inferred says how. Nothing is
filled in that the trace does not hold.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.traces.gpu_util import per_job_utilization
from loadmaster.traces.history import History, JobHistory, Times
from loadmaster.traces.occupancy import Occupancy, rebuild
from loadmaster.traces.queueing import CLASSES, PHILLY_CLASSES, demand_shares, split_delays
from loadmaster.traces.stats import SIZE_BUCKETS, cdf, describe, size_bucket

DEMAND_RULE = "each VC's share of the cluster in proportion to its GPU-time in the trace (no quota file given)"
SIM_CLASSES: tuple[str, ...] = ("fair_share", "fragmentation", "capacity")  # the simulator's delay classes
GPU_UTIL_UNAVAILABLE = ("per-GPU compute utilisation (the paper's figures 5-6) comes from nvidia-smi samples "
                        "(Philly's cluster_gpu_util), which job logs do not hold: pass --gpu-util FILE")


@dataclass(frozen=True)
class Shares:
    """Each VC's share of the cluster's GPUs, and the rule that set them (shown in the report)."""

    gpus: Mapping[str, float]
    rule: str


@dataclass(frozen=True)
class Options:
    min_delay_s: float = 60.0  # a job "was delayed" if it waited this long (shorter: scheduler latency)
    top_vcs: int = 5  # queueing CDFs per VC for this many of the largest VCs (the paper shows five)
    utilization_bin_s: float = 3600.0  # the allocation series averages over bins this long ...
    utilization_max_bins: int = 2500  # ... or a whole number of them, to keep at most this many bins


def analyze(history: History, cluster: Cluster | None, shares: Callable[[int], Shares] | None = None,
            options: Options = Options(), gpu_util: str | Path | None = None) -> dict[str, Any]:
    """The characterisation of one trace. `shares(capacity)` gives the VC shares for a cluster of that
    many GPUs (the capacity is only known once the occupancy is rebuilt); by default each VC's share is
    proportional to its GPU-time demand in the trace. gpu_util: Philly's cluster_gpu_util log, for the
    per-GPU utilisation of each job."""
    if shares is None:
        def shares(capacity: int) -> Shares:
            return Shares(demand_shares(history.jobs, capacity), DEMAND_RULE)
    specs = history.workload.jobs
    occ = rebuild(history, cluster) if history.times is Times.RECORDED else None
    # Without a cluster, a log that names no servers (Alibaba) leaves the capacity unknown.
    capacity = (occ.capacity if occ is not None else cluster.total_gpus if cluster is not None else None) or None
    out = describe(history.workload)
    out.update({
        "times": history.times.value,
        "times_how": history.how,
        "cluster": None if cluster is None else {"name": cluster.name, "servers": len(cluster.nodes),
                                                 "gpus": cluster.total_gpus},
        "capacity_gpus": capacity,
        "job_sizes": job_sizes(specs),
        "status_mix": status_mix(specs),
        "runtime": runtime(history),
        "queueing": queueing(history, occ, shares, options),
        "locality": locality(history),
        "utilization": utilization(history, occ, capacity, options, gpu_util),
        "failures": failures(specs),
        "retries": retries(history),
        "notes": [*history.workload.report.notes, *history.notes, *(occ.notes if occ else [])],
        "checks": dict(occ.checks) if occ else {},
    })
    return out


def _unavailable(why: str) -> dict[str, Any]:
    return {"available": False, "why": why}


def _gpu_s(spec: JobSpec) -> float:
    """GPU-seconds of every attempt the trace records (failed ones included)."""
    return spec.gpus * (spec.duration_s + sum(spec.failed_attempts_s))


def _shares_of(values: Mapping[str, float], keys: tuple[str, ...]) -> list[float]:
    total = sum(values.values())
    return [values.get(k, 0.0) / total if total else 0.0 for k in keys]


# ------------------------------------------------------------------------------------------ the mix


def job_sizes(specs: list[JobSpec]) -> dict[str, Any]:
    jobs: Counter[str] = Counter()
    gpu_s: dict[str, float] = defaultdict(float)
    for s in specs:
        jobs[size_bucket(s.gpus)] += 1
        gpu_s[size_bucket(s.gpus)] += _gpu_s(s)
    buckets = tuple(b for b in SIZE_BUCKETS if jobs[b] or b != "0")
    return {
        "buckets": list(buckets),
        "jobs": [jobs[b] for b in buckets],
        "jobs_share": _shares_of({b: float(jobs[b]) for b in buckets}, buckets),
        "gpu_time_share": _shares_of(gpu_s, buckets),
        "by_gpus": {str(g): n for g, n in sorted(Counter(s.gpus for s in specs).items())},
    }


def status_mix(specs: list[JobSpec]) -> dict[str, Any]:
    statuses = tuple(s.value for s in FinalStatus)
    jobs = Counter(s.final_status.value for s in specs)
    gpu_s: dict[str, float] = defaultdict(float)
    for s in specs:
        gpu_s[s.final_status.value] += _gpu_s(s)
    return {
        "statuses": list(statuses),
        "jobs": [jobs[k] for k in statuses],
        "jobs_share": _shares_of({k: float(jobs[k]) for k in statuses}, statuses),
        "gpu_hours": [gpu_s[k] / 3600 for k in statuses],
        "gpu_time_share": _shares_of(gpu_s, statuses),
    }


def _job_runtime(job: JobHistory, times: Times) -> float:
    if times is not Times.NONE and job.first_start_s is not None and job.end_s is not None:
        return job.end_s - job.first_start_s
    return job.spec.duration_s + sum(job.spec.failed_attempts_s)


def runtime(history: History) -> dict[str, Any]:
    if history.times is Times.NONE:
        definition = "sum of the attempts' runtimes (the trace has no start times, so gaps between " \
                     "attempts are not counted)"
    else:
        definition = "first attempt's start to last attempt's end, retries and the gaps between them " \
                     f"included ({history.times.value} times)"
    by_status: dict[str, list[float]] = defaultdict(list)
    by_size: dict[str, list[float]] = defaultdict(list)
    for job in history.jobs:
        r = _job_runtime(job, history.times)
        by_status[job.spec.final_status.value].append(r)
        by_size[size_bucket(job.spec.gpus)].append(r)
    return {
        "definition": definition,
        "by_status": {s.value: cdf(by_status[s.value]) for s in FinalStatus if by_status[s.value]},
        "by_size": {b: cdf(by_size[b]) for b in SIZE_BUCKETS if by_size[b]},
    }


# ------------------------------------------------------------------------------------------ queueing


def queueing(history: History, occ: Occupancy | None, shares: Callable[[int], Shares],
             options: Options) -> dict[str, Any]:
    if history.times is Times.NONE:
        return _unavailable("the trace records no start times; `trace analyze --replay POLICY/PLACEMENT` "
                            "simulates them on a cluster")
    started = [j for j in history.jobs if j.first_start_s is not None]
    by_size: dict[str, list[float]] = defaultdict(list)
    by_vc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for j in started:
        delay = float(j.queue_delay_s or 0.0)
        by_size[size_bucket(j.spec.gpus)].append(delay)
        by_vc[j.spec.tenant][size_bucket(j.spec.gpus)].append(delay)
    largest = sorted(by_vc, key=lambda vc: (-sum(map(len, by_vc[vc].values())), vc))[: options.top_vcs]
    return {
        "available": True,
        "definition": "first attempt's start minus submission (Philly's queueing delay)",
        "overall": cdf(d for ds in by_size.values() for d in ds),
        "by_size": {b: cdf(by_size[b]) for b in SIZE_BUCKETS if by_size[b]},
        "by_vc": {vc: {b: cdf(by_vc[vc][b]) for b in SIZE_BUCKETS if by_vc[vc][b]} for vc in largest},
        "split": _split(history, started, occ, shares, options),
    }


def _split(history: History, started: list[JobHistory], occ: Occupancy | None,
           shares: Callable[[int], Shares], options: Options) -> dict[str, Any]:
    if history.times is Times.SIMULATED:
        seconds = {c: np.array([float((j.wait_split_s or {}).get(c, 0.0)) for j in started]) for c in SIM_CLASSES}
        method = ("the simulator's own reason for every wait (decide()'s WaitReason, classed by "
                  "WaitReason.delay_class), over all of a job's waiting, requeues after a failure or a "
                  "preemption included")
        return {"available": True, "method": method, "classes": list(SIM_CLASSES),
                **_tabulate(started, seconds, SIM_CLASSES, options)}
    if not any(j.last_placement for j in started):
        return _unavailable("the trace records when jobs ran but not on which servers, so a wait for servers "
                            "with room cannot be told from the others")
    if occ is None or not occ.capacity:
        return _unavailable("needs the cluster the trace ran on: pass --cluster")
    vc_shares = shares(occ.capacity)
    split = split_delays(started, occ, vc_shares.gpus)
    allocated = float(occ.integral(occ.busy)[-1] / (occ.capacity * (occ.t[-1] - occ.t[0])))
    return {
        "available": True,
        "method": "each instant of a job's wait classified on the occupancy rebuilt from the trace's "
                  "attempts (traces/queueing.py): fair_share if the VC's busy GPUs plus the job's exceed its "
                  "share; capacity if fewer GPUs are free in the cluster than the job needs; fragmentation if "
                  "they are free but not in the per-server shape the job finally ran in; locality if that "
                  "shape fitted but not the tightest one; otherwise unexplained",
        "classes": list(CLASSES),
        "philly_classes": {k: list(v) for k, v in PHILLY_CLASSES.items()},
        "inputs": {"capacity_gpus": occ.capacity, "allocated_share": allocated, "share_rule": vc_shares.rule,
                   "shares_gpus": {vc: round(g, 2) for vc, g in sorted(vc_shares.gpus.items())}},
        "caveat": None if allocated >= 0.5 else (
            f"the trace's own jobs hold {allocated:.0%} of the cluster's GPUs on average: if it is a sample of "
            "the cluster's jobs, the rest of the load is missing, so fair_share, capacity and fragmentation "
            "are lower bounds and unexplained holds what the missing jobs would explain"),
        **_tabulate(started, split.seconds, CLASSES, options),
    }


def _tabulate(jobs: list[JobHistory], seconds: Mapping[str, np.ndarray], classes: tuple[str, ...],
              options: Options) -> dict[str, Any]:
    """Per size bucket and overall: delayed jobs by the class that dominated their wait, and the
    share of waiting seconds per class."""
    delay = np.array([float(j.queue_delay_s or 0.0) for j in jobs])
    matrix = np.vstack([seconds[c] for c in classes]) if jobs else np.zeros((len(classes), 0))
    dominant = matrix.argmax(axis=0) if jobs else np.array([], dtype=int)
    buckets = np.array([size_bucket(j.spec.gpus) for j in jobs])

    def table(mask: np.ndarray) -> dict[str, Any]:
        delayed = mask & (delay >= options.min_delay_s)
        secs = matrix[:, mask].sum(axis=1)
        total = float(secs.sum())
        return {
            "jobs": int(mask.sum()),
            "jobs_delayed": int(delayed.sum()),
            "delayed_jobs_by_dominant_class": {c: int((dominant[delayed] == i).sum()) for i, c in enumerate(classes)},
            "seconds_by_class": {c: float(secs[i]) for i, c in enumerate(classes)},
            "share_by_class": {c: float(secs[i]) / total if total else 0.0 for i, c in enumerate(classes)},
        }

    return {
        "min_delay_s": options.min_delay_s,
        "overall": table(np.ones(len(jobs), dtype=bool)),
        "by_size": {b: table(buckets == b) for b in SIZE_BUCKETS if (buckets == b).any()},
    }


def locality(history: History) -> dict[str, Any]:
    """Philly's figure 4: how many servers a job of 5+ GPUs ran on, against its queueing delay."""
    points = [
        [float(j.queue_delay_s or 0.0), len(j.last_placement), j.spec.gpus]
        for j in history.jobs if j.spec.gpus >= 5 and j.last_placement and j.first_start_s is not None
    ]
    if not points:
        return _unavailable("needs recorded placements (which servers each job ran on) and start times")
    by_servers: dict[int, list[float]] = defaultdict(list)
    for delay, servers, _ in points:
        by_servers[int(servers)].append(delay)
    return {
        "available": True,
        "definition": "servers of the last attempt that lists its machines, against the job's queueing delay; "
                      "jobs of 5 or more GPUs",
        "points": points,
        "median_delay_s_by_servers": {str(n): float(np.median(d)) for n, d in sorted(by_servers.items())},
        "jobs_by_servers": {str(n): len(d) for n, d in sorted(by_servers.items())},
    }


# ------------------------------------------------------------------------------------------ utilisation


def utilization(history: History, occ: Occupancy | None, capacity: int | None, options: Options,
                gpu_util: str | Path | None = None) -> dict[str, Any]:
    per_gpu = per_job_utilization(history, gpu_util) if gpu_util is not None else _unavailable(GPU_UTIL_UNAVAILABLE)
    if occ is not None and capacity:
        t, busy = occ.t, occ.busy.astype(float)
        how = "GPUs held by the trace's recorded attempts, over the servers' capacity"
    elif history.busy_timeline is not None and len(history.busy_timeline[0]) >= 2 and capacity:
        # busy[i] holds from times[i] to times[i + 1]; the last entry is the state at the end.
        times, held = history.busy_timeline
        t = np.array(times, dtype=float)
        busy = np.array(held[:-1], dtype=float)
        how = "GPUs the simulator held, over the cluster's capacity"
    else:
        out = _unavailable("needs start times (recorded, or --replay) and a cluster (--cluster)")
        if capacity:
            out["offered_load"] = _offered_load(history.workload.jobs, capacity)
        out["per_gpu_compute"] = per_gpu
        return out
    span = t[-1] - t[0]
    unit = options.utilization_bin_s
    bin_s = unit * max(1, math.ceil(span / unit / options.utilization_max_bins))
    series = _binned(t, busy, bin_s)
    mean = float((busy * np.diff(t)).sum() / span / capacity) if span > 0 and capacity else 0.0
    allocated = np.array(series["busy"]) / capacity if capacity else np.zeros(0)
    return {
        "available": True,
        "definition": how,
        "capacity_gpus": capacity,
        "allocated_mean": mean,
        "allocated_p50": float(np.median(allocated)) if allocated.size else 0.0,
        "allocated_max": float(allocated.max()) if allocated.size else 0.0,
        "series": {"bin_s": bin_s, "t_s": series["t"],
                   "allocated": [float(a) for a in allocated]},
        "offered_load": _offered_load(history.workload.jobs, capacity) if capacity else None,
        "per_gpu_compute": per_gpu,
    }


def _offered_load(specs: list[JobSpec], capacity: int) -> float | None:
    """GPU-time the jobs ask for over the GPU-time the cluster offers between the first and last
    submission: above 1, a queue must build up whatever the scheduler does."""
    submits = [s.submit_time_s for s in specs]
    span = max(submits, default=0.0) - min(submits, default=0.0)
    return sum(_gpu_s(s) for s in specs) / (capacity * span) if span > 0 else None


def _binned(t: np.ndarray, busy: np.ndarray, bin_s: float) -> dict[str, list[float]]:
    """Average busy GPUs per time bin (from the prefix integral, so the cost is one pass)."""
    prefix = np.concatenate(([0.0], np.cumsum(busy * np.diff(t))))
    edges = np.arange(t[0], t[-1] + bin_s, bin_s)
    if edges.size < 2:
        edges = np.array([t[0], t[-1]])
    edges = np.clip(edges, t[0], t[-1])  # the last bin ends with the trace
    k = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, busy.size - 1)
    area = prefix[k] + busy[k] * (edges - t[k])
    widths = np.maximum(np.diff(edges), 1e-9)
    return {"t": [float(x) for x in edges[:-1]], "busy": [float(a) for a in np.diff(area) / widths]}


# ------------------------------------------------------------------------------------------ failures


_OUTCOMES: tuple[tuple[str, str], ...] = (
    ("recovered", "failed, then a retry passed"),
    ("retried_failed", "failed, retried, and the job failed in the end"),
    ("terminal", "last attempt of a job that failed"),
    ("killed", "last attempt of a killed job"),
)


def _failed_attempts(spec: JobSpec) -> list[tuple[str, float]]:
    """(outcome, runtime to failure) of every attempt that did not pass."""
    out = [("recovered" if spec.final_status is FinalStatus.PASS else "retried_failed", r)
           for r in spec.failed_attempts_s]
    if spec.final_status is FinalStatus.FAILED:
        out.append(("terminal", spec.duration_s))
    elif spec.final_status is FinalStatus.KILLED:
        out.append(("killed", spec.duration_s))
    return out


def failures(specs: list[JobSpec]) -> dict[str, Any]:
    """Philly's failure table, by what the trace shows: how each failed attempt's job fared. The root-cause
    category (the paper read job logs: out of memory, incorrect input, ...) is not in any job log."""
    trials: dict[str, list[tuple[JobSpec, float]]] = defaultdict(list)
    for s in specs:
        for outcome, seconds in _failed_attempts(s):
            trials[outcome].append((s, seconds))
    total_gpu_s = sum(_gpu_s(s) for s in specs)
    rows = []
    for key, label in _OUTCOMES:
        items = trials[key]
        if not items:
            continue
        sizes = Counter(size_bucket(s.gpus) for s, _ in items)
        gpu_s = sum(s.gpus * r for s, r in items)
        rtfs = np.array([r for _, r in items])
        rows.append({
            "outcome": key,
            "label": label,
            "trials": len(items),
            "jobs": len({s.job_id for s, _ in items}),
            "users": len({s.user for s, _ in items}),
            "rtf_s": {f"p{q}": float(np.percentile(rtfs, q)) for q in (50, 90, 95)},
            # Philly's observation: most failures come early, before a retry could be worth much.
            "failed_within": {f"{m}min": float((rtfs <= m * 60).mean()) for m in (1, 10, 60)},
            "gpu_demand_share": {b: sizes[b] / len(items) for b in SIZE_BUCKETS if sizes[b]},
            "gpu_hours": gpu_s / 3600,
            "gpu_time_share": gpu_s / total_gpu_s if total_gpu_s else 0.0,
            "rtf_cdf": cdf(rtfs),
        })
    return {
        "available": bool(rows),
        "rows": rows,
        "category": _unavailable("the paper's failure categories (CPU/GPU out of memory, incorrect input, "
                                 "semantic error, ...) come from job logs; a job log records only that an "
                                 "attempt ended and how the job ended. Rows group failures by that instead"),
        **({} if rows else {"why": "no attempt failed and no job was killed in this trace"}),
    }


def retries(history: History) -> dict[str, Any]:
    specs = history.workload.jobs
    by_status: dict[str, Counter[int]] = defaultdict(Counter)
    for s in specs:
        by_status[s.final_status.value][s.attempts] += 1
    retried = [s for s in specs if s.attempts > 1]
    failed_gpu_s = sum(s.gpus * sum(s.failed_attempts_s) for s in specs)
    total_gpu_s = sum(_gpu_s(s) for s in specs)
    gaps = [
        b.start_s - a.end_s
        for j in history.jobs for a, b in zip(j.attempts, j.attempts[1:], strict=False)
        if a.end_s is not None and b.start_s is not None
    ]
    return {
        "attempts_by_status": {k: {str(n): c for n, c in sorted(v.items())} for k, v in sorted(by_status.items())},
        "jobs": len(specs),
        "jobs_retried": len(retried),
        "jobs_retried_share": len(retried) / len(specs) if specs else 0.0,
        "retried_then_passed": sum(1 for s in retried if s.final_status is FinalStatus.PASS),
        "failed_attempts": sum(len(s.failed_attempts_s) for s in specs),
        "gpu_hours_failed_attempts": failed_gpu_s / 3600,
        "gpu_time_share_failed_attempts": failed_gpu_s / total_gpu_s if total_gpu_s else 0.0,
        "retry_gap": cdf(gaps) if gaps else _unavailable("needs recorded attempt times"),
    }
