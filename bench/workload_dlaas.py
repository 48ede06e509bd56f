"""The DLaaS/FfDL gang-scheduling experiment's workload as a canonical CSV.

Jayaram et al. (DIDL'18) describe 4,000 jobs with 1-8 learners (avg 4.5), 1-4 GPUs per learner (avg 2.5)
and 4-16 CPUs per learner, on 100 machines of 32 CPUs, 4 GPUs and 128 GB (`--cluster 100x4:32cpu:128gb`).
They give no durations, memory or arrival process; those below are assumptions, stated here:
- memory: 8 GB per GPU of the learner (fits 4 one-GPU learners in 128 GB with room to spare);
- duration: lognormal, median 30 min, sigma 1.0, clipped to [60 s, 24 h];
- arrivals: Poisson, at the rate that offers `--load` of the cluster's GPU-time (default 0.9);
- model: none (the generic family of docs/performance-model.md), since the paper names none.

    .venv/bin/python bench/workload_dlaas.py --out runs/dlaas.csv --seed 0
    loadmaster sim compare --trace runs/dlaas.csv --cluster 100x4:32cpu:128gb --policy fifo \
        --placement pack,spread --out runs/dlaas
    # gang scheduling vs learner-at-a-time placement (the pod-at-a-time baseline), with and without a timeout
    loadmaster sim compare --trace runs/dlaas.csv --cluster 100x4:32cpu:128gb --policy fifo \
        --placement pack,spread --gang on,off --partial-timeout never,600,3600 --out runs/dlaas-gang
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from loadmaster.core.job import JobSpec
from loadmaster.traces.canonical import write_csv

CLUSTER_GPUS = 400


def generate(jobs: int, seed: int, load: float) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    learners = rng.integers(1, 9, size=jobs)  # uniform 1..8: mean 4.5
    gpus = rng.integers(1, 5, size=jobs)  # uniform 1..4: mean 2.5
    cpus = rng.integers(4, 17, size=jobs)  # uniform 4..16
    duration = np.clip(np.round(rng.lognormal(np.log(1800.0), 1.0, size=jobs)), 60, 86400)
    offered = float((learners * gpus * duration).sum())
    span = offered / (CLUSTER_GPUS * load)
    submit = np.sort(np.round(rng.uniform(0, span, size=jobs)))
    return [
        JobSpec(job_id=f"dlaas-{i}", tenant="default", submit_time_s=float(submit[i]),
                learners=int(learners[i]), gpus_per_learner=int(gpus[i]), cpus_per_learner=float(cpus[i]),
                mem_gb_per_learner=8.0 * int(gpus[i]), duration_s=float(duration[i]))
        for i in range(jobs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=0.9)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"wrote {write_csv(generate(args.jobs, args.seed, args.load), args.out)} jobs to {args.out}")


if __name__ == "__main__":
    main()
