"""Simulator benchmarks of issues 2, 3 and 9: wall time (whole process), CPU time and peak memory per scenario.

    .venv/bin/python bench/bench_sim.py            # all scenarios
    .venv/bin/python bench/bench_sim.py gavel      # the ones whose name contains 'gavel'
    .venv/bin/python bench/bench_sim.py 117k       # every policy on the 117,000-job Philly-like workload

Prints a table and writes bench/results/sim.json (or sim-SELECTOR.json for a subset, so that a partial
run does not overwrite the full one). Needs ../shared/traces for the real traces.

Columns: `wall_s` is the whole process (`loadmaster sim run ... --json`: interpreter start-up, imports,
loading, simulating and writing every output), measured by the parent; `cpu_s` its user + system CPU
time (on a shared machine, what the run costs; wall_s grows with whatever else runs); `peak_rss_mb` its
ru_maxrss; `sim_s` the simulation alone (`wall_time_s` in summary.json). Targets: `target_s` applies to
wall_s, `target_sim_s` to sim_s (issue 3's Gavel figure is about the simulation), `target_mb` to memory.
Issue 9: Gavel's 1,000 jobs on its 108-GPU cluster in at most 0.5 s for the whole process, plots included
(SVG, the default), every policy; 117,000 Philly-like jobs on Philly's machine list in at most 5 s, every
policy (`meets_cpu` compares the CPU time with the same target, as the wall time on a shared machine
grows with whatever else runs).
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
POLICIES = ("fifo", "fifo-strict", "fair", "fair-fifo", "srtf", "las", "las-het", "las-gavel", "priority", "drf",
            "themis")

Scenario = tuple[str, list[str], dict[str, Any]]


def scenarios(tmp: Path) -> list[Scenario]:
    synth = tmp / "philly_like_117k.csv"
    sim = [*LOADMASTER, "sim", "run", "--json"]
    gavel = [*sim, "--trace", str(GAVEL), "--cluster", GAVEL_CLUSTER]
    out: list[Scenario] = [(f"gavel-1000 {p}", [*gavel, "--policy", p, "--out", str(tmp / f"g-{p}")],
                            {"target_s": 0.5}) for p in POLICIES]
    out += [
        ("gavel-1000 fifo --no-plots", [*gavel, "--policy", "fifo", "--no-plots", "--out", str(tmp / "g2")],
         {"target_s": 0.5}),
        ("gavel-1000 fifo --plots png", [*gavel, "--policy", "fifo", "--plots", "png", "--out", str(tmp / "g3")],
         {}),
    ]
    out += [
        ("philly-sample-4206 fifo", [*sim, "--trace", str(PHILLY), "--cluster", "philly", "--policy", "fifo",
                                     "--out", str(tmp / "p1")], {"target_s": 5.0}),
        ("philly-sample-4206 fair", [*sim, "--trace", str(PHILLY), "--cluster", "philly", "--policy", "fair",
                                     "--out", str(tmp / "p2")], {"target_s": 5.0}),
        ("alibaba-8152 fifo", [*sim, "--trace", str(ALIBABA), "--cluster", "alibaba", "--policy", "fifo",
                               "--out", str(tmp / "a1")], {"target_s": 5.0}),
        ("synth philly 117k", [*LOADMASTER, "trace", "synth", "--like", "philly", "--jobs", "117000",
                               "--seed", "0", "--out", str(synth)], {}),
    ]
    out += [(f"philly-like-117k {p} --no-plots", [*sim, "--trace", str(synth), "--cluster", "philly", "--policy", p,
                                                  "--no-plots", "--out", str(tmp / f"s-{p}")],
             {"target_s": 5.0, "target_mb": 2048}) for p in POLICIES]
    return out


def main(selector: str = "") -> None:
    if not SHARED.exists():
        sys.exit(f"bench needs the real traces in {SHARED}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        todo = scenarios(Path(d))
        names = [name for name, _, _ in todo]
        if selector in ("-h", "--help") or not any(selector in name for name in names):
            sys.exit("usage: bench_sim.py [SELECTOR]: runs the scenarios whose name contains SELECTOR (all without "
                     "one), e.g. 'gavel' or '117k fifo '; the scenarios:\n  " + "\n  ".join(names))
        # The synthetic workload is written by its own scenario: run it whenever a 117k run is selected.
        needs_synth = any(selector in name for name, _, _ in todo if name.startswith("philly-like-117k"))
        for name, argv, targets in todo:
            if selector not in name and not (name.startswith("synth") and needs_synth):
                continue
            m = measure(name, argv)
            summary = m.json() or {}
            row: dict[str, Any] = {"scenario": name, "wall_s": m.wall_s, "cpu_s": m.cpu_s,
                                   "peak_rss_mb": m.peak_rss_mb, "ok": m.returncode == 0, **targets}
            for k in ("jobs", "completed", "failed", "avg_jct_s", "avg_queue_delay_s", "gpu_utilization",
                      "max_rho", "preemptions", "wall_time_s"):
                if k in summary:
                    row[k] = summary[k]
            if "wall_time_s" in row:
                row["sim_s"] = row.pop("wall_time_s")
            if "target_s" in targets:
                row["meets_time"] = m.wall_s <= targets["target_s"]
                row["meets_cpu"] = m.cpu_s <= targets["target_s"]
            if "target_sim_s" in targets:
                row["meets_time"] = row.get("sim_s", float("inf")) <= targets["target_sim_s"]
            if "target_mb" in targets:
                row["meets_mem"] = m.peak_rss_mb <= targets["target_mb"]
            rows.append(row)
            print(f"{name}: wall {m.wall_s:.2f} s, cpu {m.cpu_s:.2f} s, sim {row.get('sim_s', float('nan')):.2f} s, "
                  f"{m.peak_rss_mb:.0f} MB", flush=True)
    print()
    print_table(rows, ["scenario", "wall_s", "cpu_s", "sim_s", "peak_rss_mb", "meets_time", "meets_cpu", "meets_mem",
                       "jobs",
                       "avg_jct_s", "preemptions"])
    stem = "sim" if not selector else f"sim-{''.join(c if c.isalnum() else '-' for c in selector)}"
    print(f"wrote {write_results(stem, rows)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
