"""The jobs listing (`GET /api/v1/jobs`, what `job list` and the dashboard's pages ask) over many jobs: the time of
one page of 50 at the start, deep in by keyset (`before`, what the dashboard's *Older* does) and deep in by `offset`
(what callers that page by offset pay), and with a name filter.

    .venv/bin/python bench/bench_listing.py                       # SQLite; 10,000 and 100,000 jobs
    .venv/bin/python bench/bench_listing.py --jobs 10000 --db postgresql://postgres@127.0.0.1:5432/test

The jobs are written to the store directly (one tenant, finished jobs, one a second), then the real `loadmaster
server` (child process, virtual node 1x1) serves them; the client is httpx on one keep-alive connection in this
process. Each figure is the median of --repeat requests after one to warm up, wall clock, on a machine other work
may share (PostgreSQL's statistics are gathered after the insert, as autovacuum would). Prints a
table and writes bench/results/listing.json (listing_postgresql.json with --db).

`--queue` measures `loadmaster queue` instead (issue 10: under 1 s with 10,000 queued), as a user runs it: a
new process, the first page as a table and `--all` as plain columns, each the median of --repeat runs, wall
clock. The jobs are submitted through the API (20 lean clients, bench_api.py's) so that the control loop
queues and orders them. "idle": 1 GPU and every job a `sleep 3600`, so the queue stays as it is; "busy": 8 GPUs
(2x4) and every job a `true`, the loop starting and ending jobs all the while (the queue shrinks as it is
measured: its length at each run is recorded).

    .venv/bin/python bench/bench_listing.py --queue                # SQLite, idle and busy, 10,000 jobs
    .venv/bin/python bench/bench_listing.py --queue --db postgresql://postgres@127.0.0.1:5432/DB
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from bench_api import Tally
from bench_api import _lean_client as lean_client
from common import print_table, write_results
from platform_server import Server, fresh_database, run_queue_cli

NAMES = ("resnet", "bert-base", "gpt-small", "vit")
PAGE = 50


def fill(url: str, jobs: int) -> str:
    """`jobs` finished jobs of a new tenant, inserted in batches; the tenant's token."""
    from loadmaster.platform.manifest import parse_manifest
    from loadmaster.platform.store.db import Store
    from loadmaster.platform.store.models import Job
    from loadmaster.platform.store.tenants import create_tenant

    store = Store.open(url)
    try:
        with store.session() as s:
            tenant, token = create_tenant(s, "bench", 1, 0, time.time())
            tenant_id = tenant.id
        docs = {n: parse_manifest({"name": n, "command": "true"}).model_dump(mode="json") for n in NAMES}
        for start in range(0, jobs, 10_000):
            rows = [{"id": f"j-{uuid.uuid4().hex[:12]}", "tenant_id": tenant_id, "name": NAMES[i % 4],
                     "manifest": docs[NAMES[i % 4]], "status": "COMPLETED", "status_reason": "bench",
                     "wait_reason": "", "priority": 0, "learners": 1, "submitted_at": 1.7e9 + i,
                     "queued_since": 1.7e9 + i, "finished_at": 1.7e9 + i + 1, "attempts": 1, "failures": 0,
                     "preemptions": 0, "work_done_s": 1.0, "attained_gpu_s": 1.0, "halt_requested": False,
                     "cancel_requested": False} for i in range(start, min(jobs, start + 10_000))]
            with store.session() as s:
                s.execute(insert(Job), rows)
        if store.engine.dialect.name == "postgresql":
            with store.engine.connect() as conn:  # as autovacuum would soon after: the planner's statistics
                conn.exec_driver_sql("ANALYZE jobs")
                conn.commit()
        return token
    finally:
        store.close()


