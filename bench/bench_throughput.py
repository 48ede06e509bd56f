"""Throughput of the whole platform: 10,000 tiny jobs (`true`) through a real `loadmaster server` on 8 GPUs
(`--nodes 2x4`), started and ended per second (Slurm's scale of throughput: target 100 jobs/s), the
submission rate from 20 clients meanwhile (target 1,000/s, 0 errors), and `loadmaster queue` with the
queue full (target under 1 s).

    .venv/bin/python bench/bench_throughput.py                     # SQLite, 10,000 jobs
    .venv/bin/python bench/bench_throughput.py --jobs 2000 --db postgresql://postgres@127.0.0.1:5432/DB

Everything is real: the server process (API, control loop, local executor), every job's learner a process
under its shim. Submissions are 20 clients in this process, one keep-alive connection each (--client: lean,
the default, HTTP/1.1 by hand as bench_api.py's, ~0.08 ms of CPU per submission; httpx, the old client, ~1 ms:
on 2 shared cores that CPU is taken from the server, so the clients' own CPU per job is reported); the
control loop starts jobs while they arrive. Jobs ended are counted from /metrics (loadmaster_jobs) once a
second; the JSON keeps that timeline, and the rate while the clients submit ("burst") and after.
Prints a table and writes bench/results/throughput.json (throughput_postgresql.json with --db).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench_api import Tally
from bench_api import _lean_client as lean_client
from common import print_table, write_results
from platform_server import ADMIN, Server, cpu_s, fresh_database, run_queue_cli

MANIFEST = {"name": "tiny", "command": ["true"], "resources": {"gpus": 1, "cpus": 0.1, "memory_gb": 0.1}}
_COMPLETED = re.compile(r'^loadmaster_jobs\{status="(COMPLETED|FAILED)",tenant="[^"]*"\} (\S+)', re.M)


async def _httpx_client(url: str, token: str, n: int, tally: Tally) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post("/api/v1/jobs", json=MANIFEST)
            tally.answer(t, r.status_code, r.content)


async def _lean_client(url: str, token: str, n: int, tally: Tally) -> None:
    """bench_api.py's lean client with this bench's manifest."""
    await lean_client(url, token, n, tally, MANIFEST)


CLIENTS = {"lean": _lean_client, "httpx": _httpx_client}


async def submit(url: str, token: str, clients: int, jobs: int, client: str) -> tuple[float, Tally]:
    tally = Tally()
    started = time.perf_counter()
    await asyncio.gather(*(CLIENTS[client](url, token, jobs // clients, tally) for _ in range(clients)))
    return time.perf_counter() - started, tally


def ended(server: Server) -> int:
    with server.client(ADMIN) as c:
        text = c.get("/metrics").text
    return int(sum(float(v) for _, v in _COMPLETED.findall(text)))


def _stat_cpu_s(pid: int) -> float:
    """A process's CPU seconds and those of its children it has collected (utime, stime, cutime, cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(server: Server) -> float:
    """CPU of the server and of what runs under it: its own children (the queue estimator, the shim
    supervisor) with what each has collected (the supervisor collects its shims, a shim its learner). The
    jobs' whole cost on this machine, not only the server's."""
    pid = server.proc.pid
    kids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            kids.update(int(k) for k in (task / "children").read_text().split())
    # the supervisor runs in a session of its own but is still the server's child
    return _stat_cpu_s(pid) + sum(_stat_cpu_s(k) for k in kids)


