"""docs/results.md section 10: heterogeneity-aware policies on Gavel's trace at twice its arrival rate.

    .venv/bin/python bench/results_gavel_het.py

Gavel's 1,000-job trace (sample:gavel, generated_1000jobs_lam240_seed0) with every submit time halved, on
Gavel's 108-GPU cluster (9x4 each of v100, p100, k80), pack placement, the simulator's defaults (900 s
checkpoints, 30 s restarts). Gavel reports 23,239 s avg JCT for its heterogeneity-aware LAS there.
Writes bench/results/results_gavel_het.json.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from loadmaster.core.workload import Workload
from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.metrics import summarize
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.quotas import quotas_by_demand
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces import load_cluster, load_workload
from results_common import KEYS, save

GAVEL_HET_LAS_S = 23_239.0


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
    ]


def main() -> None:
    cluster = load_cluster("9x4:v100,9x4:p100,9x4:k80")
    base = load_workload("sample:gavel")
    jobs = [dataclasses.replace(j, submit_time_s=j.submit_time_s / 2) for j in base.jobs]
    workload = Workload(jobs, base.report)
    quotas = quotas_by_demand(workload, cluster.total_gpus)
    rows: list[dict[str, Any]] = []
    for label, policy, migrate in variants():
        started = time.perf_counter()
        free = "free preemption" in label  # the simulator charges what the policy assumes
        cfg = SimConfig(1.0, 0.0, migrate=migrate) if free else SimConfig(migrate=migrate)
        sim = Simulator(cluster, policy, make_placer("pack"), FailureModel(seed=0), PerformanceModel(cluster), cfg,
                        quotas)
        summary = summarize(sim.run(workload), time.perf_counter() - started)
        row = {"variant": label, **{k: summary[k] for k in KEYS}, "migrations": summary.get("migrations", 0)}
        rows.append(row)
        print(f"{label:34s} avg JCT {row['avg_jct_s']:>9,.0f} s ({row['avg_jct_s'] / GAVEL_HET_LAS_S:.3f} of Gavel's "
              f"het-aware LAS)  util {row['gpu_utilization']:.3f}  max rho {row['max_rho']:.2f}  "
              f"preemptions {row['preemptions']:>5}  {row['wall_time_s']:.0f} s", flush=True)
    save("results_gavel_het", {"trace": "sample:gavel, submit times halved", "cluster": "9x4:v100,9x4:p100,9x4:k80",
                               "placement": "pack"}, rows)


if __name__ == "__main__":
    main()
