"""docs/results.md section 9: a Philly-like workload that queues like Philly (`trace synth --vcs`), per seed, and
the policies at that scale.

    .venv/bin/python bench/results_philly_vcs.py                       # fair + locality, seeds 0,1,2
    .venv/bin/python bench/results_philly_vcs.py --seeds 0 --policies fair,fifo,las,drf,themis
    .venv/bin/python bench/results_philly_vcs.py --policies fair,fair-fifo --borrow any --shared-span
    .venv/bin/python bench/results_philly_vcs.py --load 1.3 --vc-queue 3   # closed-loop users (issue 13 item 5)
    .venv/bin/python bench/results_philly_vcs.py --load L --sim-vc-queue Q  # the users' loop in the simulator

The workload is `trace synth --like philly --jobs 30000 --cluster philly --load L --vcs --seed S`, replayed on
Philly's 2,490-GPU machine list with the VC quotas it writes (`borrow_limit: 0`; `--borrow any`: no limit, as
`--borrow-any` writes; `--shared-span`: one arrival span for every VC) and locality placement. Per
run: the queueing delay (submission to first start) by job size, median and mean, and each size's wait split
into Philly's classes (fair-share, fragmentation, capacity) from the simulator's wait reasons. Writes
bench/results/results_philly_vcs.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from loadmaster.scheduling.snapshot import TenantQuota
from loadmaster.sim.experiment import RunOptions, RunOutcome, simulate
from loadmaster.sim.metrics import delay_classes
from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize, vc_quotas
from results_common import KEYS, save

# Philly's job sizes as the paper bins them (GPUs: label).
SIZES = ((1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, 10**9, ">8"))
PHILLY_MEDIAN_S = 180.0


def by_size(outcome: RunOutcome) -> dict[str, Any]:
    """Median and mean queueing delay per size bin, and the share of each bin's waiting that is fragmentation."""
    out: dict[str, Any] = {}
    delays: list[float] = []
    for lo, hi, label in SIZES:
        recs = [r for r in outcome.result.records if lo <= r.spec.gpus <= hi and r.first_start_s is not None]
        d = [r.first_start_s - r.spec.submit_time_s for r in recs if r.first_start_s is not None]
        delays += d
        waits = {"fair_share": 0.0, "fragmentation": 0.0, "capacity": 0.0}
        for r in recs:
            for cls, s in delay_classes(r).items():
                waits[cls] += s
        total = sum(waits.values())
        out[label] = {
            "jobs": len(d),
            "median_queue_delay_s": statistics.median(d) if d else 0.0,
            "mean_queue_delay_s": statistics.fmean(d) if d else 0.0,
            **{f"{k}_share": (v / total if total else 0.0) for k, v in waits.items()},
        }
    q = statistics.quantiles(delays, n=20) if len(delays) > 1 else [0.0] * 19
    return {"median_queue_delay_s": statistics.median(delays) if delays else 0.0, "p25_queue_delay_s": q[4],
            "p75_queue_delay_s": q[14],
            "p90_queue_delay_s": q[17], "queue_delay_quantiles_s": q,
            "waited_share": sum(1 for d in delays if d > 0) / len(delays) if delays else 0.0, "by_size": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30000)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--policies", default="fair")
    parser.add_argument("--placement", default="locality")
    parser.add_argument("--borrow", default="0", help="GPUs a VC may borrow beyond its quota while they are idle "
                        "(borrowed jobs are preempted when their owner needs them back): a number, or 'any' for "
                        "no limit, as Philly's VCs (default 0: fixed quotas)")
    parser.add_argument("--shared-span", action="store_true", help="every VC submits over one span (the cluster "
                        "offers --load; each VC whatever its draws add up to) instead of each its own")
    parser.add_argument("--vc-queue", type=int, default=None, help="closed-loop users: a VC's next submission "
                        "waits until it has fewer than this many jobs queued (--load is then what users intend); "
                        "default: open-loop arrivals")
    parser.add_argument("--sim-vc-queue", type=int, default=None, help="closed-loop users in the simulator "
                        "(sim run --vc-queue): a job is held back while its VC has this many jobs queued, under "
                        "whichever policy runs (--load is then what users intend); default: off")
    parser.add_argument("--name", default="results_philly_vcs", help="stem of the JSON written under bench/results")
    args = parser.parse_args()

    cluster = load_cluster("philly")
    borrow = None if args.borrow == "any" else int(args.borrow)
    quotas = {vc: TenantQuota(vc, g, borrow) for vc, g in vc_quotas("philly", cluster).items()}
    rows: list[dict[str, Any]] = []
    for seed in args.seeds:
        workload = synthesize("philly", args.jobs, seed, cluster=cluster, load=args.load, vcs=True,
                              shared_span=args.shared_span, vc_queue=args.vc_queue)
        for policy in [p for p in args.policies.split(",") if p]:
            started = time.process_time()
            outcome = simulate(workload, cluster, RunOptions(policy=policy, placement=args.placement, quotas=quotas,
                                                             vc_queue=args.sim_vc_queue))
            row = {"seed": seed, "load": args.load, "policy": policy, "placement": args.placement,
                   "borrow": args.borrow, "vc_queue": args.vc_queue, "sim_vc_queue": args.sim_vc_queue,
                   **{k: outcome.summary[k] for k in ("jobs_held_by_users", "avg_user_hold_s")
                      if k in outcome.summary},
                   **{k: outcome.summary[k] for k in KEYS}, **by_size(outcome),
                   "cpu_s": time.process_time() - started}
            rows.append(row)
            sizes = "  ".join(f"{label} {v['median_queue_delay_s']:,.0f}/{v['mean_queue_delay_s']:,.0f} "
                              f"(frag {v['fragmentation_share']:.0%})" for label, v in row["by_size"].items())
            print(f"seed {seed} load {args.load} {policy}/{args.placement}: median queueing delay "
                  f"{row['median_queue_delay_s']:,.0f} s (x{row['median_queue_delay_s'] / PHILLY_MEDIAN_S:.2f} of "
                  f"Philly's), waited {row['waited_share']:.0%}, p25 {row['p25_queue_delay_s']:,.0f}, p40-p70 "
                  f"{'/'.join(f'{x:,.0f}' for x in row['queue_delay_quantiles_s'][7:14])}, "
                  f"p75 {row['p75_queue_delay_s']:,.0f}, p90 {row['p90_queue_delay_s']:,.0f}; by size "
                  f"median/mean: {sizes}; avg JCT {row['avg_jct_s']:,.0f} s; cpu {row['cpu_s']:.0f} s", flush=True)
    path = save(args.name, {"jobs": args.jobs, "load": args.load, "cluster": "philly", "seeds": args.seeds,
                            "policies": args.policies, "placement": args.placement,
                            "quotas": f"vc_quotas, borrow {args.borrow}", "vc_queue": args.vc_queue,
                            "sim_vc_queue": args.sim_vc_queue},
                rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
