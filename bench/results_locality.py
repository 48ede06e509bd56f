"""docs/results.md item 5: locality-strict vs locality (relaxed) vs pack on the Philly sample, by cluster size.

    .venv/bin/python bench/results_locality.py      # 1-2 min

The Philly sample (4,206 multi-GPU jobs with their recorded attempts, ../shared/traces/philly) under FIFO on
Philly's own cluster and on smaller homogeneous clusters of 8-GPU servers (racks of 16), so that it queues.
Besides the summaries, each row has `gpu_hours_beyond_work`: GPU-hours held minus the work itself (GPUs x
(last runtime + failed attempts)), i.e. what cross-server and cross-rack slowdown cost (plus the same restart
overheads for every placer). Writes bench/results/results_locality.json and
docs/figures/locality_delay_split.png.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from common import RESULTS, ROOT, SHARED
from loadmaster.sim.experiment import RunOutcome
from loadmaster.traces import load_cluster, load_workload
from results_common import FIGURES, run_pairs, save

PHILLY = SHARED / "philly" / "philly_sample_cluster_job_log.json"
PLACEMENTS = ("locality-strict", "locality", "pack")


def beyond_work(outcome: RunOutcome) -> dict[str, Any]:
    work_h = sum(r.spec.learners * r.spec.gpus_per_learner * (r.spec.duration_s + sum(r.spec.failed_attempts_s))
                 for r in outcome.result.records if r.finished) / 3600
    return {"gpu_hours_beyond_work": outcome.summary["gpu_hours"] - work_h}


def plot(rows: list[dict[str, Any]], clusters: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    def row(cluster: str, placement: str) -> dict[str, Any]:
        return next(r for r in rows if r["cluster"] == cluster and r["placement"] == placement)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.4]})
    for placement in PLACEMENTS:
        left.plot(clusters, [row(c, placement)["avg_jct_s"] / 3600 for c in clusters], marker="o", label=placement)
    left.set(yscale="log", ylabel="average JCT (h, log)", xlabel="cluster", title="Philly sample, FIFO: average JCT")
    left.yaxis.set_major_formatter(ScalarFormatter())
    left.yaxis.set_minor_formatter(ScalarFormatter())
    left.grid(alpha=0.3)
    left.legend()

    queued = [c for c in clusters if any(row(c, p)["avg_total_wait_s"] > 0 for p in PLACEMENTS)]
    width = 0.27
    parts = (("no_capacity", "no capacity", "#9e9e9e"), ("fragmentation", "fragmentation", "#1f77b4"),
             ("locality_wait", "waiting for locality", "#d62728"))
    for i, placement in enumerate(PLACEMENTS):
        xs = [k + (i - 1) * width for k in range(len(queued))]
        bottom = [0.0] * len(queued)
        for reason, label, color in parts:
            shares = []
            for cluster in queued:
                waits = row(cluster, placement)["wait_by_reason_s"]
                shares.append(waits.get(reason, 0.0) / max(sum(waits.values()), 1e-9))
            right.bar(xs, shares, width, bottom=bottom, color=color, edgecolor="white",
                      label=label if i == 0 else None)
            bottom = [b + h for b, h in zip(bottom, shares, strict=True)]
        for x, cluster in zip(xs, queued, strict=True):
            hours = row(cluster, placement)["avg_total_wait_s"] / 3600
            tag = {"locality-strict": "S", "locality": "R", "pack": "P"}[placement]
            label = f"{tag}\n{hours:.2g}" if hours < 10 else f"{tag}\n{hours:.0f}"
            right.text(x, 1.01, label, ha="center", va="bottom", fontsize=7)
    right.set_xticks(range(len(queued)), queued)
    right.set(ylim=(0, 1.18), ylabel="share of waiting", title="why jobs waited",
              xlabel="cluster (S strict, R relaxed, P pack; above: avg wait per job, h)")
    right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / "locality_delay_split.png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="philly,96x8,80x8,72x8,64x8,56x8")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from the saved JSON")
    args = parser.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / "results_locality.json").read_text())
        plot(saved["rows"], saved["config"]["clusters"])
        return
    if not PHILLY.exists():
        raise SystemExit(f"needs the Philly sample at {PHILLY}")

    workload = load_workload(str(PHILLY), "auto")
    clusters = [c for c in args.clusters.split(",") if c]
    rows: list[dict[str, Any]] = []
    for spec in clusters:
        rows += run_pairs(workload, load_cluster(spec), [("fifo", p) for p in PLACEMENTS], beyond_work,
                          cluster=spec)
    config = {"trace": f"../{PHILLY.relative_to(ROOT.parent)}", "clusters": clusters, "policy": "fifo",
              "placements": PLACEMENTS}
    print(f"wrote {save('results_locality', config, rows)}")
    if not args.no_plots:
        plot(rows, clusters)


if __name__ == "__main__":
    main()
