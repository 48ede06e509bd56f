"""A real `loadmaster server` process, the real `loadmaster` CLI, and the clean-up that makes both safe.

The server runs as `python -m loadmaster.cli.main server` on a free port with its own data directory; its
stdout and stderr go to a file (a pipe nobody reads would block it, and a file survives kill -9 for the
diagnostics). Learners outlive the server by design, so every test ends by killing whatever still uses its
data directory: the learners (their environment names their checkpoint directory there) and their shims
(their stderr is a log file there).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ADMIN_TOKEN = "lm-e2e-admin-token-0123456789abcdef"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any LOADMASTER_* (a developer's own server must not leak in), with
    the virtual environment's bin first on PATH, as a user who activated it has (a manifest's `python`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADMASTER_")}
    env["PATH"] = os.pathsep.join([str(Path(PY).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str,
             detail: Callable[[], str] = lambda: "") -> Any:
    """Poll until predicate() is truthy; its value. On timeout the assertion says what, and detail()."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{detail()}")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------------ processes


def _uses(pid: str, marker: bytes) -> bool:
    """Whether a process's environment or open files point under the marker path."""
    proc = Path("/proc") / pid
    try:
        if marker in (proc / "environ").read_bytes():
            return True
        for fd in (proc / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd).encode().startswith(marker):
                    return True
    except OSError:
        return False
    return False


