"""Submission throughput through the HTTP API: jobs accepted per second with N concurrent clients.
Target (issue 10): at least 1,000 jobs/s from 20 clients, on SQLite and on PostgreSQL, with 2 cores.

    .venv/bin/python bench/bench_api.py                      # SQLite; 1, 4, 16, 64 clients
    .venv/bin/python bench/bench_api.py --clients 16 --jobs 5000
    .venv/bin/python bench/bench_api.py --db postgresql://postgres@127.0.0.1:5432/test   # a fresh database
                                                                  # beside `test` for each row, dropped after

The server is the real `loadmaster server` (child process: API, control loop, local executor) on virtual
nodes `1x1`, a fresh one for each row. One job holds the only GPU (it sleeps), so the submitted jobs queue
behind it, as they do on a busy cluster: the control loop runs its rounds over the queue growing from
empty to --jobs while they arrive. The clients are
httpx AsyncClients in this process, each on its own keep-alive connection, each submitting one JSON
manifest after another; a job counts once its 201 arrived (the job is committed). Client and server share
the machine's cores. Besides the wall-clock rate, each row records the CPU time the server process and the
clients spent per accepted job (from /proc): on a machine other work shares, that says what 2 cores can
accept when they do nothing else. Prints a table and writes bench/results/api.json (api_postgresql.json with
--db).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from common import print_table, write_results
from platform_server import Server, cpu_s, fresh_database

MANIFEST = {"name": "bench", "command": ["python", "train.py"], "resources": {"gpus": 1, "cpus": 0.5,
                                                                               "memory_gb": 0.5}}


async def _client(url: str, token: str, n: int, latencies: list[float]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post("/api/v1/jobs", json=MANIFEST)
            if r.status_code != 201:
                raise RuntimeError(f"submission refused: {r.status_code} {r.text}")
            latencies.append(time.perf_counter() - t)


async def _round(url: str, token: str, clients: int, jobs: int, server_pid: int) -> dict[str, Any]:
    per = max(1, jobs // clients)
    latencies: list[float] = []
    load = os.getloadavg()[0]
    server_cpu, client_cpu = cpu_s(server_pid), cpu_s(os.getpid())
    started = time.perf_counter()
    await asyncio.gather(*(_client(url, token, per, latencies) for _ in range(clients)))
    wall = time.perf_counter() - started
    n = len(latencies)
    server_ms, client_ms = 1000 * (cpu_s(server_pid) - server_cpu) / n, 1000 * (cpu_s(os.getpid()) - client_cpu) / n
    latencies.sort()
    return {"clients": clients, "jobs": n, "wall_s": wall, "jobs_per_s": n / wall,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(n - 1, int(0.99 * n))],
            # CPU per accepted job, server (API + control loop) and clients: what the machine's cores pay for
            # one submission, whatever else runs; 2 cores accept 2000 / (server + client) jobs/s at most.
            "server_cpu_ms": server_ms, "client_cpu_ms": client_ms,
            "jobs_per_s_2_cores_cpu_bound": 2000 / (server_ms + client_ms),
            "load_avg_1m": load}


def _measure(clients: int, jobs: int, db_url: str | None) -> dict[str, Any]:
    """One row, on a fresh server and store: its queue grows from empty to `jobs` while they arrive."""
    with tempfile.TemporaryDirectory() as tmp, fresh_database(db_url) as db:
        server = Server(Path(tmp), "--nodes", "1x1", db=db)
        try:
            token = server.tenant("bench", gpus=1)
            with server.client(token) as c:
                blocker = c.post("/api/v1/jobs", json={"name": "hold", "command": [sys.executable, "-c",
                                                       "import time; time.sleep(3600)"]}).json()["id"]
            server.wait_status(token, blocker, "PROCESSING")
            row = asyncio.run(_round(server.url, token, clients, jobs, server.proc.pid))
            row["db"] = "postgresql" if db else "sqlite"
            with server.client(token) as c:
                row["queued_after"] = len(c.get("/api/v1/jobs", params={"status": "QUEUED",
                                                                        "limit": 10_000}).json()["jobs"])
                c.post(f"/api/v1/jobs/{blocker}/cancel")
            # The loop stops the learner: wait for it, or stopping the server would leave it sleeping.
            server.wait_status(token, blocker, "CANCELLED")
            return row
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--jobs", type=int, default=3000, help="jobs per row")
    ap.add_argument("--db", default=None, help="a PostgreSQL URL whose server may create databases (default: "
                                               "SQLite in a temporary directory)")
    args = ap.parse_args()
    rows = []
    for n in args.clients:
        row = _measure(n, args.jobs, args.db)
        rows.append(row)
        print(f"{n} clients: {row['jobs_per_s']:.0f} jobs/s", file=sys.stderr)
    print_table(rows, ["db", "clients", "jobs", "wall_s", "jobs_per_s", "p50_ms", "p99_ms", "server_cpu_ms",
                       "client_cpu_ms", "jobs_per_s_2_cores_cpu_bound", "load_avg_1m", "queued_after"])
    print(f"wrote {write_results('api' if args.db is None else 'api_postgresql', rows)}")


if __name__ == "__main__":
    main()
