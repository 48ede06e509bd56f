"""Simulator benchmarks of issue 2: wall time (whole process) and peak memory per scenario.

    .venv/bin/python bench/bench_sim.py            # all scenarios
    .venv/bin/python bench/bench_sim.py gavel      # the ones whose name contains 'gavel'

Prints a table and writes bench/results/sim.json. Needs ../shared/traces for the real traces.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from common import LOADMASTER, SHARED, measure, print_table, write_results

GAVEL = SHARED / "gavel-msr" / "generated_1000jobs_lam240_seed0.trace"
GAVEL_CLUSTER = "9x4:v100,9x4:p100,9x4:k80"
PHILLY = SHARED / "philly" / "philly_sample_cluster_job_log.json"
ALIBABA = SHARED / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"


def scenarios(tmp: Path) -> list[tuple[str, list[str], dict[str, Any]]]:
    synth = tmp / "philly_like_117k.csv"
    sim = [*LOADMASTER, "sim", "run", "--json"]
    return [
        ("gavel-1000 fifo", [*sim, "--trace", str(GAVEL), "--cluster", GAVEL_CLUSTER, "--policy", "fifo",
                             "--out", str(tmp / "g1")], {"target_s": 0.5}),
        ("gavel-1000 fifo --no-plots", [*sim, "--trace", str(GAVEL), "--cluster", GAVEL_CLUSTER, "--policy",
                                        "fifo", "--no-plots", "--out", str(tmp / "g2")], {"target_s": 0.5}),
        ("gavel-1000 fair", [*sim, "--trace", str(GAVEL), "--cluster", GAVEL_CLUSTER, "--policy", "fair",
                             "--out", str(tmp / "g3")], {}),
        ("philly-sample-4206 fifo", [*sim, "--trace", str(PHILLY), "--cluster", "philly", "--policy", "fifo",
                                     "--out", str(tmp / "p1")], {"target_s": 5.0}),
        ("philly-sample-4206 fair", [*sim, "--trace", str(PHILLY), "--cluster", "philly", "--policy", "fair",
                                     "--out", str(tmp / "p2")], {"target_s": 5.0}),
        ("alibaba-8152 fifo", [*sim, "--trace", str(ALIBABA), "--cluster", "alibaba", "--policy", "fifo",
                               "--out", str(tmp / "a1")], {"target_s": 5.0}),
        ("synth philly 117k", [*LOADMASTER, "trace", "synth", "--like", "philly", "--jobs", "117000",
                               "--seed", "0", "--out", str(synth)], {}),
        ("philly-like-117k fifo", [*sim, "--trace", str(synth), "--cluster", "philly", "--policy", "fifo",
                                   "--out", str(tmp / "s1")], {"target_s": 30.0, "target_mb": 2048}),
        ("philly-like-117k fair", [*sim, "--trace", str(synth), "--cluster", "philly", "--policy", "fair",
                                   "--out", str(tmp / "s2")], {"target_s": 30.0, "target_mb": 2048}),
    ]


def main(selector: str = "") -> None:
    if not SHARED.exists():
        sys.exit(f"bench needs the real traces in {SHARED}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, argv, targets in scenarios(Path(d)):
            if selector not in name and not name.startswith("synth"):
                continue
            m = measure(name, argv)
            summary = m.json() or {}
            row: dict[str, Any] = {"scenario": name, "wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb,
                                   "ok": m.returncode == 0, **targets}
            for k in ("jobs", "completed", "failed", "avg_jct_s", "avg_queue_delay_s", "gpu_utilization",
                      "max_rho", "preemptions", "wall_time_s"):
                if k in summary:
                    row[k] = summary[k]
            if "target_s" in targets:
                row["meets_time"] = m.wall_s <= targets["target_s"]
            if "target_mb" in targets:
                row["meets_mem"] = m.peak_rss_mb <= targets["target_mb"]
            rows.append(row)
    print_table(rows, ["scenario", "wall_s", "peak_rss_mb", "target_s", "meets_time", "jobs", "avg_jct_s",
                       "gpu_utilization", "wall_time_s"])
    print(f"wrote {write_results('sim', rows)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
