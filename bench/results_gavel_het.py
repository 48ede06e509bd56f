"""docs/results.md section 11: heterogeneity-aware policies on Gavel's trace at twice its arrival rate.

    .venv/bin/python bench/results_gavel_het.py                  # every variant on the trace as given
    .venv/bin/python bench/results_gavel_het.py --draws 1,2,3    # and the main policies on re-drawn arrivals

Gavel's 1,000-job trace (sample:gavel, generated_1000jobs_lam240_seed0) with every submit time halved, on
Gavel's 108-GPU cluster (9x4 each of v100, p100, k80), pack placement, the simulator's defaults (900 s
checkpoints, 30 s restarts). Gavel reports 23,239 s avg JCT for its heterogeneity-aware LAS there.
--draws: the same 1,000 jobs in the same order with Poisson arrivals re-drawn (seed S, 120 s mean gap: Gavel's
lam=240 at twice the rate), so a policy's gain is checked on more than one arrival sequence.
Writes bench/results/results_gavel_het.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.policies.las_gavel import GavelLasPolicy
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.metrics import summarize
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.quotas import quotas_by_demand
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces import load_cluster, load_workload
from results_common import KEYS, save

GAVEL_HET_LAS_S = 23_239.0
# The variants run on every re-drawn arrival sequence (--draws).
ON_DRAWS = ("las-het", "themis", "las-gavel", "las-gavel, min speed 0.3", "las-gavel, min speed 0.35",
            "las-gavel, offered fastest first")


def variants() -> list[tuple[str, Policy, bool]]:
    return [
        ("fifo-strict", make_policy("fifo-strict"), False),
        ("las", LasPolicy(), False),
        ("las-het", HetLasPolicy(), False),
        ("las-het, Tiresias' 3 thresholds", HetLasPolicy(thresholds=(3250, 7200, 18000)), False),
        ("las-het, no starvation guard", HetLasPolicy(starve_factor=None), False),
        ("themis", ThemisPolicy(), False),
        ("themis, fairness knob 0", ThemisPolicy(fairness_knob=0.0), False),
        ("themis, fairness knob 0.5", ThemisPolicy(fairness_knob=0.5), False),
        ("themis + migrate", ThemisPolicy(), True),
        ("themis, 300 s leases", ThemisPolicy(lease_s=300), False),
        ("themis, 1,200 s leases", ThemisPolicy(lease_s=1200), False),
        ("themis, 1,800 s leases", ThemisPolicy(lease_s=1800), False),
        ("themis, 3,600 s leases", ThemisPolicy(lease_s=3600), False),
        ("themis, free preemption (not realistic)",
         ThemisPolicy(checkpoint_interval_s=1.0, restart_overhead_s=0.0), False),
        ("las-gavel", GavelLasPolicy(), False),
        ("las-gavel, min speed 0.2", GavelLasPolicy(min_speed=0.2), False),
        ("las-gavel, min speed 0.3", GavelLasPolicy(min_speed=0.3), False),
        ("las-gavel, min speed 0.35", GavelLasPolicy(min_speed=0.35), False),
        ("las-gavel, min speed 0.5", GavelLasPolicy(min_speed=0.5), False),
        ("las-gavel, offered fastest first", GavelLasPolicy(advantage=False), False),
    ]


def arrivals(base: Workload, draw: int | None) -> Workload:
    """The trace at twice its rate: submit times halved (draw None), or Poisson arrivals re-drawn."""
    if draw is None:
        jobs = [dataclasses.replace(j, submit_time_s=j.submit_time_s / 2) for j in base.jobs]
    else:
        gaps = np.random.default_rng(draw).exponential(120.0, len(base.jobs))
        gaps[0] = 0.0
        times = np.floor(np.cumsum(gaps)).tolist()
        jobs = [dataclasses.replace(j, submit_time_s=t) for j, t in zip(base.jobs, times, strict=True)]
    return Workload(jobs, base.report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    args = parser.parse_args()
    cluster = load_cluster("9x4:v100,9x4:p100,9x4:k80")
    base = load_workload("sample:gavel")
    rows: list[dict[str, Any]] = []
    for draw in [None, *args.draws]:
        workload = arrivals(base, draw)
        quotas = quotas_by_demand(workload, cluster.total_gpus)
        for label, policy, migrate in variants():
            if draw is not None and label not in ON_DRAWS:
                continue
            started = time.perf_counter()
            free = "free preemption" in label  # the simulator charges what the policy assumes
            cfg = SimConfig(1.0, 0.0, migrate=migrate) if free else SimConfig(migrate=migrate)
            sim = Simulator(cluster, policy, make_placer("pack"), FailureModel(seed=0), PerformanceModel(cluster),
                            cfg, quotas)
            summary = summarize(sim.run(workload), time.perf_counter() - started)
            row = {"variant": label, "draw": draw, **{k: summary[k] for k in KEYS},
                   "migrations": summary.get("migrations", 0)}
            rows.append(row)
            print(f"{'trace' if draw is None else f'draw {draw}':7s} {label:34s} avg JCT {row['avg_jct_s']:>9,.0f} s "
                  f"({row['avg_jct_s'] / GAVEL_HET_LAS_S:.3f} of Gavel's het-aware LAS)  "
                  f"util {row['gpu_utilization']:.3f}  max rho {row['max_rho']:.2f}  "
                  f"preemptions {row['preemptions']:>5}  {row['wall_time_s']:.0f} s", flush=True)
    save("results_gavel_het", {"trace": "sample:gavel, submit times halved; draws: Poisson arrivals, 120 s mean",
                               "draws": args.draws, "cluster": "9x4:v100,9x4:p100,9x4:k80", "placement": "pack"},
         rows)


if __name__ == "__main__":
    main()
