"""A Synergy-style workload (CPU-sensitive and CPU-insensitive jobs) as a canonical CSV.

Synergy (Mohan et al., OSDI'22) shows that jobs differ in how many CPUs per GPU they benefit from, and that
giving each its want instead of a GPU-proportional share shortens the average JCT. This workload mixes the
two extremes of loadmaster's profiles (core/profiles.py): ResNet-18 (image family: wants 6 CPUs per GPU,
cpu_sensitivity 0.9) and Transformer (language family: wants 1.5, sensitivity 0.15), for Synergy's server
(8 GPUs, 24 CPUs, 500 GB; `--cluster 16x8` gives 16 of them). The choices below are assumptions:
- model: ResNet-18 with probability `--image-share` (default 0.5), else Transformer;
- GPUs: 1, 2, 4 or 8 with probabilities 0.70, 0.10, 0.15, 0.05 (Gavel's Philly scale factors,
  docs/workloads.md "gavel-gen"), as one learner (a job of up to 8 GPUs fits one server, as in
  `trace synth`);
- request: the GPU-proportional share of that server (3 CPUs and 62.5 GB per GPU), what a user who does
  not know better asks for; pack honours it, proportional gives the same, synergy replaces it;
- duration (alone, at the request: the proportional share): lognormal, median 1 h, sigma 1.0, clipped to
  [5 min, 24 h] (docs/performance-model.md: a recorded runtime is the runtime at the request);
- arrivals: Poisson, at the rate that offers `--load` of the cluster's GPU-time at the requested CPUs
  (default 0.8);
- `--single-gpu`: every job has 1 GPU, as in Synergy's own simulations (msr-fiddle/synergy
  `simulator/helpers/parse_philly_trace_full.py` sets `gpu_demand = 1` unless `multigpu`, and its runner's
  default is `multigpu=False`). The sizes are still drawn, so the other draws match the default workload's.

    .venv/bin/python bench/workload_synergy.py --out runs/synergy.csv --seed 0
    loadmaster sim compare --trace runs/synergy.csv --cluster 16x8 --policy fifo \
        --placement proportional,synergy --out runs/synergy
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from loadmaster.core.job import JobSpec
from loadmaster.traces.canonical import write_csv

CLUSTER_GPUS = 16 * 8
CPUS_PER_GPU = 24 / 8  # the GPU-proportional share on Synergy's server
MEM_GB_PER_GPU = 500 / 8
SIZES = (1, 2, 4, 8)
SIZE_P = (0.70, 0.10, 0.15, 0.05)


def generate(jobs: int, seed: int, load: float, image_share: float, single_gpu: bool = False) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    image = rng.random(jobs) < image_share
    gpus = rng.choice(SIZES, size=jobs, p=SIZE_P)
    if single_gpu:
        gpus = np.ones_like(gpus)
    duration = np.clip(np.round(rng.lognormal(np.log(3600.0), 1.0, size=jobs)), 300, 86400)
    span = float((gpus * duration).sum()) / (CLUSTER_GPUS * load)
    submit = np.sort(np.round(rng.uniform(0, span, size=jobs)))
    return [
        JobSpec(job_id=f"syn-{i}", tenant="default", submit_time_s=float(submit[i]), learners=1,
                gpus_per_learner=int(gpus[i]), cpus_per_learner=CPUS_PER_GPU * int(gpus[i]),
                mem_gb_per_learner=MEM_GB_PER_GPU * int(gpus[i]), duration_s=float(duration[i]),
                model="ResNet-18" if image[i] else "Transformer")
        for i in range(jobs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--image-share", type=float, default=0.5)
    parser.add_argument("--single-gpu", action="store_true", help="every job 1 GPU (Synergy's simulations)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    written = write_csv(generate(args.jobs, args.seed, args.load, args.image_share, args.single_gpu), args.out)
    print(f"wrote {written} jobs to {args.out}")


if __name__ == "__main__":
    main()
