"""Server restart to scheduling again with 1,000 jobs in the store. Target: under 2 s (DLaaS reports 4-6 s
for its lifecycle manager).

    .venv/bin/python bench/bench_restart.py             # both scenarios, 3 restarts each
    .venv/bin/python bench/bench_restart.py --repeat 5 --jobs 1000

The real `loadmaster server` (child process, SQLite, virtual nodes `2x4:8cpu:32gb`, local executor).
Scenarios:
- `running`: 6 jobs run (real learners, started by a first server, which then gets SIGTERM: the learners
  keep running), 980 finished jobs with their history and attempts, 14 queued: the restarted server must
  re-attach the 6 attempts, then start 2 queued jobs on the 2 free GPUs;
- `queued`: 1,000 queued jobs, nothing running: the restarted server starts 8 of them.
Measured from the restart command (before the process exists) to:
- `ready_s`: the server printed that it serves (store opened and migrated, recover() done, loop started);
- `decided_s`: /api/v1/queue first shows the control loop's verdict for every queued job (its first round);
- `first_start_s`: the first PROCESSING transition the restarted server recorded (it scheduled and launched).
`ready_cpu_s` and `decided_cpu_s` are the CPU seconds the server process had used at those moments: start-up
is mostly one thread importing and opening, so on a machine that runs nothing else the wall time is close to
them; on a shared machine the wall time also counts waiting for a core.
Prints a table and writes bench/results/restart.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from common import print_table, write_results
from loadmaster.core.job import JobStatus
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job, transition
from loadmaster.platform.store.models import Attempt, Tenant, Transition
from platform_server import Server

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
NOT_YET = "not_yet_considered"


def _fill(db: str, finished: int, queued: int) -> None:
    """Jobs written straight into the store (the server is down): finished ones with history and an attempt."""
    store = Store.open(db)
    try:
        with store.session() as s:
            tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == "bench"))
            assert tenant_id is not None
            done = parse_manifest({"name": "done", "command": ["true"]})
            waiting = parse_manifest({"name": "waiting", "command": SLEEP, "expected_duration_s": 600})
            t = time.time() - 3600
            jobs = []
            for i in range(finished):
                job = add_job(s, tenant_id, done, t + i)
                transition(s, job, JobStatus.PROCESSING, t + i + 1, "1 learner(s) started on gpu-000")
                ok = i % 10 != 0
                transition(s, job, JobStatus.COMPLETED if ok else JobStatus.FAILED, t + i + 2,
                           "all 1 learner(s) exited 0" if ok else "rank 0 exited 1")
                job.attempts, job.first_started_at = 1, t + i + 1
                jobs.append((job, ok))
            s.flush()  # the jobs before their attempts (no ORM relationship orders them)
            for i, (job, ok) in enumerate(jobs):
                s.add(Attempt(job_id=job.id, number=1, started_at=t + i + 1, ended_at=t + i + 2,
                              allocation={"learners": [{"rank": 0, "node": "gpu-000", "gpu_ids": [0]}]},
                              exit_codes=[[0, 0 if ok else 1]], outcome="succeeded" if ok else "failed",
                              failure_category=None if ok else "traceback", retry_decision=None if ok else "no",
                              log_dir="/nonexistent"))
            for i in range(queued):
                add_job(s, tenant_id, waiting, t + finished + i)
    finally:
        store.close()


def _restart(data: Path, db: str, token: str) -> dict[str, float]:
    restarted_at = time.time()
    server = Server(data, "--nodes", "2x4:8cpu:32gb", "--grace", "1")
    try:
        ready = time.time() - restarted_at
        decided = first = decided_cpu = None
        with server.client(token) as c:
            while decided is None or first is None:
                now = time.time() - restarted_at
                if now > 60:
                    raise RuntimeError("the restarted server did not schedule within 60 s")
                if decided is None:
                    entries = c.get("/api/v1/queue").json()["entries"]
                    if entries and all(e["wait_reason"] != NOT_YET for e in entries):
                        decided, decided_cpu = now, server.cpu_s()
                if first is None and c.get("/api/v1/jobs", params={"status": "PROCESSING", "limit": 1}).json()["jobs"]:
                    store = Store.open(db, migrate_schema=False)
                    with store.session() as s:
                        at = s.scalar(select(func.min(Transition.at)).where(
                            Transition.to_status == "PROCESSING", Transition.at >= restarted_at))
                    store.close()
                    if at is not None:
                        first = at - restarted_at
                time.sleep(0.01)
        # CPU seconds the server process had used: what the start costs whatever else the machine runs
        # (start-up is one thread's work; on an otherwise idle machine the wall time is about this).
        return {"ready_s": ready, "decided_s": decided, "first_start_s": first, "ready_cpu_s": server.ready_cpu_s,
                "decided_cpu_s": decided_cpu}
    finally:
        _cancel_all(server, token)
        server.stop()


def _cancel_all(server: Server, token: str) -> None:
    with server.client(token) as c:
        for status in ("PROCESSING", "QUEUED"):
            for job in c.get("/api/v1/jobs", params={"status": status, "limit": 10_000}).json()["jobs"]:
                c.post(f"/api/v1/jobs/{job['id']}/cancel")
        deadline = time.time() + 30
        while time.time() < deadline and c.get("/api/v1/jobs", params={"status": "PROCESSING"}).json()["jobs"]:
            time.sleep(0.1)


def scenario(name: str, jobs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        db = f"sqlite:///{data / 'loadmaster.db'}"
        first = Server(data, "--nodes", "2x4:8cpu:32gb", "--grace", "1")
        try:
            token = first.tenant("bench", gpus=8)
            running = 6 if name == "running" else 0
            with first.client(token) as c:
                ids = [c.post("/api/v1/jobs", json={"name": "runs", "command": SLEEP}).json()["id"]
                       for _ in range(running)]
            for job_id in ids:
                first.wait_status(token, job_id, "PROCESSING")
        finally:
            first.stop()  # SIGTERM: the 6 learners keep running, to be re-attached
        if name == "running":
            _fill(db, finished=jobs - 20, queued=14)
        else:
            _fill(db, finished=0, queued=jobs)
        return _restart(data, db, token)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("scenarios", nargs="*", default=["running", "queued"])
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.scenarios:
        load = os.getloadavg()[0]
        runs = [scenario(name, args.jobs) for _ in range(args.repeat)]
        row: dict[str, Any] = {"scenario": name, "jobs": args.jobs, "restarts": len(runs), "load_avg_1m": load}
        for key in ("ready_s", "decided_s", "first_start_s", "ready_cpu_s", "decided_cpu_s"):
            values = [r[key] for r in runs]
            row[key] = statistics.median(values)
            row[key[:-2] + "_max_s"] = max(values)
        rows.append(row)
        print(f"{name}: {row}", file=sys.stderr)
    print_table(rows, ["scenario", "jobs", "restarts", "ready_s", "decided_s", "first_start_s", "first_start_max_s",
                       "ready_cpu_s", "decided_cpu_s", "load_avg_1m"])
    print(f"wrote {write_results('restart', rows)}")


if __name__ == "__main__":
    main()