def _alive(pid: str) -> bool:
    try:
        state = (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def processes_under(root: Path, keep: tuple[int, ...] = ()) -> list[int]:
    """Live processes (not this one, nor `keep`) whose environment or open files name a path under `root`."""
    marker = (str(root.resolve()) + os.sep).encode()  # the separator: test_x1 must not match test_x10
    own = {os.getpid(), os.getppid(), *keep}
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and int(p.name) not in own and _alive(p.name) and _uses(p.name, marker)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_leftovers(root: Path, keep: tuple[int, ...] = ()) -> list[int]:
    """SIGKILL every process still using `root` (learners, shims; not `keep`, a server still running there,
    which holds the data directory's lock), until none is left; what was found."""
    found: list[int] = []
    for _ in range(20):  # a shim may start its learner between two scans
        pids = processes_under(root, keep)
        if not pids:
            break
        found += pids
        kill_all(pids)
        time.sleep(0.05)
    return found


def learner_pids(job_id: str, rank: int | None = None) -> list[int]:
    """Live learner processes of a job (their environment names it), optionally of one rank."""
    wanted = [f"LOADMASTER_JOB_ID={job_id}".encode()]
    if rank is not None:
        wanted.append(f"RANK={rank}".encode())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _alive(entry.name):
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(w in environ for w in wanted):
            found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------------------------------- server


@dataclass
class Server:
    """`loadmaster server --executor local --nodes 2x4` as a process; start() again after kill9() restarts it
    on the same port, store and data directory."""

    db: str
    root: Path
    port: int = field(default_factory=free_port)
    grace_s: float = 5.0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def log_path(self, start: int | None = None) -> Path:
        return self.root / f"server-{self.starts if start is None else start}.log"

    def log(self) -> str:
        logs = sorted(self.root.glob("server-*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in logs)

    def start(self, timeout_s: float = 90.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "the server is running already"
        self.starts += 1
        self.root.mkdir(parents=True, exist_ok=True)
        args = [PY, "-m", "loadmaster.cli.main", "server", "--db", self.db, "--executor", "local", "--nodes", "2x4",
                "--data-dir", str(self.data_dir), "--port", str(self.port), "--tick", "0.1",
                "--grace", str(self.grace_s),
                # These scenarios are about crashes and faults, not confinement (tests/platform/test_isolation.py):
                # the learners run this virtual environment's Python, under /root, out of a tenant user's reach.
                "--sandbox", "none", "--no-tenant-users", "--insecure-shared-user"]
        with self.log_path().open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.root, env=clean_env({"LOADMASTER_ADMIN_TOKEN": ADMIN_TOKEN}))
        wait_for(self._ready, timeout_s, f"the server to answer on {self.url}", self.log)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited with {self.proc.returncode}\n{self.log()}")
        if "ready in" not in self.log_path().read_text(errors="replace"):
            return False
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int | None:
        """SIGTERM (a clean stop), SIGKILL if that takes too long; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        # A round that raised is a bug whatever the scenario (store errors, injected or not, are not that)
        assert "control loop round failed" not in self.log(), self.log()[-6000:]
        return self.proc.returncode

    # -- talking to it -----------------------------------------------------------------------------------

    def http(self, token: str = ADMIN_TOKEN) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def cli(self, *args: str, token: str | None = None, input_text: str | None = None,
            timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        """The `loadmaster` command against this server (LOADMASTER_URL, LOADMASTER_TOKEN or the admin's)."""
        env = clean_env({"LOADMASTER_URL": self.url, "COLUMNS": "200"})
        if token is None:
            env["LOADMASTER_ADMIN_TOKEN"] = ADMIN_TOKEN
        else:
            env["LOADMASTER_TOKEN"] = token
        return subprocess.run([PY, "-m", "loadmaster.cli.main", *args], env=env, cwd=REPO, text=True,
                              capture_output=True, input=input_text, timeout=timeout_s, check=False)

    def tenant(self, name: str, gpus: int = 8, borrow: int = 0) -> str:
        """`loadmaster tenant create NAME --gpus N --borrow B`: the new tenant's token."""
        done = self.cli("tenant", "create", name, "--gpus", str(gpus), "--borrow", str(borrow), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return str(json.loads(done.stdout)["token"])

    def submit(self, manifest_file: Path, token: str) -> str:
        """`loadmaster job submit FILE --json`: the job's id."""
        done = self.cli("job", "submit", str(manifest_file), "--json", token=token)
        assert done.returncode == 0, done.stdout + done.stderr
        return str(json.loads(done.stdout)["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        with self.http() as c:
            r = c.get(f"/api/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job: dict[str, Any] = r.json()
        return job

    def jobs(self) -> list[dict[str, Any]]:
        with self.http() as c:
            r = c.get("/api/v1/jobs", params={"limit": 10_000})
        assert r.status_code == 200, r.text
        return list(r.json()["jobs"])

    def wait_job(self, job_id: str, predicate: Callable[[dict[str, Any]], bool], what: str,
                 timeout_s: float = 60.0) -> dict[str, Any]:
        seen: list[dict[str, Any]] = []

        def check() -> dict[str, Any] | None:
            job = self.job(job_id)
            seen[:] = [job]
            return job if predicate(job) else None

        def detail() -> str:
            last = seen[0] if seen else {}
            shown = {k: last.get(k) for k in ("status", "history", "attempt_history", "progress")}
            return f"job {job_id}: {json.dumps(shown, indent=1)}\n{self.log()[-4000:]}"

        found: dict[str, Any] = wait_for(check, timeout_s, f"job {job_id} to be {what}", detail)
        return found

    def wait_status(self, job_id: str, *statuses: str, timeout_s: float = 60.0) -> dict[str, Any]:
        return self.wait_job(job_id, lambda j: j["status"] in statuses, " or ".join(statuses), timeout_s)


@contextmanager
def pg_database() -> Iterator[str]:
    """A PostgreSQL database of its own (for a module's server; tests.platform.conftest's pg_url is per test)."""
    import uuid

    import psycopg

    from tests.platform.conftest import PG_ADMIN_URL

    name = f"lm_e2e_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def running_server(db: str, root: Path, grace_s: float = 5.0) -> Iterator[Server]:
    """A started server; afterwards the server is stopped and every process left under `root` is killed, even
    when the test failed."""
    server = Server(db, root, grace_s=grace_s)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            kill_leftovers(root)


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> Path:
    """A manifest file (JSON is YAML: `job submit` reads both)."""
    path.write_text(json.dumps(dict(manifest), indent=2) + "\n")
    return path
