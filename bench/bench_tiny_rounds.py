"""The control loop's cost per tiny job, in-process: statements (each a round trip on PostgreSQL), commits and
the process's CPU time per job and per round, with learners that end as soon as they are launched.

    .venv/bin/python bench/bench_tiny_rounds.py [--jobs 400]
    .venv/bin/python bench/bench_tiny_rounds.py --db postgresql://postgres@127.0.0.1:5432/DB   # a disposable DB

bench_throughput.py measures the whole platform (a real server, shims, learners, clients), whose rate on a
shared machine moves with the load; here the store, the loop, its snapshot builder and decide() are the real
ones and the executor is bench_loop_scale.py's in-memory one, so the statement and commit counts are exact
and repeatable whatever the load (the CPU time is not quite: the launcher's threads and the cache misses of a
busy machine count). Rounds are run back to back, each after the launches of the last one are done.

`--executor local`: the platform's own LocalExecutor instead, so every job is a real shim forked by the
supervisor running `true`: the CPU is then this process and everything below it (the supervisor, its shims
and their learners, collected once the supervisor has exited), and the row adds the inodes created per job
(files and directories left under the data directory, counted from before the first round). The rounds
then follow the learners' ends, so rounds and statements per job move with the machine's load; the
instant executor's counts are the exact ones.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event, func, select

from bench_control import add_tenants, submit
from bench_loop_scale import BenchExecutor
from common import print_table, write_results
from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobStatus
from loadmaster.platform.control import ControlLoop
from loadmaster.platform.executors.base import AttemptSpec
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job
from loadmaster.platform.store.models import Job
from loadmaster.scheduling import make_placer, make_policy


class Instant(BenchExecutor):
    """Every attempt ends (exit 0) as soon as it is launched: the loop records the launch and the end."""

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        handle = super().launch(spec)
        self.finish(spec.job_id, spec.attempt)
        return handle


class Counts:
    """Statements and commits on every engine of the store."""

    def __init__(self, store: Store) -> None:
        self.statements = self.commits = 0
        engines = {id(e): e for e in (store.engine, getattr(store, "reader", None) or store.engine)}
        for engine in engines.values():
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "commit", self._commit)

    def _statement(self, *_: Any) -> None:
        self.statements += 1

    def _commit(self, *_: Any) -> None:
        self.commits += 1


def submit_true(store: Store, tenant_ids: list[int], rng: random.Random, count: int) -> None:
    """`count` one-GPU jobs running `true` (the local executor runs them for real)."""
    with store.session() as s:
        for i in range(count):
            manifest = parse_manifest({"name": f"tiny-{i}", "command": ["true"],
                                       "resources": {"gpus": 1, "cpus": 0.1, "memory_gb": 0.1}})
            add_job(s, rng.choice(tenant_ids), manifest, time.time())


def _tree_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _inodes(root: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))


def completed(store: Store) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).where(Job.status == JobStatus.COMPLETED.value)) or 0)


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(1)
    url = args.db or f"sqlite:///{tmp / 'tiny.db'}"
    store = Store.open(url)
    tenants = add_tenants(store, rng, 8)
    local = args.executor == "local"
    executor = LocalExecutor(failure_grace_s=1.0) if local else Instant()
    data = tmp / "data"
    loop = ControlLoop(store, Cluster(tuple(Node(f"n{i}", 4, 8.0, 32.0) for i in range(2)), name="bench"), executor,
                       JobDirs(data), policy=make_policy("fair"), placer=make_placer("pack"), grace_s=1.0,
                       estimates=False, reconcile_s=3600.0)
    inodes = _inodes(data)
    try:
        if local:  # one tenant, as bench_throughput.py's: fair-share preemptions between tenants would add attempts
            submit_true(store, tenants[:1], rng, args.jobs)
        else:
            submit(store, tenants, rng, args.jobs, [1])
        loop.tick()  # the first read of every queued row, not a per-job cost
        loop.ctx.launcher.wait(30)
        counts = Counts(store)
        rounds, done = 0, 0
        cpu, wall = (_tree_cpu_s() if local else time.process_time()), time.perf_counter()
        while done < args.jobs:
            loop.tick()
            loop.ctx.launcher.wait(30)
            rounds += 1
            if local:
                time.sleep(0.002)  # the learners end on their own: let their ends arrive
            if rounds % 20 == 0:
                done = completed(store)  # counted: a statement and a commit per 20 rounds
        inodes = _inodes(data) - inodes
    finally:
        loop.stop()
        if local:
            pid = executor.supervisor.pid
            executor.close()
            if pid is not None:
                os.waitpid(pid, 0)  # its CPU, and that of the shims it collected, count once it is collected
        store.close()
    cpu = (_tree_cpu_s() if local else time.process_time()) - cpu
    wall = time.perf_counter() - wall
    row = {"store": url.split(":")[0].split("+")[0], "executor": args.executor, "jobs": args.jobs, "rounds": rounds,
           "statements_per_round": counts.statements / rounds, "commits_per_round": counts.commits / rounds,
           "statements_per_job": counts.statements / args.jobs, "cpu_ms_per_job": 1000 * cpu / args.jobs,
           "wall_ms_per_round": 1000 * wall / rounds}
    if local:
        row["inodes_per_job"] = inodes / args.jobs
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="a disposable database URL (default: a SQLite file in a temporary directory)")
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--executor", choices=("instant", "local"), default="instant",
                        help="instant: attempts end as they are launched, in memory; local: real shims running `true`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lm-bench-tiny-") as tmp:
        row = run(args, Path(tmp))
    print_table([row], list(row))
    stem = "tiny_rounds" if not args.db else f"tiny_rounds_{row['store']}"
    stem += "_local" if args.executor == "local" else ""
    print(f"wrote {write_results(stem, [row])}")


if __name__ == "__main__":
    main()
