"""Shared by the drivers behind docs/results.md (bench/results_*.py): run policy/placement pairs on one
workload in this process, keep the summary keys the results quote, and record which code produced them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import RESULTS, ROOT, machine
from loadmaster.core.cluster import Cluster
from loadmaster.core.workload import Workload
from loadmaster.sim.experiment import RunOptions, RunOutcome, simulate

FIGURES = ROOT / "docs" / "figures"

# The summary.json keys the results tables draw on (the full summaries are in each run's summary.json).
KEYS = (
    "jobs", "completed", "failed", "unfinished", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s",
    "avg_queue_delay_s", "avg_total_wait_s", "fair_share_delay_s", "fragmentation_delay_s", "capacity_delay_s",
    "fragmentation_delay_share", "wait_by_reason_s", "gpu_utilization", "gpu_hours", "max_rho", "median_rho",
    "jain_fairness", "preemptions", "gpu_hours_lost_to_preemption", "decisions", "wall_time_s",
)


def provenance() -> dict[str, Any]:
    """The commit the numbers came from, and whether src/ differed from it (other work in progress)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "src_modified": bool(git("status", "--porcelain", "src"))}


def run_pairs(workload: Workload, cluster: Cluster, pairs: list[tuple[str, str]],
              measure: Callable[[RunOutcome], dict[str, Any]] | None = None, /,
              **extra: Any) -> list[dict[str, Any]]:
    """One simulation per (policy, placement); each row carries `extra` (the sweep's coordinates) and what
    `measure` adds from the run's records."""
    rows = []
    for policy, placement in pairs:
        started = time.perf_counter()
        outcome = simulate(workload, cluster, RunOptions(policy=policy, placement=placement))
        row = {**extra, "policy": policy, "placement": placement, **{k: outcome.summary[k] for k in KEYS}}
        if measure is not None:
            row.update(measure(outcome))
        rows.append(row)
        print(f"{extra} {policy}/{placement}: avg JCT {row['avg_jct_s']:,.0f} s, max rho {row['max_rho']:.3g}, "
              f"{time.perf_counter() - started:.1f} s", flush=True)
    return rows


def save(stem: str, config: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{stem}.json"
    payload = {"machine": machine(), "provenance": provenance(), "config": config, "rows": rows}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def ratio(rows: list[dict[str, Any]], key: str, num: str, den: str, **where: Any) -> float:
    """rows[policy=num][key] / rows[policy=den][key] among the rows matching `where` (a label, e.g. fifo/pack)."""
    def pick(label: str) -> float:
        for r in rows:
            if f"{r['policy']}/{r['placement']}" == label and all(r.get(k) == v for k, v in where.items()):
                return float(r[key])
        raise KeyError(f"no row {label} with {where}")

    return pick(num) / pick(den)