def _stat_own_s(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds (utime + stime) and what it has collected of its children (cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def tree_parts_s(server: Server) -> dict[str, float]:
    """tree_cpu_s() by part: the server's own threads, and each child by what it runs (the shim supervisor's
    collected children are its shims with their learners)."""
    pid = server.proc.pid
    parts: dict[str, float] = {}
    own, collected = _stat_own_s(pid)
    parts["server"] = own
    parts["server_collected"] = collected  # children the server itself waited for (shims it started itself)
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            for kid in (int(k) for k in (task / "children").read_text().split()):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    cmd = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
                    name = "supervisor" if b"loadmaster.platform.executors.supervisor" in cmd else \
                        "estimator" if any(b"multiprocessing" in c for c in cmd) else "other"
                    own, collected = _stat_own_s(kid)
                    parts[name] = parts.get(name, 0.0) + own
                    parts[name + "_collected"] = parts.get(name + "_collected", 0.0) + collected
    return parts


_ROUNDS = re.compile(r"^loadmaster_rounds_total (\S+)", re.M)


_WAITS = re.compile(r'^loadmaster_coalesce_waits_total\{ended="(\w+)"\} (\S+)', re.M)


def loop_counts(server: Server) -> tuple[int, dict[str, int]]:
    """The loop's rounds, and its waits after busy rounds by what ended them (none before this counter)."""
    with server.client(ADMIN) as c:
        text = c.get("/metrics").text
    found = _ROUNDS.search(text)
    return (int(float(found.group(1))) if found else 0), {k: int(float(v)) for k, v in _WAITS.findall(text)}


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(at(0.5), 2), "p90": round(at(0.9), 2), "p99": round(at(0.99), 2),
            "mean": round(statistics.fmean(ordered), 2)}


def launch_latency(db_url: str) -> dict[str, Any]:
    """Where a tiny job's time goes, from the store and the attempt's files (ms; percentiles over attempts):
    booked -> running (the round's Start to the shim's pid file: the launch), running -> exited (the pid file
    to the exit file: the learner and the shim's end), exited -> ended (the exit file to the round that
    committed the end), and each GPU's idle gap (one attempt's end committed to the next one's Start on it)."""
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT started_at, ended_at, log_dir, allocation FROM attempts "
                                        "WHERE ended_at IS NOT NULL")).all()
    finally:
        engine.dispose()
    launch, run, seen, booked_to_end = [], [], [], []
    per_gpu: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for started, ended_at, log_dir, allocation in rows:
        booked_to_end.append(1000 * (ended_at - started))
        with contextlib.suppress(OSError):
            pid_at = os.stat(Path(log_dir) / "rank-0.pid").st_mtime
            exit_at = os.stat(Path(log_dir) / "rank-0.exit").st_mtime
            launch.append(1000 * (pid_at - started))
            run.append(1000 * (exit_at - pid_at))
            seen.append(1000 * (ended_at - exit_at))
        alloc = allocation if isinstance(allocation, dict) else json.loads(allocation)
        for learner in alloc["learners"]:
            for gpu in learner["gpu_ids"]:
                per_gpu.setdefault((learner.get("node", ""), gpu), []).append((started, ended_at))
    gaps = []
    for spans in per_gpu.values():
        spans.sort()
        gaps += [1000 * (b[0] - a[1]) for a, b in itertools.pairwise(spans)]
    return {"attempts": len(rows), "booked_to_running_ms": _pcts(launch), "running_to_exited_ms": _pcts(run),
            "exited_to_ended_ms": _pcts(seen), "booked_to_ended_ms": _pcts(booked_to_end),
            "gpu_idle_gap_ms": _pcts(gaps)}


