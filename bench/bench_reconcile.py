"""Time from a leaked GPU to its repair by reconciliation, on a real `loadmaster server` (SQLite).

    .venv/bin/python bench/bench_reconcile.py --leaks 10

A leak is written into the store by hand, as a bug would leave it (the issue's first bug: a queued job
keeping its allocation; a halted one too; a job PROCESSING without any attempt), at a random moment of the
server's reconciliation period (10 s by default); the time is until the store holds its invariants again
(the allocation freed, the job requeued), as the API would show it. Writes bench/results/reconcile.json.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table, write_results
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Job
from platform_server import Server

LEAK = {"learners": [{"rank": 0, "node": "gpu-001", "gpu_ids": [3], "cpus": 0.1, "mem_gb": 0.1}],
        "master_port": 39990}


def repaired(store: Store, job_id: str, kind: str) -> bool:
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job.allocation is None and (kind != "stranded" or job.status == "QUEUED")


def run(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rng = random.Random(5)
    url = f"sqlite:///{tmp / 'data' / 'loadmaster.db'}"
    server = Server(tmp / "data", "--nodes", "2x4:8cpu:32gb", "--tick", "0.1", db=url)
    store = Store.open(url)
    rows = []
    try:
        token = server.tenant("bench", gpus=8, borrow=0)
        with server.client(token) as c:  # every GPU but one of the second node busy; the rest wait
            small = {"gpus": 1, "cpus": 0.1, "memory_gb": 0.1}
            blocker = c.post("/api/v1/jobs", json={"name": "blocker", "learners": 7, "resources": small,
                                                   "command": ["sleep", "3600"]}).json()["id"]
            waiting = [c.post("/api/v1/jobs", json={"name": f"w{i}", "learners": 2, "resources": {
                "gpus": 4, "cpus": 0.1, "memory_gb": 0.1}, "command": ["true"]}).json()["id"]
                for i in range(args.leaks)]
        time.sleep(2)
        for i, job_id in enumerate(waiting):
            kind = ("queued", "halted", "stranded")[i % 3]
            time.sleep(rng.uniform(0, 10))
            with store.session() as s:
                job = s.get(Job, job_id)
                assert job is not None
                job.allocation = dict(LEAK)
                if kind == "halted":
                    job.status = "HALTED"
                elif kind == "stranded":
                    job.status, job.allocation = "PROCESSING", None
            leaked = time.perf_counter()
            while not repaired(store, job_id, kind):
                time.sleep(0.02)
            rows.append({"leak": kind, "repaired_after_s": time.perf_counter() - leaked})
        with server.client(token) as c:  # learners outlive a stopped server by design: end them first
            c.post(f"/api/v1/jobs/{blocker}/cancel")
        server.wait_status(token, blocker, "CANCELLED", timeout_s=60)
    finally:
        store.close()
        server.stop()
        for line in server.lines:
            if "reconciliation" in line:
                print(line[-160:])
    times = [r["repaired_after_s"] for r in rows]
    summary = {"leak": "all", "repaired_after_s": statistics.fmean(times), "max_s": max(times), "n": len(times)}
    print_table([*rows, summary], ["leak", "repaired_after_s", "max_s", "n"])
    return [*rows, summary]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leaks", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lm-bench-reconcile-") as tmp:
        rows = run(args, Path(tmp))
    print(f"wrote {write_results('reconcile', rows)}")


if __name__ == "__main__":
    main()
