"""The control loop's rounds at 10,000 queued + 1,000 running jobs (issue 10's figure: p99 under 50 ms, max
under 100 ms), on SQLite and on PostgreSQL, with the loop's own time and decide()'s share apart.

    .venv/bin/python bench/bench_loop_scale.py                       # SQLite, in a temporary directory
    .venv/bin/python bench/bench_loop_scale.py --db postgresql://postgres@127.0.0.1:5432/DB   # a disposable DB

The store, the loop, its snapshot builder and decide() are the real ones. The executor is the bench's own
(BenchExecutor below): it keeps the executor contract in memory, so 1,000 attempts run without 2,000
processes (a learner and its shim each); its poll() costs nothing, which leaves the loop's own work. The
real executor's cost per round is measured by bench_control.py (200 real learners).

Rounds measured (each a whole tick(), wall clock and the loop thread's CPU time):
- idle: nothing changed (the counter query, a poll);
- submit: 5 jobs were submitted (5 rows read, their views built, decide, their wait reasons written);
- churn: 5 running jobs ended (5 ends recorded, decide, 5 queued jobs started in one statement);
- cancel: a user cancelled a running job (the stop written, then its end and a successor's start).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench_control import add_tenants, submit
from common import print_table, write_results
from loadmaster.core.cluster import Cluster, Node
from loadmaster.platform.control import ControlLoop
from loadmaster.platform.control.reports import TickReport
from loadmaster.platform.executors.base import AttemptEnded, AttemptSpec, LearnerExit, LiveAttempt, PollResult
from loadmaster.platform.gc_tuning import tune_for_serving
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Job
from loadmaster.scheduling import make_placer, make_policy

NODES, GPUS = 125, 8
RUNNING, QUEUED = 1000, 10_000


class BenchExecutor:
    """The executor contract in memory: launch() starts nothing, finish() ends an attempt, stop() ends it as
    stopped at once. Ends are reported until released, as the contract says."""

    name = "bench"

    def __init__(self) -> None:
        self.specs: dict[tuple[str, int], AttemptSpec] = {}
        self.ended: dict[tuple[str, int], AttemptEnded] = {}

    def launch(self, spec: AttemptSpec) -> dict[str, Any]:
        self.specs[(spec.job_id, spec.attempt)] = spec
        return {"executor": self.name, "job_id": spec.job_id, "attempt": spec.attempt}

    def _end(self, key: tuple[str, int], stopped: bool) -> None:
        spec = self.specs.get(key)
        if spec is not None and key not in self.ended:
            self.ended[key] = AttemptEnded(key[0], key[1], tuple(LearnerExit(ls.rank, 0) for ls in spec.learners),
                                           stopped, None)

    def finish(self, job_id: str, attempt: int) -> None:
        self._end((job_id, attempt), stopped=False)

    def stop(self, job_id: str, attempt: int, grace_s: float) -> None:
        self._end((job_id, attempt), stopped=True)

    def poll(self) -> PollResult:
        return PollResult(ended=tuple(self.ended.values()))

    def release(self, job_id: str, attempt: int) -> None:
        self.ended.pop((job_id, attempt), None)
        self.specs.pop((job_id, attempt), None)

    def reattach(self, spec: AttemptSpec, handle: Mapping[str, Any] | None) -> bool:
        return (spec.job_id, spec.attempt) in self.specs

    def watching(self) -> frozenset[tuple[str, int]]:
        return frozenset(self.specs)

    def survey(self) -> list[LiveAttempt] | None:
        return None

    def terminate(self, found: LiveAttempt) -> None:
        pass

    def notify(self, wake: Callable[[], None]) -> None:
        pass

    def close(self) -> None:
        pass


class Timed:
    """Times the measured rounds and counts their statements (each a round trip on PostgreSQL) and commits, on
    every engine of the store."""

    def __init__(self, loop: ControlLoop, store: Store) -> None:
        self.loop = loop
        self.rows: dict[str, list[tuple[TickReport, float]]] = {}
        self.counts: dict[str, list[tuple[int, int]]] = {}
        self._statements = self._commits = 0
        self._on = False
        engines = {id(e): e for e in (store.engine, getattr(store, "reader", None) or store.engine)}
        for engine in engines.values():
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "commit", self._commit)

    def _statement(self, *_: Any) -> None:
        self._statements += self._on

    def _commit(self, *_: Any) -> None:
        self._commits += self._on

    def tick(self, kind: str) -> TickReport:
        self._statements = self._commits = 0
        self._on = True
        before = time.thread_time()
        report = self.loop.tick()
        self.rows.setdefault(kind, []).append((report, time.thread_time() - before))
        self._on = False
        self.counts.setdefault(kind, []).append((self._statements, self._commits))
        assert report.store_error is None, report.store_error
        return report


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(kind: str, rows: list[tuple[TickReport, float]], counts: list[tuple[int, int]],
              note: str) -> dict[str, Any]:
    wall = [r.duration_s * 1000 for r, _ in rows]
    cpu = [c * 1000 for _, c in rows]
    core = [r.decide_only_s * 1000 for r, _ in rows]
    own = [w - c for w, c in zip(wall, core, strict=True)]
    return {"rounds": kind, "n": len(rows), "decided": sum(r.decided for r, _ in rows),
            "wall_p50_ms": statistics.median(wall), "wall_p99_ms": pct(wall, 0.99), "wall_max_ms": max(wall),
            "cpu_p50_ms": statistics.median(cpu), "decide_p50_ms": statistics.median(core),
            "decide_p99_ms": pct(core, 0.99), "loop_own_p50_ms": statistics.median(own),
            "loop_own_p99_ms": pct(own, 0.99), "loop_own_max_ms": max(own),
            "statements": sum(n for n, _ in counts) / len(counts), "commits": sum(c for _, c in counts) / len(counts),
            "note": note}


def run(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rng = random.Random(4)
    url = args.db or f"sqlite:///{tmp / 'scale.db'}"
    store = Store.open(url)
    tenant_ids = add_tenants(store, rng, NODES * GPUS)
    cluster = Cluster(tuple(Node(f"n{i}", GPUS, 64.0, 512.0, rack=f"r{i % 5}") for i in range(NODES)), name="bench")
    executor = BenchExecutor()
    loop = ControlLoop(store, cluster, executor, JobDirs(tmp / "data"), policy=make_policy(args.policy),
                       placer=make_placer("pack"), grace_s=1.0, estimates=False, reconcile_s=3600.0)
    timed = Timed(loop, store)
    try:
        started = time.perf_counter()
        submit(store, tenant_ids, rng, RUNNING, [1])
        while len(loop.ctx.runs) < RUNNING or any(r.running_since is None for r in loop.ctx.runs.values()):
            loop.tick()
            loop.ctx.launcher.wait(30)
        setup_s = time.perf_counter() - started
        started = time.perf_counter()
        submit(store, tenant_ids, rng, QUEUED, [1, 1, 2, 4, 8])
        first = loop.tick()  # the first read of the 10,000 rows and their manifests
        loop.tick()
        queued_s = time.perf_counter() - started
        tune_for_serving()  # as `loadmaster server` does once it has built its objects
        for _ in range(args.rounds):
            timed.tick("idle")
        for _ in range(args.rounds):
            submit(store, tenant_ids, rng, 5, [1, 2, 4])
            loop.wake()
            timed.tick("submit")
            loop.tick()  # the wait reasons written by the last round come back as changed rows
        for _ in range(args.rounds):
            for run in rng.sample(sorted(loop.ctx.runs.values(), key=lambda r: r.job_id), 5):
                executor.finish(run.job_id, run.attempt)
            timed.tick("churn")
            loop.ctx.launcher.wait(30)
            loop.tick()  # the launches' confirmations
        for _ in range(args.rounds):
            victim = rng.choice(sorted(loop.ctx.runs))
            with store.session() as s:
                job = s.get(Job, victim)
                assert job is not None
                job.cancel_requested = True
            loop.wake()
            timed.tick("cancel")
            loop.ctx.launcher.wait(30)
            loop.tick()
    finally:
        loop.stop()
        store.close()
    notes = {"idle": "nothing changed", "submit": "5 submissions read, decided, their wait reasons written",
             "churn": "5 ends recorded, 5 successors started in one statement",
             "cancel": "a cancel's stop written (its end and successor follow)"}
    rows = [summarise(kind, timed.rows[kind], timed.counts[kind], notes[kind])
            for kind in ("idle", "submit", "churn", "cancel")]
    store_name = url.split(":")[0].split("+")[0]
    print(f"{RUNNING} running on {NODES}x{GPUS} GPUs (set up in {setup_s:.1f} s), {QUEUED} queued (read and first "
          f"decided in {first.duration_s:.2f} s, {queued_s:.1f} s with their submission); policy {args.policy}; "
          f"store {store_name}")
    print_table(rows, ["rounds", "n", "decided", "wall_p50_ms", "wall_p99_ms", "wall_max_ms", "cpu_p50_ms",
                       "decide_p50_ms", "decide_p99_ms", "loop_own_p50_ms", "loop_own_p99_ms", "loop_own_max_ms",
                       "statements", "commits"])
    return [{**r, "store": store_name, "running": RUNNING, "queued": QUEUED, "policy": args.policy} for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="a disposable database URL (default: a SQLite file in a temporary directory)")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--policy", default="fair")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lm-bench-scale-") as tmp:
        rows = run(args, Path(tmp))
    stem = "loop_scale" if not args.db else f"loop_scale_{args.db.split(':')[0].split('+')[0]}"
    print(f"wrote {write_results(stem, rows)}")


if __name__ == "__main__":
    main()
