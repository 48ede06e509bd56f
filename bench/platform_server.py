"""Shared by the platform benchmarks: a real `loadmaster server` child process, and waiting on it over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from common import ROOT

ADMIN = "bench-admin-token-0123456789abcdef"


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """`loadmaster server` in a child process, on a free port; `url` once it has printed where it listens."""

    def __init__(self, data_dir: Path, *args: str, db: str | None = None) -> None:
        # The learners run this Python, which tenants' own users may not be able to read: as the server's user,
        # unconfined (the sandbox's cost is bench_sandbox.py's).
        argv = [sys.executable, "-m", "loadmaster.cli.main", "server", "--port", "0", "--data-dir", str(data_dir),
                "--sandbox", "none", "--no-tenant-users", "--insecure-shared-user", *args]
        if db:
            argv += ["--db", db]
        env = {**os.environ, "LOADMASTER_ADMIN_TOKEN": ADMIN}
        self.started_at = time.time()  # wall clock: compared with times the server records
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self.url = ""
        self.ready_s = 0.0  # until it printed "ready"
        self.ready_cpu_s = 0.0  # CPU time the server had used by then
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(120) or not self.url:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.lines[-30:]))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("loadmaster server on "):
                self.url = line.split(" on ", 1)[1].split()[0]
            if "ready in" in line:
                self.ready_s = time.perf_counter() - self.started
                self.ready_cpu_s = cpu_s(self.proc.pid)
                self._ready.set()
        self._ready.set()

    def cpu_s(self) -> float:
        return cpu_s(self.proc.pid)

    def client(self, token: str = ADMIN, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kw)

    def tenant(self, name: str, gpus: int, borrow: int | None = None) -> str:
        with self.client() as c:
            r = c.post("/api/v1/tenants", json={"name": name, "gpus": gpus, "borrow": borrow})
            r.raise_for_status()
            return str(r.json()["token"])

    def wait_status(self, token: str, job_id: str, *statuses: str, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.client(token) as c:
            while time.monotonic() < deadline:
                job: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
                if job["status"] in statuses:
                    return job
                time.sleep(0.01)
        raise RuntimeError(f"{job_id} did not reach {statuses}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextmanager
def fresh_database(url: str | None) -> Iterator[str | None]:
    """SQLite: None (the server's default file in its fresh data directory). PostgreSQL: a new database beside
    the one named in the URL, dropped afterwards, so that every row starts with an empty store."""
    if url is None:
        yield None
        return
    import psycopg

    base, name = url.rsplit("/", 1)
    fresh = f"{name}_bench_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{fresh}"')
    try:
        yield f"{base}/{fresh}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')


def run_queue_cli(server: Server, token: str, *args: str) -> tuple[float, str]:
    """One `loadmaster queue ...` process against the server, as a user runs it: its wall seconds and its output."""
    env = {**os.environ, "LOADMASTER_URL": server.url, "LOADMASTER_TOKEN": token}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "queue", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    return took, done.stdout
