"""Chaos against real `loadmaster server` processes, real learners, SQLite and PostgreSQL: kill -9 of the
server at random moments of every stage of the jobs' lives, store faults (another connection holds the
store's lock past the server's lock timeout: SQLite's busy timeout, PostgreSQL's lock_timeout), learners
killed, cancels, halts and resumes; then, once everything has settled:

- every job ended exactly once (one final transition, nothing after it) and the store's invariants hold
  (no GPU booked without a live attempt, a queued job holds none, one open attempt at most);
- no learner started twice for one attempt, nor for an attempt its job does not count;
- no learner process is left, and no child of a killed server (the queue estimator's) outlived it;
- the API answered 503 (never 500) while the store was locked.

The default suite runs one short scenario per store; `-m slow` runs the long ones whose counts
docs/benchmarks.md reports (`.venv/bin/python -m pytest -n 0 tests/e2e/test_chaos.py -m slow -s` prints them).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from loadmaster.platform.store.db import Store
from tests.e2e.harness import Server, kill_leftovers, wait_for
from tests.platform.invariants import Runs, attempts_of, check_store, learner_processes, recording

FINAL = ("COMPLETED", "FAILED", "CANCELLED")
SMALL = {"cpus": 0.1, "memory_gb": 0.1}


@dataclass
class Counts:
    jobs: int = 0
    kills: int = 0
    learner_kills: int = 0
    lock_windows: int = 0
    requests_503: int = 0
    requests_500: int = 0
    cancels: int = 0
    halts: int = 0
    attempts: int = 0
    lost: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Chaos:
    server: Server
    url: str  # the store, as the test reaches it (no timeouts in it)
    runs: Path
    rng: random.Random
    counts: Counts = field(default_factory=Counts)
    token: str = ""
    jobs: list[str] = field(default_factory=list)
    children: list[int] = field(default_factory=list)  # every child a killed server had

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response | None:
        """An API call that tolerates a server being down or restarting (None then)."""
        try:
            with self.server.http(self.token) as c:
                r = c.request(method, path, **kw)
        except httpx.HTTPError:
            return None
        if r.status_code == 503:
            self.counts.requests_503 += 1
        elif r.status_code >= 500:
            self.counts.requests_500 += 1
        return r

    def submit(self, kind: str) -> None:
        work = {"quick": "sleep 0.3", "medium": "sleep 2", "failing": 'test "$LOADMASTER_ATTEMPT" -gt 1 || exit 3',
                "long": "sleep 20"}[kind]
        gpus = self.rng.choice([1, 1, 2, 4])
        manifest = {"name": kind, "learners": 1 if gpus == 4 else self.rng.choice([1, 2]),
                    "resources": {"gpus": gpus, **SMALL}, "command": recording(self.runs, work),
                    "retry": {"policy": "always", "max_attempts": 3}}
        for _ in range(100):
            r = self.call("POST", "/api/v1/jobs", json=manifest)
            if r is not None and r.status_code == 201:
                self.jobs.append(r.json()["id"])
                self.counts.jobs += 1
                return
            time.sleep(0.2)
        raise AssertionError("a submission never went through")

    def poke(self) -> None:
        """A user acts on a random job: cancel, halt, or resume."""
        if not self.jobs:
            return
        job = self.rng.choice(self.jobs)
        verb = self.rng.choice(["cancel", "halt", "resume", "resume"])
        r = self.call("POST", f"/api/v1/jobs/{job}/{verb}")
        if r is not None and r.status_code == 200:
            if verb == "cancel":
                self.counts.cancels += 1
            elif verb == "halt":
                self.counts.halts += 1

    def kill_server(self) -> None:
        assert self.server.proc is not None
        self.children += descendants(self.server.proc.pid)
        self.server.kill9()
        self.counts.kills += 1
        time.sleep(self.rng.uniform(0.0, 1.0))
        self.server.start()

    def kill_learner(self) -> None:
        pids = learner_processes(self.server.data_dir)
        if pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.rng.choice(pids), signal.SIGKILL)
            self.counts.learner_kills += 1

    def lock_store(self, seconds: float, held: threading.Event, met: threading.Event) -> None:
        """Hold the store's write lock from another connection, longer than the server waits for it: `seconds`
        at least, and until the users have met it (`met`; on a loaded machine their requests may take longer
        than the window). `held` is set once the lock is taken."""
        self.counts.lock_windows += 1
        until = time.monotonic() + seconds
        if self.url.startswith("sqlite"):
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            held.set()
            met.wait(60)
            time.sleep(max(0.0, until - time.monotonic()))
            conn.execute("ROLLBACK")
            conn.close()
        else:
            with psycopg.connect(self.url, autocommit=False) as conn:
                conn.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
                held.set()
                met.wait(60)
                time.sleep(max(0.0, until - time.monotonic()))
                conn.rollback()

    def settle(self, timeout_s: float) -> dict[str, dict[str, Any]]:
        """Resume what is halted, then wait for every job to end."""
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.call("GET", "/api/v1/jobs", params={"limit": 10_000})
            jobs = {j["id"]: j for j in r.json()["jobs"]} if r is not None and r.status_code == 200 else {}
            for job in jobs.values():
                if job["status"] == "HALTED":
                    self.call("POST", f"/api/v1/jobs/{job['id']}/resume")
            if jobs and all(j["status"] in FINAL for j in jobs.values()) and len(jobs) == len(self.jobs):
                return jobs
            if time.monotonic() > deadline:
                pending = {k: (v["status"], v["status_reason"]) for k, v in jobs.items() if v["status"] not in FINAL}
                raise AssertionError(f"jobs still not done after {timeout_s} s: {pending}\n{self.server.log()[-6000:]}")
            time.sleep(0.3)

    def verdict(self) -> None:
        store = Store.open(self.url)
        try:
            self.counts.problems += check_store(store, settled=True)
            attempts = attempts_of(store)
            self.counts.problems += Runs.read(self.runs).problems(attempts)
            self.counts.attempts = sum(attempts.values())
            self.counts.lost = [j for j in self.jobs if j not in attempts]
        finally:
            store.close()
        wait_for(lambda: not learner_processes(self.server.data_dir), 20, "the learners to be gone")
        alive = [p for p in self.children if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
        self.counts.problems += [f"process {p} of a killed server outlived it" for p in alive]
        if self.counts.requests_500:
            self.counts.problems.append(f"{self.counts.requests_500} answers were 5xx other than 503")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


def _state(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@contextlib.contextmanager
def chaos_server(url: str, root: Path, seed: int) -> Iterator[Chaos]:
    """A server on `url` whose store gives up on a held lock after 0.5 s."""
    timed = f"{url}?timeout=0.5" if url.startswith("sqlite") else f"{url}?options=-c%20lock_timeout%3D500"
    server = Server(timed, root, grace_s=2.0)
    chaos = Chaos(server, url, root / "runs.log", random.Random(seed))
    try:
        server.start()
        with server.http() as c:
            r = c.post("/api/v1/tenants", json={"name": "chaos", "gpus": 8, "borrow": 0})
            assert r.status_code == 201, r.text
            chaos.token = r.json()["token"]
        yield chaos
    finally:
        try:
            server.stop()
        finally:
            kill_leftovers(root)


def run_scenario(chaos: Chaos, *, jobs: int, kills: int, locks: int, learner_kills: int, pokes: int,
                 settle_s: float) -> Counts:
    """Submit the jobs in waves, with the faults spread at random moments between them."""
    rng = chaos.rng
    kinds = rng.choices(["quick", "medium", "failing", "long"], weights=[5, 3, 2, 1], k=jobs)
    events = (["kill"] * kills + ["lock"] * locks + ["learner"] * learner_kills + ["poke"] * pokes)
    rng.shuffle(events)
    per_wave = max(1, len(events))
    step = max(1, jobs // per_wave)
    lockers: list[threading.Thread] = []
    for i, kind in enumerate(kinds):
        chaos.submit(kind)
        if i % step == step - 1 and events:
            event = events.pop()
            time.sleep(rng.uniform(0.0, 1.5))  # a random moment of the jobs' lives
            if event == "kill":
                chaos.kill_server()
            elif event == "lock":
                held, met = threading.Event(), threading.Event()
                locker = threading.Thread(target=chaos.lock_store, args=(rng.uniform(1.0, 3.0), held, met))
                locker.start()
                lockers.append(locker)
                held.wait(60)
                for _ in range(3):  # users meet the locked store
                    chaos.call("GET", "/api/v1/jobs")
                    chaos.call("POST", "/api/v1/jobs", json={"name": "during-a-lock", "command": ["true"],
                                                             "resources": {"gpus": 1, **SMALL}})
                met.set()
            elif event == "learner":
                chaos.kill_learner()
            else:
                chaos.poke()
    for locker in lockers:
        locker.join()
    # Submissions made during a lock that were answered 201 count; those answered 503 changed nothing.
    r = chaos.call("GET", "/api/v1/jobs", params={"limit": 10_000, "name": "during-a-lock"})
    if r is not None and r.status_code == 200:
        extra = [j["id"] for j in r.json()["jobs"]]
        chaos.jobs += extra
        chaos.counts.jobs += len(extra)
    for job in list(chaos.jobs):
        r = chaos.call("GET", f"/api/v1/jobs/{job}")
        if r is not None and r.json()["manifest"]["command"][-1].endswith("sleep 20"):
            chaos.call("POST", f"/api/v1/jobs/{job}/cancel")  # the long ones need not run out
    chaos.settle(settle_s)
    chaos.verdict()
    return chaos.counts


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_chaos_short(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url"))
    with chaos_server(url, tmp_path, seed=11) as chaos:
        counts = run_scenario(chaos, jobs=14, kills=2, locks=1, learner_kills=1, pokes=3, settle_s=150)
    assert counts.problems == [] and counts.lost == [], counts
    assert counts.kills == 2 and counts.requests_503 >= 1, counts


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_chaos_long(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url"))
    with chaos_server(url, tmp_path, seed=23) as chaos:
        counts = run_scenario(chaos, jobs=250, kills=10, locks=10, learner_kills=10, pokes=40, settle_s=900)
    print(f"\nchaos {store}: {json.dumps(counts.__dict__)}")
    assert counts.problems == [] and counts.lost == [], counts
