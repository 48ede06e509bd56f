"""decide() latency on a 10,000-GPU cluster: 1,250 servers of 8 GPUs in 50 racks, 1,000 running jobs
holding ~89% of the GPUs, 5,000 queued, 20 tenants of Zipf-like sizes. Target: p99 <= 50 ms per policy.

    .venv/bin/python bench/bench_decide.py                 # fair, las, drf, themis (if registered)
    .venv/bin/python bench/bench_decide.py las drf -n 20   # a subset, fewer calls

Each call gets its own perturbed snapshot (built outside the timed region): a few running jobs have
finished and freed their servers, the clock has moved, new jobs have arrived. Only decide() is timed,
with the pack placer. Prints a table and writes bench/results/decide.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import numpy as np

from common import print_table, write_results
from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, TenantQuota, decide, make_placer
from loadmaster.scheduling.policies import POLICIES

SERVERS, GPUS, RACKS = 1250, 8, 50
CPUS, MEM_GB = 96.0, 768.0
TENANTS = 20
# GPUs per job and how often: Philly's mix, most jobs small, most GPU-time in the big gangs (mean ~8.9 GPUs).
SIZES = ((1, 0.30), (2, 0.10), (4, 0.15), (8, 0.25), (16, 0.10), (32, 0.07), (64, 0.03))
MODELS = ("resnet50", "transformer", "lstm", "vgg16", "dqn", "")


def make_cluster() -> Cluster:
    return Cluster(tuple(Node(f"s{i}", GPUS, CPUS, MEM_GB, rack=f"r{i % RACKS}") for i in range(SERVERS)),
                   name="bench-10k")


def tenant_names() -> list[str]:
    return [f"vc{i:02d}" for i in range(TENANTS)]


def quotas() -> dict[str, TenantQuota]:
    # Zipf-like: tenant i weighs 1/(i+1); the quotas add up to the cluster's GPUs.
    w = [1 / (i + 1) for i in range(TENANTS)]
    total = SERVERS * GPUS
    q = [int(total * x / sum(w)) for x in w]
    q[0] += total - sum(q)
    return {t: TenantQuota(t, g) for t, g in zip(tenant_names(), q, strict=True)}


def make_spec(rng: random.Random, i: int, submit: float) -> JobSpec:
    gpus = rng.choices([s for s, _ in SIZES], [p for _, p in SIZES])[0]
    learners, per = (1, gpus) if gpus <= GPUS else (gpus // GPUS, GPUS)
    names = tenant_names()
    tenant = rng.choices(names, [1 / (k + 1) for k in range(TENANTS)])[0]
    return JobSpec(job_id=f"j{i}", tenant=tenant, submit_time_s=submit, learners=learners, gpus_per_learner=per,
                   duration_s=float(int(rng.lognormvariate(8.5, 1.6)) + 60),
                   cpus_per_learner=float(per * rng.choice([2, 4, 6])), mem_gb_per_learner=float(per * 32),
                   model=rng.choice(MODELS), priority=rng.choice([0, 0, 0, 1, 2]))


class World:
    """One cluster state; snapshot() derives a perturbed snapshot from it for each timed call."""

    def __init__(self, seed: int = 0, running: int = 1000, queued: int = 5000) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.cluster = make_cluster()
        self.quotas = quotas()
        self.clock = 1_000_000.0
        # Place the running jobs with FIFO/pack on the empty cluster, as a scheduler would have.
        specs = [make_spec(rng, i, self.clock - rng.uniform(0, 500_000)) for i in range(running)]
        plan = decide(Snapshot.idle(0.0, self.cluster, tuple(JobView(s, 0.0) for s in specs)),
                      POLICIES["fifo"](), make_placer("pack"))
        by_id = {s.job_id: s for s in specs}
        self.running: list[JobView] = []
        for st in plan.starts:
            spec = by_id[st.allocation.job_id]
            started = self.clock - rng.uniform(0, min(spec.duration_s, 200_000))
            done = rng.uniform(0, 0.9) * spec.duration_s
            self.running.append(JobView(spec, started - rng.uniform(0, 3600), allocation=st.allocation,
                                        work_done_s=done, rate=rng.choice([1.0, 1.0, 0.87, 0.7]), as_of=started,
                                        attained_gpu_s=rng.choice([0.0, 0.0, 5000.0, 50_000.0]),
                                        started_at=started))
        self.queued: list[JobView] = []
        for i in range(queued):
            spec = make_spec(rng, running + i, self.clock - rng.uniform(0, 100_000))
            ran = rng.random() < 0.3  # a third have run before (preempted or retried)
            self.queued.append(JobView(spec, spec.submit_time_s + (rng.uniform(0, 50_000) if ran else 0.0),
                                       work_done_s=rng.uniform(0, 0.5) * spec.duration_s if ran else 0.0,
                                       attained_gpu_s=rng.uniform(1000, 200_000) if ran else 0.0))
        self.next_id = running + queued

    def settle(self, policy_name: str, rounds: int = 8) -> None:
        """Let the policy decide and carry out its plans until it has nothing left to change: a cluster it
        has been running for a while, not one another policy left (LAS would first displace every
        demoted job at once, fair every borrower over quota, which happens once, not per call)."""
        placer = make_placer("pack")
        for _ in range(rounds):
            snap = self.snapshot(perturb=False)
            plan = decide(snap, POLICIES[policy_name](), placer)
            if not (plan.starts or plan.preempts or plan.resizes):
                break
            gone = {p.job_id for p in plan.preempts} | {z.job_id for z in plan.resizes}
            keep: list[JobView] = []
            for v in self.running:
                if v.job_id not in gone:
                    keep.append(v)
                    continue
                # Requeued as the simulator does: work kept up to the last checkpoint (every 900 s).
                work = v.work_at(self.clock)
                self.queued.append(JobView(v.spec, self.clock, work_done_s=work - work % 900,
                                           attained_gpu_s=v.attained_at(self.clock), preemptions=v.preemptions + 1))
            started = {st.job_id: st.allocation for st in plan.starts}
            waiting: list[JobView] = []
            for v in self.queued:
                alloc = started.get(v.job_id)
                if alloc is None:
                    waiting.append(v)
                    continue
                keep.append(JobView(v.spec, v.queued_since, allocation=alloc, work_done_s=v.work_done_s, rate=1.0,
                                    as_of=self.clock, attained_gpu_s=v.attained_gpu_s, preemptions=v.preemptions,
                                    started_at=self.clock))
            self.running, self.queued = keep, waiting
            self.clock += 60.0

    def snapshot(self, perturb: bool = True) -> Snapshot:
        rng = self.rng
        if not perturb:
            return self._build(self.clock, tuple(self.running), tuple(self.queued))
        clock = self.clock + rng.uniform(0, 60)
        finished = set(rng.sample(range(len(self.running)), rng.randint(0, 20)))
        running = tuple(v for k, v in enumerate(self.running) if k not in finished)
        new = [make_spec(rng, self.next_id + k, clock - rng.uniform(0, 60)) for k in range(rng.randint(0, 20))]
        arrivals = tuple(JobView(s, s.submit_time_s) for s in new)
        self.next_id += len(arrivals)
        return self._build(clock, running, tuple(self.queued) + arrivals)

    def _build(self, clock: float, running: tuple[JobView, ...], queued: tuple[JobView, ...]) -> Snapshot:
        c = self.cluster
        free_g = c.gpu_capacity.astype(np.float64)
        free_c = c.cpu_capacity.copy()
        free_m = c.mem_capacity.copy()
        for v in running:
            a: Allocation | None = v.allocation
            assert a is not None
            for node, k in a.per_node().items():
                free_g[node] -= k * a.gpus_per_learner
                free_c[node] -= k * a.cpus_per_learner
                free_m[node] -= k * a.mem_gb_per_learner
        return Snapshot.build(clock, c, free_g, free_c, free_m, queued, running, self.quotas)


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def bench(policy_name: str, calls: int, seed: int) -> dict[str, Any]:
    world = World(seed)
    world.settle(policy_name)
    placer = make_placer("pack")
    times: list[float] = []
    starts: list[int] = []
    preempts: list[int] = []
    for _ in range(calls):
        snap = world.snapshot()
        policy = POLICIES[policy_name]()
        t0 = time.perf_counter()
        plan = decide(snap, policy, placer)
        times.append((time.perf_counter() - t0) * 1000)
        starts.append(len(plan.starts))
        preempts.append(len(plan.preempts))
    return {"policy": policy_name, "calls": calls, "p50_ms": percentile(times, 0.5), "p90_ms": percentile(times, 0.9),
            "p99_ms": percentile(times, 0.99), "max_ms": max(times), "mean_starts": statistics.mean(starts),
            "mean_preempts": statistics.mean(preempts), "target_p99_ms": 50.0,
            "meets": percentile(times, 0.99) <= 50.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policies", nargs="*", default=["fair", "las", "drf", "themis"])
    ap.add_argument("-n", "--calls", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for name in args.policies:
        if name not in POLICIES:
            print(f"skipping {name}: not in the policy registry ({', '.join(POLICIES)})")
            continue
        rows.append(bench(name, args.calls, args.seed))
    print_table(rows, ["policy", "calls", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_starts", "mean_preempts",
                       "meets"])
    print(f"wrote {write_results('decide', rows)}")


if __name__ == "__main__":
    main()