def median_ms(call: Any, repeat: int) -> float:
    call()  # warm: the first request of a kind pays for plans and caches
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def run(jobs: int, db: str | None, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lm-bench-listing-") as tmp, fresh_database(db) as fresh:
        url = fresh or f"sqlite:///{Path(tmp) / 'listing.db'}"  # filled here before the server starts
        t = time.perf_counter()
        token = fill(url, jobs)
        fill_s = time.perf_counter() - t
        server = Server(Path(tmp) / "data", "--nodes", "1x1", db=url)
        try:
            with server.client(token) as c:
                def page(**params: Any) -> dict[str, Any]:
                    r = c.get("/api/v1/jobs", params={"limit": PAGE, **params})
                    r.raise_for_status()
                    out: dict[str, Any] = r.json()
                    assert out["jobs"], params
                    return out

                # the cursor of the page just before the last (the deepest keyset page there is)
                deep = f"{1.7e9 + PAGE!r}_j-zzzzzzzzzzzz"
                return {
                    "db": "postgresql" if db else "sqlite", "jobs": jobs, "fill_s": round(fill_s, 1),
                    "first_page_ms": median_ms(lambda: page(), repeat),
                    "deep_keyset_page_ms": median_ms(lambda: page(before=deep), repeat),
                    "deep_offset_page_ms": median_ms(lambda: page(offset=jobs - PAGE), repeat),
                    "name_filter_first_page_ms": median_ms(lambda: page(name_contains="BERT"), repeat),
                    "status_filter_first_page_ms": median_ms(lambda: page(status="COMPLETED"), repeat),
                }
        finally:
            server.stop()


QUEUE_SCENES = {  # name -> (the server's nodes, each job's command)
    "idle": ("1x1:8cpu:32gb", ["sleep", "3600"]),
    "busy": ("2x4:8cpu:32gb", ["true"]),
}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_s(server: Server, token: str, *args: str) -> tuple[float, float, float, int]:
    """One `loadmaster queue ...` process: its wall seconds, its CPU seconds, the server's CPU seconds meanwhile
    (on a shared machine CPU is the steadier figure; busy: the server's includes its loop's rounds), and how
    many queued jobs it said there were."""
    cpu, server_cpu = _children_cpu_s(), server.cpu_s()
    took, out = run_queue_cli(server, token, *args)
    return (took, _children_cpu_s() - cpu, server.cpu_s() - server_cpu,
            int(out.split(" queued job", 1)[0].split()[-1]))


async def _submit(url: str, token: str, jobs: int, manifest: dict[str, Any]) -> Tally:
    tally = Tally()
    await asyncio.gather(*(lean_client(url, token, jobs // 20, tally, manifest) for _ in range(20)))
    return tally


def run_queue(scene: str, jobs: int, db: str | None, repeat: int) -> dict[str, Any]:
    nodes, command = QUEUE_SCENES[scene]
    manifest = {"name": "queued", "command": command, "resources": {"gpus": 1, "cpus": 0.1, "memory_gb": 0.1}}
    with tempfile.TemporaryDirectory(prefix="lm-bench-queue-") as tmp, fresh_database(db) as fresh:
        server = Server(Path(tmp) / "data", "--nodes", nodes, "--tick", "0.05", db=fresh)
        token = ""
        try:
            token = server.tenant("bench", gpus=8, borrow=0)
            tally = asyncio.run(_submit(server.url, token, jobs, manifest))
            if tally.errors:
                raise RuntimeError(f"{tally.errors} submissions failed")
            first, every = [], []
            for _ in range(repeat):  # alternated, so that both see the same queue (busy: a shrinking one)
                first.append(cli_s(server, token))
                every.append(cli_s(server, token, "--all"))
            row: dict[str, Any] = {"db": "postgresql" if db else "sqlite", "scene": scene,
                                   "queued_first": first[0][3], "queued_last": every[-1][3]}
            for name, runs in (("first_page", first), ("all", every)):
                row[f"{name}_s"] = round(statistics.median(r[0] for r in runs), 3)
                row[f"{name}_max_s"] = round(max(r[0] for r in runs), 3)
                row[f"{name}_cli_cpu_s"] = round(statistics.median(r[1] for r in runs), 3)
                row[f"{name}_server_cpu_s"] = round(statistics.median(r[2] for r in runs), 3)
            return {**row, "load_1m": round(os.getloadavg()[0], 1)}
        finally:
            # Learners outlive a stopped server (the next start adopts them): idle's `sleep 3600` is cancelled.
            with server.client(token) as c:
                running = c.get("/api/v1/jobs", params={"status": "PROCESSING", "limit": 100}).json()["jobs"] \
                    if token else []
                for job in running:
                    c.post(f"/api/v1/jobs/{job['id']}/cancel")
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, nargs="+", help="default: 10,000 and 100,000 (--queue: 10,000)")
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (a fresh database beside it per row)")
    parser.add_argument("--repeat", type=int, default=20, help="requests per figure (--queue: CLI runs, default 5)")
    parser.add_argument("--queue", action="store_true", help="time `loadmaster queue` and `--all` instead")
    parser.add_argument("--scene", nargs="+", choices=sorted(QUEUE_SCENES), default=list(QUEUE_SCENES))
    args = parser.parse_args()
    if args.queue:
        repeat = 5 if args.repeat == parser.get_default("repeat") else args.repeat
        rows = [run_queue(scene, n, args.db, repeat) for n in args.jobs or [10_000] for scene in args.scene]
    else:
        rows = [run(n, args.db, args.repeat) for n in args.jobs or [10_000, 100_000]]
    print_table(rows, list(rows[0]))
    path = write_results(("queue" if args.queue else "listing") + ("_postgresql" if args.db else ""), rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
