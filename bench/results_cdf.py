"""A CDF of one jobs.csv column (rho, jct_s, ...) over the runs of a `loadmaster sim compare` folder.

    .venv/bin/python bench/results_cdf.py runs/themis-gavel-36v100 docs/figures/themis_rho_cdf_gavel_v100.png

For docs/results.md: a chosen subset of runs (`--skip`), the maximum in the legend, and for rho the whole
range. `sim compare` writes a rho_cdf.png too, but its CDF helper (shared with the JCT and queueing-delay
plots, whose values are seconds) draws every value below 1 at 1; for rho, the part below 1 (a job that did
better than on its private 1/N share) is most of the jobs.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

LABELS = {"rho": "finish-time fairness rho = JCT / T_ideal (log)", "jct_s": "job completion time (h, log)"}
SCALE = {"jct_s": 1 / 3600}


def values(jobs_csv: Path, column: str) -> list[float]:
    with jobs_csv.open(newline="") as f:
        return [float(row[column]) for row in csv.DictReader(f) if row[column] not in ("", "nan")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a `sim compare --out` folder (one subfolder per run)")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--column", default="rho", help="a jobs.csv column: rho (default), jct_s, ...")
    parser.add_argument("--title", default="")
    parser.add_argument("--skip", default="", help="comma-separated run folders to leave out (e.g. fair_pack)")
    args = parser.parse_args()

    skip = set(args.skip.split(","))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for run in sorted(p for p in args.runs.iterdir() if (p / "jobs.csv").exists() and p.name not in skip):
        x = np.sort(np.asarray(values(run / "jobs.csv", args.column), dtype=float)) * SCALE.get(args.column, 1.0)
        x = x[x > 0]
        y = np.arange(1, x.size + 1) / x.size
        ax.step(x, y, where="post", label=f"{run.name.replace('_', '/')} (mean {x.mean():.3g}, max {x[-1]:.3g})")
    if args.column == "rho":
        ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set(xscale="log", xlabel=LABELS.get(args.column, args.column), ylabel="fraction of jobs",
           title=args.title or f"{args.column} CDF: {args.runs}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100, metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
