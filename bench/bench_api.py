"""Submission throughput through the HTTP API: jobs accepted per second with N concurrent clients.
Target (issue 10): at least 1,000 jobs/s from 20 clients, on SQLite and on PostgreSQL, with 2 cores.

    .venv/bin/python bench/bench_api.py                      # SQLite; 1, 4, 16, 64 clients
    .venv/bin/python bench/bench_api.py --clients 16 --jobs 5000
    .venv/bin/python bench/bench_api.py --db postgresql://postgres@127.0.0.1:5432/test   # a fresh database
                                                                  # beside `test` for each row, dropped after

The server is the real `loadmaster server` (child process: API, control loop, local executor) on virtual
nodes `1x1`, a fresh one for each row. One job holds the only GPU (it sleeps), so the submitted jobs queue
behind it, as they do on a busy cluster: the control loop runs its rounds over the queue growing from
empty to --jobs while they arrive. The clients run in this process, each on its own keep-alive
connection, each submitting one JSON manifest after another and waiting for its answer; a job counts once
its 201 with the job's id arrived (the job is committed); any other answer is counted as an error (the
`errors` column), never retried. Two kinds of client (--client):
  lean   (default) HTTP/1.1 written and read by hand on asyncio streams: the request's bytes built once,
         the status line, headers and Content-Length body read back, the JSON body parsed for its id. What
         a client must do and no more, so that on 2 shared cores the clients leave the CPU to the server.
  httpx  httpx.AsyncClient, as before (its request and response machinery costs about as much CPU per
         submission as the server's whole work for it).
Client and server share the machine's cores. Besides the wall-clock rate, each row records the CPU time the
server process and the clients spent per accepted job (from /proc): on a machine other work shares, that
says what 2 cores can accept when they do nothing else. Prints a table and writes bench/results/api.json
(api_postgresql.json with --db).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from common import print_table, write_results
from platform_server import Server, cpu_s, fresh_database

MANIFEST = {"name": "bench", "command": ["python", "train.py"], "resources": {"gpus": 1, "cpus": 0.5,
                                                                               "memory_gb": 0.5}}


class Tally:
    """What the clients saw: each accepted submission's latency, and the answers that were not a 201 with an id."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def answer(self, started: float, status: int, body: bytes) -> None:
        job_id = None
        if status == 201:
            with contextlib.suppress(ValueError, AttributeError):  # not JSON, or not an object: an error
                job_id = json.loads(body).get("id")
        if status == 201 and isinstance(job_id, str) and job_id:
            self.latencies.append(time.perf_counter() - started)
        else:
            self.errors.append(f"{status} {body[:200]!r}")


async def _httpx_client(url: str, token: str, n: int, tally: Tally) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post("/api/v1/jobs", json=MANIFEST)
            tally.answer(t, r.status_code, r.content)


async def _lean_client(url: str, token: str, n: int, tally: Tally, manifest: dict[str, Any] = MANIFEST) -> None:
    """HTTP/1.1 keep-alive by hand: one request's bytes sent, its whole answer read, n times on one connection."""
    where = urlsplit(url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    body = json.dumps(manifest).encode()
    request = (f"POST /api/v1/jobs HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {token}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in range(n):
            t = time.perf_counter()
            writer.write(request)
            status, answer = await _read_answer(reader)
            tally.answer(t, status, answer)
    finally:
        writer.close()
        await writer.wait_closed()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response: its status and body (Content-Length, or chunked), the connection kept open."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
    lines = head.split(b"\r\n")
    version, status = lines[0].split(b" ", 2)[:2]
    if not version.startswith(b"HTTP/1."):
        raise RuntimeError(f"not an HTTP/1.x answer: {lines[0]!r}")
    fields = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
    if fields.get(b"connection", b"").lower() == b"close":
        raise RuntimeError(f"the server closed the connection after a {int(status)} answer")
    if b"content-length" in fields:
        return int(status), await reader.readexactly(int(fields[b"content-length"]))
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # the empty trailer
        return int(status), b"".join(chunks)
    raise RuntimeError(f"an answer without Content-Length or chunked encoding: {head!r}")


CLIENTS = {"lean": _lean_client, "httpx": _httpx_client}


async def _round(url: str, token: str, clients: int, jobs: int, server_pid: int,
                 client: str = "lean") -> dict[str, Any]:
    per = max(1, jobs // clients)
    tally = Tally()
    load = os.getloadavg()[0]
    server_cpu, client_cpu = cpu_s(server_pid), cpu_s(os.getpid())
    started = time.perf_counter()
    await asyncio.gather(*(CLIENTS[client](url, token, per, tally) for _ in range(clients)))
    wall = time.perf_counter() - started
    latencies = sorted(tally.latencies)
    n = len(latencies)
    if n == 0:
        raise RuntimeError(f"no submission accepted; the first answer: {tally.errors[0]}")
    server_ms, client_ms = 1000 * (cpu_s(server_pid) - server_cpu) / n, 1000 * (cpu_s(os.getpid()) - client_cpu) / n
    return {"client": client, "clients": clients, "jobs": n, "errors": len(tally.errors),
            "first_error": tally.errors[0] if tally.errors else "",
            "wall_s": wall, "jobs_per_s": n / wall,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(n - 1, int(0.99 * n))],
            # CPU per accepted job, server (API + control loop) and clients: what the machine's cores pay for
            # one submission, whatever else runs; 2 cores accept 2000 / (server + client) jobs/s at most.
            "server_cpu_ms": server_ms, "client_cpu_ms": client_ms,
            "jobs_per_s_2_cores_cpu_bound": 2000 / (server_ms + client_ms),
            "load_avg_1m": load}


def _measure(clients: int, jobs: int, db_url: str | None, client: str) -> dict[str, Any]:
    """One row, on a fresh server and store: its queue grows from empty to `jobs` while they arrive."""
    with tempfile.TemporaryDirectory() as tmp, fresh_database(db_url) as db:
        server = Server(Path(tmp), "--nodes", "1x1", db=db)
        try:
            token = server.tenant("bench", gpus=1)
            with server.client(token) as c:
                blocker = c.post("/api/v1/jobs", json={"name": "hold", "command": [sys.executable, "-c",
                                                       "import time; time.sleep(3600)"]}).json()["id"]
            server.wait_status(token, blocker, "PROCESSING")
            row = asyncio.run(_round(server.url, token, clients, jobs, server.proc.pid, client))
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
    ap.add_argument("--client", choices=sorted(CLIENTS), nargs="+", default=["lean"],
                    help="the clients' HTTP code: lean (HTTP/1.1 by hand on asyncio streams) or httpx (as "
                         "before); several: a row for each, alternating")
    args = ap.parse_args()
    rows = []
    for n in args.clients:
        for client in args.client:
            row = _measure(n, args.jobs, args.db, client)
            rows.append(row)
            print(f"{n} {client} clients: {row['jobs_per_s']:.0f} jobs/s, {row['errors']} errors "
                  f"{row['first_error']}", file=sys.stderr)
    print_table(rows, ["db", "client", "clients", "errors", "jobs", "wall_s", "jobs_per_s", "p50_ms", "p99_ms",
                       "server_cpu_ms", "client_cpu_ms", "jobs_per_s_2_cores_cpu_bound", "load_avg_1m", "queued_after"])
    print(f"wrote {write_results('api' if args.db is None else 'api_postgresql', rows)}")


if __name__ == "__main__":
    main()
