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
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from common import print_table, write_results
from platform_server import Server, fresh_database

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (a fresh database beside it per row)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rows = [run(n, args.db, args.repeat) for n in args.jobs]
    print_table(rows, list(rows[0]))
    path = write_results("listing" + ("_postgresql" if args.db else ""), rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
