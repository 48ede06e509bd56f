"""docs/results.md section 11: Themis with migration (`--migrate on`) on Gavel's trace at twice its rate.

    .venv/bin/python bench/results_themis_migrate.py --draws 1,2,3   # ~1 min; bench/results/results_themis_migrate.json

Themis (600 s leases) with migration on and off, on the trace as given (submit times halved) and on re-drawn
Poisson arrivals (bench/results_gavel_het.py's `arrivals`), Gavel's 108 GPUs, pack placement, 900 s
checkpoints and 30 s restarts. Run it on an older commit for the figures before a change to the simulator's
migration (the re-auction with an empty queue, issue 13).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.metrics import summarize
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.quotas import quotas_by_demand
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces import load_cluster, load_workload
from results_common import save
from results_gavel_het import arrivals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    args = parser.parse_args()
    cluster = load_cluster("9x4:v100,9x4:p100,9x4:k80")
    base = load_workload("sample:gavel")
    rows: list[dict[str, Any]] = []
    print(f"{'arrivals':8s} {'migrate':7s} {'avg JCT s':>10s} {'util':>6s} {'max rho':>7s} {'preempt':>7s} "
          f"{'moves':>5s} {'GPU-h moving':>12s} {'CPU s':>6s}")
    for draw in [None, *args.draws]:
        workload = arrivals(base, draw)
        quotas = quotas_by_demand(workload, cluster.total_gpus)
        for migrate in (False, True):
            started = time.process_time()
            sim = Simulator(cluster, ThemisPolicy(), make_placer("pack"), FailureModel(seed=0),
                            PerformanceModel(cluster), SimConfig(migrate=migrate), quotas)
            summary = summarize(sim.run(workload), 0.0)
            row = {"draw": draw, "migrate": migrate, "avg_jct_s": summary["avg_jct_s"],
                   "gpu_utilization": summary["gpu_utilization"], "max_rho": summary["max_rho"],
                   "preemptions": summary["preemptions"], "migrations": summary.get("migrations", 0),
                   "gpu_hours_lost_to_migration": summary.get("gpu_hours_lost_to_migration", 0.0),
                   "cpu_s": time.process_time() - started}
            rows.append(row)
            print(f"{'trace' if draw is None else f'draw {draw}':8s} {'on' if migrate else 'off':7s} "
                  f"{row['avg_jct_s']:>10,.0f} {row['gpu_utilization']:>6.3f} {row['max_rho']:>7.2f} "
                  f"{row['preemptions']:>7} {row['migrations']:>5} {row['gpu_hours_lost_to_migration']:>12.1f} "
                  f"{row['cpu_s']:>6.1f}", flush=True)
    save("results_themis_migrate", {"trace": "sample:gavel, submit times halved; draws: Poisson arrivals, 120 s mean",
                                    "draws": args.draws, "cluster": "9x4:v100,9x4:p100,9x4:k80",
                                    "placement": "pack", "policy": "themis (600 s leases)"}, rows)


if __name__ == "__main__":
    main()
