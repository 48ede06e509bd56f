"""The control loop measured: round time with 1,000 queued and 200 running jobs (target: every round under
100 ms), and how far the queue-wait estimates were from the actual starts.

    .venv/bin/python bench/bench_control.py                        # SQLite files, 30 rounds each, both parts
    .venv/bin/python bench/bench_control.py --part rounds --db postgresql://postgres@127.0.0.1:5432/DB

Everything is real: a store on disk (SQLite, or for the rounds the PostgreSQL database given, which must be
a disposable one: the bench adds its own tenants and jobs), the LocalExecutor running learners as processes.

Rounds: 200 one-learner jobs running (`sleep`, each under its shim) and 1,000 more queued behind them on a
25 x 8-GPU virtual cluster (every GPU busy), 4 tenants, the fair policy. Each measured round is a whole
tick(), timed by the wall clock and by the CPU time of the loop's thread (on a shared machine the wall clock
also counts the time a round waited for a core):
- idle: nothing changed, so no store read and no decision (what the loop does most of the time);
- decide: woken (as after a submission): read 1,200 rows, build the snapshot, decide, apply the plan;
- churn: a running job was cancelled: the round collects its end and starts a queued job in its place (the
  learner process is spawned by a launch thread, beside the round);
- decide+estimates: decide rounds while the estimator forecasts the queue in its own process.

Estimates: 24 jobs of 1-2 GPUs submitted at once to a 2 x 2-GPU cluster (FIFO, pack), each sleeping 1-4 s,
with the exact duration in the manifest or one off by a random factor; the loop runs on its own thread
with the estimator, and estimation_error() compares each job's first (and last) estimate with its start.
Prints tables and writes bench/results/control.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table, write_results
from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobStatus
from loadmaster.platform.control import ControlLoop
from loadmaster.platform.estimates import Estimator, estimation_error
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.gc_tuning import tune_for_serving
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job
from loadmaster.platform.store.models import Job, Tenant
from loadmaster.scheduling import make_placer, make_policy

NODES, GPUS = 25, 8
RUNNING, QUEUED = 200, 1000
TENANTS = ("vision", "speech", "nlp", "rl")


def cluster() -> Cluster:
    return Cluster(tuple(Node(f"n{i}", GPUS, 64.0, 512.0, rack=f"r{i % 5}") for i in range(NODES)), name="bench")


def submit(store: Store, tenant_ids: list[int], rng: random.Random, count: int, gpus: list[int]) -> list[str]:
    ids = []
    with store.session() as s:
        for i in range(count):
            learners, per = (1, rng.choice(gpus))
            manifest = parse_manifest({
                "name": f"bench-{i}", "learners": learners, "resources": {"gpus": per, "cpus": 1, "memory_gb": 1},
                "command": ["sleep", "3600"], "priority": rng.choice([0, 0, 0, 1]),
                "expected_duration_s": float(rng.choice([600, 1800, 3600, 7200])),
            })
            ids.append(add_job(s, rng.choice(tenant_ids), manifest, time.time()).id)
    return ids


def count(store: Store, status: JobStatus) -> int:
    with store.session() as s:
        return s.query(Job).filter(Job.status == status.value).count()


class Timed:
    """tick() with the CPU time the calling thread spent in it: wall time on a shared machine also counts
    the time the round waited for a core."""

    def __init__(self, loop: ControlLoop) -> None:
        self.loop = loop
        self.cpu: list[float] = []

    def tick(self) -> Any:
        before = time.thread_time()
        report = self.loop.tick()
        self.cpu.append(time.thread_time() - before)
        return report

    def take(self) -> list[float]:
        cpu, self.cpu = self.cpu, []
        return cpu


def stats(name: str, times: list[float], decided: int, note: str = "", cpu: list[float] | None = None
          ) -> dict[str, Any]:
    ms = sorted(t * 1000 for t in times)
    cpu_ms = sorted(t * 1000 for t in cpu or [0.0])
    return {
        "rounds": name, "n": len(ms), "decided": decided, "cpu_p50_ms": statistics.median(cpu_ms),
        "cpu_p95_ms": cpu_ms[min(len(cpu_ms) - 1, int(0.95 * len(cpu_ms)))],
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))], "max_ms": ms[-1], "mean_ms": statistics.fmean(ms),
        "under_100ms": all(t < 100 for t in ms), "note": note,
    }


def add_tenants(store: Store, rng: random.Random, gpus: int) -> list[int]:
    """The bench's four tenants, each with a quarter of `gpus` as its quota (names made unique, so that a
    PostgreSQL database may be reused)."""
    with store.session() as s:
        tenants = [Tenant(name=f"{t}-{rng.randrange(10**6)}", gpu_quota=gpus // len(TENANTS), borrow_limit=None,
                          created_at=time.time()) for t in TENANTS]
        s.add_all(tenants)
        s.flush()
        return [t.id for t in tenants]


def rounds_part(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rng = random.Random(4)
    url = args.db or f"sqlite:///{tmp / 'rounds.db'}"
    store = Store.open(url)
    tenant_ids = add_tenants(store, rng, NODES * GPUS)
    executor = LocalExecutor()
    loop = ControlLoop(store, cluster(), executor, JobDirs(tmp / "rounds"), policy=make_policy("fair"),
                       placer=make_placer("pack"), grace_s=1.0, estimates=False)
    tune_for_serving()  # as `loadmaster server` does once it has built its objects
    rows: list[dict[str, Any]] = []
    try:
        started = time.perf_counter()
        submit(store, tenant_ids, rng, RUNNING, [1])
        while count(store, JobStatus.PROCESSING) < RUNNING:
            loop.tick()
            time.sleep(0.01)
        setup_s = time.perf_counter() - started
        submit(store, tenant_ids, rng, QUEUED, [1, 1, 2, 4, 8])
        loop.tick()  # the first round after the submissions parses 1,000 manifests once
        assert count(store, JobStatus.QUEUED) == QUEUED, "every GPU is busy: all new jobs must wait"
        timed = Timed(loop)
        idle = [timed.tick() for _ in range(args.rounds)]
        rows.append(stats("idle", [r.duration_s for r in idle], sum(r.decided for r in idle),
                          "nothing changed: poll 200 attempts, no store read, no decision", timed.take()))
        decided = []
        for _ in range(args.rounds):
            loop.wake()
            decided.append(timed.tick())
        decide_ms = statistics.median(r.decide_s for r in decided) * 1000
        rows.append(stats("decide", [r.duration_s for r in decided], sum(r.decided for r in decided),
                          f"woken: read 1,200 rows, snapshot+decide+apply (p50 {decide_ms:.1f} ms)",
                          timed.take()))
        churn = []
        cpu_churn: list[float] = []
        for job_id in list(loop.ctx.runs)[: args.rounds]:
            with store.session() as s:
                job = s.get(Job, job_id)
                assert job is not None
                job.cancel_requested = True
            loop.wake()
            loop.tick()  # the stop is asked for
            timed.take()
            deadline = time.monotonic() + 10
            while True:  # the round in which the end arrives and a queued job is started in its place
                report = timed.tick()
                if report.cancelled or time.monotonic() > deadline:
                    churn.append(report)
                    cpu_churn.append(timed.take()[-1])
                    break
                time.sleep(0.01)
        starts = sum(len(r.started) for r in churn)
        rows.append(stats("churn", [r.duration_s for r in churn], sum(r.decided for r in churn),
                          f"an end collected, its successor started ({starts} starts in all)", cpu_churn))
        estimator = Estimator(store, interval_s=0.0)
        loop.estimator = estimator
        with_estimates = []
        for _ in range(args.rounds):
            estimator.mark_stale()
            loop.wake()
            with_estimates.append(timed.tick())
            time.sleep(0.1)  # the loop's pause between rounds
        forecasts = estimator.forecasts
        estimator.stop()
        rows.append(stats("decide+estimates", [r.duration_s for r in with_estimates],
                          sum(r.decided for r in with_estimates),
                          f"{forecasts} forecasts meanwhile in their process (last: "
                          f"{estimator.last_forecast_s:.1f} s)", timed.take()))
    finally:
        for run in list(loop.ctx.runs.values()):
            executor.stop(run.job_id, run.attempt, 0.0)
        deadline = time.monotonic() + 30
        while loop.ctx.runs and time.monotonic() < deadline:
            for ended in executor.poll().ended:
                loop.ctx.runs.pop(ended.job_id, None)
                executor.release(ended.job_id, ended.attempt)
            time.sleep(0.05)
        loop.stop()
        store.close()
    print(f"rounds: {RUNNING} jobs launched in {setup_s:.1f} s; {QUEUED} queued; {NODES}x{GPUS} GPUs; "
          f"store {url.split(':')[0]}")
    print_table(rows, ["rounds", "n", "decided", "cpu_p50_ms", "cpu_p95_ms", "p50_ms", "p95_ms", "max_ms",
                       "mean_ms", "under_100ms", "note"])
    return [{**r, "part": "rounds", "store": url.split(":")[0], "running": RUNNING, "queued": QUEUED} for r in rows]


ESTIMATE_JOBS = 24


def estimates_part(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Estimated vs actual start of 24 jobs submitted at once to a 2 x 2-GPU cluster (FIFO, pack): each
    sleeps 1-4 s; their manifests give the exact duration, or one off by a random factor (sigma 0.3)."""
    rows = []
    for noise in (0.0, 0.3):
        rng = random.Random(7)
        url = f"sqlite:///{tmp / f'estimates-{noise}.db'}"
        store = Store.open(url)
        with store.session() as s:
            tenant = Tenant(name="bench", gpu_quota=4, borrow_limit=None, created_at=time.time())
            s.add(tenant)
            s.flush()
            tenant_id = tenant.id
        small = Cluster((Node("n0", 2, 8.0, 32.0), Node("n1", 2, 8.0, 32.0)), name="small")
        loop = ControlLoop(store, small, LocalExecutor(), JobDirs(tmp / f"estimates-{noise}"),
                           policy=make_policy("fifo"), placer=make_placer("pack"), tick_s=0.05,
                           estimate_interval_s=0.5)
        with store.session() as s:
            for i in range(ESTIMATE_JOBS):
                duration = rng.uniform(1.0, 4.0)
                told = duration * (rng.lognormvariate(0.0, noise) if noise else 1.0)
                manifest = parse_manifest({
                    "name": f"est-{i}", "resources": {"gpus": rng.choice([1, 2]), "cpus": 1, "memory_gb": 1},
                    "command": [sys.executable, "-c", f"import time; time.sleep({duration:.3f})"],
                    "expected_duration_s": told})
                add_job(s, tenant_id, manifest, time.time())
        started = time.perf_counter()
        loop.start()
        try:
            while count(store, JobStatus.COMPLETED) < ESTIMATE_JOBS and time.perf_counter() - started < 300:
                time.sleep(0.2)
        finally:
            loop.stop()
        for which in ("first", "last"):
            acc = estimation_error(store, which)
            rows.append({"part": "estimates", "expected_duration": "exact" if not noise else f"noisy (sigma {noise})",
                         "estimate": which, "jobs": acc.jobs, "mean_abs_error_s": acc.mean_abs_error_s,
                         "median_abs_error_s": acc.median_abs_error_s, "p90_abs_error_s": acc.p90_abs_error_s,
                         "bias_s": acc.mean_error_s, "mean_wait_s": acc.mean_wait_s,
                         "forecasts": loop.estimator.forecasts if loop.estimator else 0})
        store.close()
    print_table(rows, ["expected_duration", "estimate", "jobs", "mean_abs_error_s", "median_abs_error_s",
                       "p90_abs_error_s", "bias_s", "mean_wait_s", "forecasts"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="database URL for the rounds (default: a SQLite file in a temporary directory)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--part", choices=["rounds", "estimates", "all"], default="all")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lm-bench-control-") as tmp:
        if args.part in ("rounds", "all"):
            rows += rounds_part(args, Path(tmp))
        if args.part in ("estimates", "all"):
            rows += estimates_part(args, Path(tmp))
    # A run on another store keeps the default run's file: control_postgresql.json next to control.json.
    stem = "control" if not args.db else f"control_{args.db.split(':')[0].split('+')[0]}"
    path = write_results(stem, rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