def queue_cli(server: Server, token: str, *args: str) -> float:
    return run_queue_cli(server, token, *args)[0]


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    server = Server(tmp / "data", "--nodes", "2x4:8cpu:32gb", "--tick", "0.05", "--grace", "1", db=args.db)
    try:
        token = server.tenant("bench", gpus=8, borrow=0)
        server_cpu = server.cpu_s()
        tree_cpu = tree_cpu_s(server)
        parts = tree_parts_s(server)
        load = os.getloadavg()[0]
        rounds_before, waits_before = loop_counts(server)
        client_cpu = cpu_s(os.getpid())
        first = time.perf_counter()
        submit_s, tally = asyncio.run(submit(server.url, token, args.clients, args.jobs, args.client))
        client_cpu = cpu_s(os.getpid()) - client_cpu
        ended_at_submitted = ended(server)
        latencies, errors = tally.latencies, tally.errors
        total = args.clients * (args.jobs // args.clients)
        with server.client(token) as c:
            api_started = time.perf_counter()
            page = c.get("/api/v1/queue", params={"limit": 50}).json()
            api_s = time.perf_counter() - api_started
        queued_then = page["total"]
        cli_s = queue_cli(server, token)
        cli_all_s = queue_cli(server, token, "--all")
        samples: list[tuple[float, int]] = []
        deadline = time.perf_counter() + args.timeout
        while time.perf_counter() < deadline:
            done = ended(server)
            samples.append((time.perf_counter() - first, done))
            if done >= total:
                break
            time.sleep(1.0)
        all_s = samples[-1][0]
        done = samples[-1][1]
        # The steady rate: between a tenth and nine tenths of the jobs ended.
        lo = next(t for t, n in samples if n >= total * 0.1)
        hi = next((t for t, n in samples if n >= total * 0.9), all_s)
        steady = (0.8 * total) / (hi - lo) if hi > lo else 0.0
        after_burst = (done - ended_at_submitted) / (all_s - submit_s) if all_s > submit_s else 0.0
        server_cpu = server.cpu_s() - server_cpu
        tree_cpu = tree_cpu_s(server) - tree_cpu
        parts = {k: v - parts.get(k, 0.0) for k, v in tree_parts_s(server).items()}
        round_count, waits = loop_counts(server)
        round_count -= rounds_before
        waits = {k: v - waits_before.get(k, 0) for k, v in waits.items()}
        latency = launch_latency(args.db or f"sqlite:///{tmp / 'data' / 'loadmaster.db'}")
    finally:
        code = server.stop()
        if args.server_log:  # its round lines ("loadmaster.rounds"): what each round did and how long it took
            Path(args.server_log).write_text("\n".join(server.lines) + "\n")
    lat_ms = sorted(x * 1000 for x in latencies)
    row = {"store": (args.db or "sqlite").split(":")[0].split("+")[0], "jobs": total, "clients": args.clients,
           "submit_per_s": total / submit_s, "submit_p50_ms": statistics.median(lat_ms),
           "submit_p99_ms": lat_ms[int(0.99 * (len(lat_ms) - 1))], "submit_errors": len(errors),
           "client": args.client, "client_cpu_ms_per_submission": 1000 * client_cpu / max(1, len(latencies)),
           "ended": done, "ended_per_s_overall": done / all_s, "ended_per_s_steady": steady, "total_s": all_s,
           "submit_s": submit_s, "ended_during_burst": ended_at_submitted,
           "ended_per_s_during_burst": ended_at_submitted / submit_s, "ended_per_s_after_burst": after_burst,
           "queue_api_s": api_s, "queue_cli_s": cli_s, "queue_cli_all_s": cli_all_s, "queued_at_queue": queued_then,
           "server_cpu_ms_per_job": 1000 * server_cpu / max(1, done),
           "tree_cpu_ms_per_job": 1000 * tree_cpu / max(1, done),
           "tree_ms_per_job_by_part": {k: round(1000 * v / max(1, done), 2) for k, v in parts.items()},
           "rounds": round_count, "rounds_per_job": round(round_count / max(1, done), 3), "coalesce_waits": waits,
           "latency": latency, "load_before": load, "server_exit": code,
           "error_sample": errors[:3], "timeline": [(round(t, 2), n) for t, n in samples]}
    print_table([row], ["store", "jobs", "client", "submit_per_s", "submit_p99_ms", "submit_errors", "ended",
                        "ended_per_s_overall", "ended_per_s_steady", "ended_per_s_during_burst",
                        "ended_per_s_after_burst", "queue_api_s", "queue_cli_s", "queue_cli_all_s",
                        "server_cpu_ms_per_job", "tree_cpu_ms_per_job", "client_cpu_ms_per_submission",
                        "load_before"])
    print("tree CPU ms per job by part:", row["tree_ms_per_job_by_part"])
    print(f"rounds: {round_count} ({row['rounds_per_job']} per job); latency ms:", latency)
    print("waits after busy rounds, by what ended them:", waits)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="a disposable database URL (default: SQLite in a temporary directory)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--client", choices=sorted(CLIENTS), default="lean",
                        help="the clients' HTTP code: lean (HTTP/1.1 by hand) or httpx (the old client)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--server-log", help="write the server's output (its round log lines) to this file")
    args = parser.parse_args()
    # PostgreSQL: a fresh database beside the one named (a reused one holds an earlier run's tenant, which makes
    # the run fail, or its unfinished jobs, which the server would start beside the tiny ones).
    with tempfile.TemporaryDirectory(prefix="lm-bench-throughput-") as tmp, fresh_database(args.db) as fresh:
        row = run(argparse.Namespace(**{**vars(args), "db": fresh}), Path(tmp))
    stem = "throughput" if not args.db else f"throughput_{row['store']}"
    print(f"wrote {write_results(stem, [row])}")


if __name__ == "__main__":
    main()
