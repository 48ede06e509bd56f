"""docs/results.md items 2 and 3 on a Philly-like workload: FIFO, LAS, SRTF, fair and Themis as the load grows.

    .venv/bin/python bench/results_philly_like.py        # about an hour on a loaded 2-core machine

The workload is `trace synth --like philly --jobs 5000 --seed S --load L --cluster-gpus 256` (same jobs as the
CLI writes), replayed on `--cluster 32x8` (256 GPUs) with pack placement. Every load runs seed 0; the other
seeds run at `--seeds-at` only, to show the spread at the headline load. Writes
bench/results/results_philly_like.json and two figures under docs/figures/.
"""

from __future__ import annotations

import argparse
from typing import Any

from loadmaster.traces import load_cluster
from loadmaster.traces.synth import synthesize
from results_common import FIGURES, ratio, run_pairs, save


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def plot(rows: list[dict[str, Any]], policies: list[str], seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIGURES.mkdir(parents=True, exist_ok=True)
    for key, scale, ylabel, name in (
        ("avg_jct_s", 1 / 3600, "average JCT (h)", "philly_like_avg_jct_vs_load.png"),
        ("max_rho", 1.0, "worst finish-time fairness (max rho, log)", "philly_like_max_rho_vs_load.png"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for policy in policies:
            pts = sorted((r["load"], r[key] * scale) for r in rows if r["policy"] == policy and r["seed"] == seed)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
        ax.set(xlabel="offered load (GPU-time offered / cluster GPU-time over the arrival span)", ylabel=ylabel,
               title=f"Philly-like, 5,000 jobs, 32x8 (seed {seed})")
        if key == "max_rho":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(FIGURES / name, dpi=100, metadata={"Software": None})
        plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--cluster", default="32x8")
    parser.add_argument("--loads", type=floats, default=[1.0, 1.5, 2.0, 3.0])
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--seeds-at", type=float, default=2.0, help="the load at which seeds after the first run")
    parser.add_argument("--policies", default="fifo,fifo-strict,las,srtf,fair,themis")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()

    cluster = load_cluster(args.cluster)
    policies = [p for p in args.policies.split(",") if p]
    points = [(load, args.seeds[0]) for load in args.loads]
    points += [(args.seeds_at, s) for s in args.seeds[1:]]
    rows: list[dict[str, Any]] = []
    for load, seed in points:
        workload = synthesize("philly", args.jobs, seed, cluster_gpus=cluster.total_gpus, load=load)
        rows += run_pairs(workload, cluster, [(p, "pack") for p in policies], load=load, seed=seed)
    config = {"jobs": args.jobs, "cluster": args.cluster, "points": points, "policies": policies,
              "placement": "pack"}
    path = save("results_philly_like", config, rows)
    print(f"wrote {path}")
    for load, seed in points:
        if "fifo" in policies and "las" in policies:
            r = ratio(rows, "avg_jct_s", "fifo/pack", "las/pack", load=load, seed=seed)
            print(f"load {load} seed {seed}: fifo/las avg JCT {r:.2f}x")
    if not args.no_plots:
        plot(rows, policies, args.seeds[0])


if __name__ == "__main__":
    main()
