"""Descriptive statistics of a workload, and the summaries every figure of `trace analyze` is built from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from loadmaster.core.workload import Workload

# Philly's job-size buckets (Jeon et al., ATC'19, figures 2-4), plus CPU-only jobs (Alibaba has them).
SIZE_BUCKETS: tuple[str, ...] = ("0", "1", "2-4", "5-8", ">8")
CDF_POINTS = 101  # a CDF curve is the value at every whole percentile


def size_bucket(gpus: int) -> str:
    if gpus <= 1:
        return SIZE_BUCKETS[gpus if gpus >= 0 else 0]
    return "2-4" if gpus <= 4 else "5-8" if gpus <= 8 else ">8"


def quantiles(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {}
    q = np.percentile(x, [10, 50, 90, 99])
    return {"mean": float(x.mean()), "p10": float(q[0]), "p50": float(q[1]), "p90": float(q[2]),
            "p99": float(q[3]), "max": float(x.max())}


def cdf(values: Iterable[float]) -> dict[str, Any]:
    """A distribution as numbers: count, summary quantiles, and `curve`, the value at each percentile
    (curve[i] = (value, i / 100)), which is what the report plots."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0:
        return {"n": 0}
    fractions = np.linspace(0.0, 1.0, CDF_POINTS)
    curve = np.quantile(x, fractions)
    return {"n": int(x.size), **quantiles(x), "p95": float(np.percentile(x, 95)),
            "curve": [[float(v), float(f)] for v, f in zip(curve, fractions, strict=True)]}


def describe(workload: Workload) -> dict[str, Any]:
    jobs = workload.jobs
    gpus = np.array([j.gpus for j in jobs], dtype=float)
    dur = np.array([j.duration_s for j in jobs], dtype=float)
    submit = np.array([j.submit_time_s for j in jobs], dtype=float)
    gaps = np.diff(submit) if submit.size > 1 else np.array([])
    hours = Counter(int((t % 86400) // 3600) for t in submit)
    gpu_buckets = Counter(
        "0" if g == 0 else "1" if g == 1 else "2-4" if g <= 4 else "5-8" if g <= 8 else "9-32" if g <= 32
        else ">32" for g in gpus
    )
    tenants = Counter(j.tenant for j in jobs)
    gpu_time = float((gpus * dur).sum())
    return {
        "source": workload.report.source,
        "jobs": len(jobs),
        "skipped": dict(workload.report.skipped),
        "tenants": len(tenants),
        "jobs_per_tenant": dict(tenants.most_common()),
        "users": len({j.user for j in jobs}),
        "span_s": float(submit.max() - submit.min()) if submit.size else 0.0,
        "gpus_per_job": quantiles(gpus),
        "gpus_per_job_share": {k: v / len(jobs) for k, v in sorted(gpu_buckets.items())} if jobs else {},
        "duration_s": quantiles(dur),
        "interarrival_s": quantiles(gaps),
        "arrivals_by_hour_of_day": [hours.get(h, 0) for h in range(24)],
        "final_status": dict(Counter(j.final_status.value for j in jobs)),
        "attempts": dict(sorted(Counter(j.attempts for j in jobs).items())),
        "models": dict(Counter(j.model or "(none)" for j in jobs).most_common(12)),
        "gpu_hours": gpu_time / 3600,
        "gpu_hours_failed_attempts": float(sum(j.gpus * sum(j.failed_attempts_s) for j in jobs)) / 3600,
    }
