"""docs/results.md item 4: synergy vs proportional CPU/memory allocation over loads, job mixes and seeds.

    .venv/bin/python bench/results_synergy.py             # 2-5 min; the 6,000-job --window runs 10-25 min
    .venv/bin/python bench/results_synergy.py --what-if   # adds the sensitivity check described below

The workload is bench/workload_synergy.py's (ResNet-18 image jobs and Transformer language jobs, 2,000 jobs,
requests at the proportional share) on `--cluster 16x8` (Synergy's server: 8 GPUs, 24 CPUs, 500 GB), FIFO.
Besides the summaries, each row splits the average JCT into running time and waiting, per family: how much
slower than `duration_s` (its runtime at its request, the proportional share) a family's jobs ran (`stretch`;
below 1 where synergy gave them more CPUs than they asked for).

`--what-if` repeats the image-share 0.5 runs with the image family's profile replaced, in this process only,
by Synergy's own ResNet-18 numbers (9 CPUs per GPU; 2.4x faster at 9 CPUs than at the proportional 3, from
msr-fiddle/synergy `simulator/jobs/model.py` `use_real_scores`; as a power law (3/9)^s = 1/2.4, s = 0.797).
It does not change loadmaster's model; it shows how much of the gap to Synergy's 3.4x the profile explains.
`--single-gpu` makes every job 1 GPU, as Synergy's simulations do (see bench/workload_synergy.py).

`--jobs 6000 --window 4000,5000` measures, as Synergy's simulator does (msr-fiddle/synergy
`simulator/runner.py`: `series_id_filter=(4000, 5000)`), the average JCT of jobs 4,000 to 4,999 of a longer
stream, once the queue has had 4,000 arrivals to build up.

Writes bench/results/results_synergy.json and docs/figures/synergy_ratio_vs_load.png; with --single-gpu or
--window, the names end in _1gpu and/or _window.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from loadmaster.core import profiles
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.sim.experiment import RunOutcome
from loadmaster.traces import load_cluster
from results_common import FIGURES, ratio, run_pairs, save
from workload_synergy import generate

PAIRS = [("fifo", "proportional"), ("fifo", "synergy")]
RES18_CPUS_PER_GPU = 9.0  # Synergy use_real_scores: res18 cpu_per_gpu = DEFAULT_CPU * 3
RES18_SPEEDUP = 2.4  # ... speedup = 2.4 at that allocation over the GPU-proportional 3 CPUs per GPU


@contextmanager
def image_profile(cpus_per_gpu: float, sensitivity: float) -> Iterator[None]:
    """Swap the image family's profile for the duration of a block (placer and performance model both read
    it through family_of), and put the original back."""
    original = profiles.PROFILES["image"]
    profiles.PROFILES["image"] = replace(original, cpus_per_gpu=cpus_per_gpu, cpu_sensitivity=sensitivity)
    try:
        yield
    finally:
        profiles.PROFILES["image"] = original


def by_family(outcome: RunOutcome, window: tuple[int, int] | None = None) -> dict[str, Any]:
    """Per family: jobs, mean JCT, mean wait, and the mean stretch (running time / duration_s); with a window,
    the mean JCT of the jobs whose arrival index (workload_synergy's `syn-<i>`) lies in it."""
    out: dict[str, Any] = {}
    if window is not None:
        jcts = [r.jct_s or 0.0 for r in outcome.result.records
                if window[0] <= int(r.spec.job_id.removeprefix("syn-")) < window[1]]
        out["window_avg_jct_s"] = sum(jcts) / max(len(jcts), 1)
    for family in ("image", "language"):
        recs = [r for r in outcome.result.records
                if r.jct_s is not None and profiles.family_of(r.spec.model).family == family]
        runs = [(r.jct_s or 0.0) - r.total_wait_s for r in recs]
        stretch = [run / r.spec.duration_s for run, r in zip(runs, recs, strict=True)]
        n = max(len(recs), 1)
        out[family] = {
            "jobs": len(recs),
            "avg_jct_s": sum(r.jct_s or 0.0 for r in recs) / n,
            "avg_wait_s": sum(r.total_wait_s for r in recs) / n,
            "avg_run_s": sum(runs) / n,
            "avg_stretch": sum(stretch) / n,
            "full_speed_share": sum(1 for s in stretch if s <= 1.001) / n,
        }
    return out


def sweep(cluster_spec: str, jobs: int, loads: list[float], shares: list[float], seeds: list[int],
          profile: str, window: tuple[int, int] | None, single_gpu: bool) -> list[dict[str, Any]]:
    cluster = load_cluster(cluster_spec)

    def measure(outcome: RunOutcome) -> dict[str, Any]:
        return by_family(outcome, window)

    rows: list[dict[str, Any]] = []
    for share in shares:
        for load in loads:
            for seed in seeds:
                specs = generate(jobs, seed, load, share, single_gpu)
                workload = Workload(specs, LoadReport("bench/workload_synergy.py"))
                rows += run_pairs(workload, cluster, PAIRS, measure, load=load, image_share=share, seed=seed,
                                  profile=profile)
    return rows


def plot(rows: list[dict[str, Any]], key: str, name: str, what: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    curves = sorted({(r["profile"], r["image_share"]) for r in rows})
    for profile, share in curves:
        loads = sorted({r["load"] for r in rows if r["profile"] == profile and r["image_share"] == share})
        mean, low, high = [], [], []
        for load in loads:
            seeds = sorted({r["seed"] for r in rows if r["profile"] == profile and r["image_share"] == share
                            and r["load"] == load})
            rs = [ratio(rows, key, "fifo/proportional", "fifo/synergy", load=load, image_share=share,
                        seed=s, profile=profile) for s in seeds]
            mean.append(sum(rs) / len(rs))
            low.append(min(rs))
            high.append(max(rs))
        style = "-" if profile == "loadmaster" else "--"
        line = ax.plot(loads, mean, style, marker="o", label=f"image share {share:g} ({profile} profile)")[0]
        ax.fill_between(loads, low, high, color=line.get_color(), alpha=0.15)
    ax.axhline(3.4, color="grey", linestyle=":", label="Synergy's best reported (3.4x)")
    ax.set(xlabel="offered load (at full speed)", ylabel=f"{what}: proportional / synergy",
           title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURES / name, dpi=100, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--cluster", default="16x8")
    parser.add_argument("--loads", default="0.5,0.6,0.7,0.8,0.9")
    parser.add_argument("--image-shares", default="0.3,0.5,0.7")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--single-gpu", action="store_true", help="every job 1 GPU (Synergy's simulations)")
    parser.add_argument("--window", default="", help="e.g. 4000,5000: also average the JCT of these jobs only")
    parser.add_argument("--what-if", action="store_true", help="also run Synergy's ResNet-18 profile (share 0.5)")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args()

    loads = [float(x) for x in args.loads.split(",")]
    shares = [float(x) for x in args.image_shares.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    window = (int(args.window.split(",")[0]), int(args.window.split(",")[1])) if args.window else None
    rows = sweep(args.cluster, args.jobs, loads, shares, seeds, "loadmaster", window, args.single_gpu)
    if args.what_if:
        sensitivity = math.log(RES18_SPEEDUP) / math.log(RES18_CPUS_PER_GPU / 3.0)
        with image_profile(RES18_CPUS_PER_GPU, sensitivity):
            rows += sweep(args.cluster, args.jobs, loads, [0.5], seeds, "synergy-res18", window, args.single_gpu)
    config = {"jobs": args.jobs, "cluster": args.cluster, "loads": loads, "image_shares": shares, "seeds": seeds,
              "pairs": PAIRS, "what_if": args.what_if, "window": window,
              "single_gpu": args.single_gpu}
    suffix = ("_1gpu" if args.single_gpu else "") + ("_window" if window else "")
    print(f"wrote {save('results_synergy' + suffix, config, rows)}")
    if not args.no_plots:
        title = f"synergy vs proportional, 16x8{', 1-GPU jobs' if args.single_gpu else ''} (band: seeds min..max)"
        if window:
            plot(rows, "window_avg_jct_s", f"synergy_ratio_vs_load{suffix}.png",
                 f"avg JCT of jobs {window[0]}-{window[1] - 1}", title)
        else:
            plot(rows, "avg_jct_s", f"synergy_ratio_vs_load{suffix}.png", "avg JCT", title)


if __name__ == "__main__":
    main()
