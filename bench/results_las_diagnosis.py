"""docs/results.md section 9: why LAS gains less over head-of-line FIFO than Tiresias reports, one knob at a time.

    .venv/bin/python bench/results_las_diagnosis.py [--jobs 3000] [--load 2.0] [--seed 0]

The workload is `trace synth --like philly --jobs N --cluster 16x8 --load L --seed S` (128 GPUs, no CPU
requests), replayed with pack placement. Each row changes one thing against `las` with the defaults
(checkpoints every 900 s of work, a 30 s restart): Tiresias' three thresholds, no starvation guard, free
preemption (as Tiresias' simulator), displacement at any time, and defragmentation by migration.
Writes bench/results/results_las_diagnosis.json.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.policies.las import LasPolicy
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.metrics import summarize
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.quotas import quotas_by_demand
from loadmaster.sim.simulator import SimConfig, Simulator
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize
from results_common import KEYS, save

# (label, policy, checkpoint interval, restart overhead, migrate)
Variant = tuple[str, Policy, float, float, bool]


def variants() -> list[Variant]:
    return [
        ("fifo-strict", make_policy("fifo-strict"), 900.0, 30.0, False),
        ("fifo-strict + migrate", make_policy("fifo-strict"), 900.0, 30.0, True),
        ("fifo (backfill)", make_policy("fifo"), 900.0, 30.0, False),
        ("las (defaults)", LasPolicy(), 900.0, 30.0, False),
        ("las, Tiresias' 3 thresholds", LasPolicy(thresholds=(3250, 7200, 18000)), 900.0, 30.0, False),
        ("las, no starvation guard", LasPolicy(starve_factor=None), 900.0, 30.0, False),
        ("las, free preemption", LasPolicy(max_loss_s=None, checkpoint_interval_s=1.0, restart_overhead_s=0.0),
         1.0, 0.0, False),
        ("las, displaced any time", LasPolicy(max_loss_s=None), 900.0, 30.0, False),
        ("las + migrate", LasPolicy(), 900.0, 30.0, True),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--load", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated labels to run (default: all)")
    args = ap.parse_args()
    cluster = load_cluster("16x8")
    workload = synthesize("philly", args.jobs, args.seed, cluster=cluster, load=args.load)
    quotas = quotas_by_demand(workload, cluster.total_gpus)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    rows: list[dict[str, Any]] = []
    for label, policy, ckpt, restart, migrate in variants():
        if only and label not in only:
            continue
        started = time.perf_counter()
        sim = Simulator(cluster, policy, make_placer("pack"), FailureModel(seed=args.seed), PerformanceModel(cluster),
                        SimConfig(ckpt, restart, None, args.seed, migrate), quotas)
        result = sim.run(workload)
        wall = time.perf_counter() - started
        summary = summarize(result, wall)
        row = {"variant": label, **{k: summary[k] for k in KEYS}, "migrations": summary.get("migrations", 0)}
        rows.append(row)
        print(f"{label:32s} avg JCT {row['avg_jct_s']:>12,.0f} s  p50 {row['p50_jct_s']:>10,.0f}  "
              f"util {row['gpu_utilization']:.3f}  preemptions {row['preemptions']:>6}  "
              f"migrations {row['migrations']:>5}  frag delay {row['fragmentation_delay_s']:>9,.0f}  {wall:.0f} s",
              flush=True)
    save("results_las_diagnosis", {"jobs": args.jobs, "load": args.load, "seed": args.seed, "cluster": "16x8",
                                   "placement": "pack"}, rows)


if __name__ == "__main__":
    main()
