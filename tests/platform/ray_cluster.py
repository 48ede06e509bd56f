"""A real multi-node Ray cluster on this machine for the tests and the benchmark: `ray start --head` and
worker raylets (`ray start --address`), each with a label loadmaster/node=NAME and fake GPUs, all in one
temp dir of their own. Everything it started is found by that dir (every Ray process names its session
dir) and killed by pid when it stops: never `ray stop`, which would stop other users' clusters too.

Ray notices a dead raylet by its health check; the cluster is started with a fast one (about 2 s instead
of Ray's default 15 s), as an operator who wants fast failover would configure it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadmaster.platform.executors.ports import free_port

RAY = str(Path(sys.executable).with_name("ray"))
FAST_HEALTH_CHECK = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "0",
}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids_with(text: str) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid() and text in _cmdline(int(p))]


@dataclass
class RayCluster:
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lmr-", dir="/tmp")))
    port: int = field(default_factory=free_port)
    workers: dict[str, int] = field(default_factory=dict)  # label -> the raylet's node manager port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a process that joins this cluster needs (a server, a driver)."""
        return {**os.environ, **FAST_HEALTH_CHECK, "RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "disabled",
                "RAY_USAGE_STATS_ENABLED": "0"}

    def _ray_start(self, *args: str) -> None:
        out = subprocess.run([RAY, "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats", *args],
                             env=self.env, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")

    def start(self, workers: dict[str, int]) -> RayCluster:
        """The head (no GPUs, label head) and one worker per label with that many fake GPUs."""
        self._ray_start("--head", f"--port={self.port}", f"--temp-dir={self.root}", "--num-cpus=1", "--num-gpus=0",
                        # the dashboard serves ray.util.state (what the tests check leftovers with)
                        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={free_port()}",
                        f"--dashboard-agent-listen-port={free_port()}",
                        f"--ray-client-server-port={free_port()}", "--labels=loadmaster/node=head")
        for label, gpus in workers.items():
            self.add_worker(label, gpus)
        return self

    def add_worker(self, label: str, gpus: int) -> None:
        manager = free_port()
        self._ray_start(f"--address={self.address}", f"--temp-dir={self.root}", "--num-cpus=2",
                        f"--num-gpus={gpus}", f"--node-manager-port={manager}",
                        f"--dashboard-agent-listen-port={free_port()}", f"--labels=loadmaster/node={label}")
        self.workers[label] = manager

    def raylet(self, label: str) -> int:
        found = [p for p in _pids_with(f"--node_manager_port={self.workers[label]}") if "raylet" in _cmdline(p)]
        if not found:
            raise LookupError(f"no raylet for worker {label}")
        return found[0]

    def kill_worker(self, label: str) -> float:
        """SIGKILL the worker's raylet (the node dies as a machine would); when it died (time.time())."""
        pid = self.raylet(label)
        os.kill(pid, signal.SIGKILL)
        at = time.time()
        # The raylet's helpers (its agents) would linger; a dead machine has none.
        for helper in _pids_with(f"--node-manager-port={self.workers[label]}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)
        del self.workers[label]
        return at

    def processes(self) -> list[int]:
        return _pids_with(str(self.root))

    def stop(self) -> None:
        """Kill every process of this cluster (by its temp dir), by pid."""
        for _ in range(3):
            pids = self.processes()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        subprocess.run(["rm", "-rf", str(self.root)], check=False)


ADMIN = "ray-tests-admin-token-0123456789abcdef"


class Server:
    """`loadmaster server --executor ray` in a child process joined to `cluster` (so it can be killed -9)."""

    def __init__(self, cluster: RayCluster, data_dir: Path, *args: str) -> None:
        self.env = {**cluster.env, "LOADMASTER_ADMIN_TOKEN": ADMIN}
        argv = [sys.executable, "-m", "loadmaster.cli.main", "server", "--executor", "ray", "--port", "0",
                "--data-dir", str(data_dir), "--tick", "0.2", "--grace", "5",
                # Ray's learners are not confined (docs/platform.md, Security): one tenant, the server's user.
                "--sandbox", "none", "--no-tenant-users", "--insecure-shared-user", *args]
        self.log = data_dir.with_suffix(".server.log")
        self._out = open(self.log, "ab")  # noqa: SIM115 - the child writes it for its whole life
        self._from = self.log.stat().st_size  # a restarted server appends: read only its own lines
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self._out, stderr=subprocess.STDOUT)
        self.url = ""
        deadline = time.monotonic() + 120
        while not self.url:
            text = self.output()
            for line in text.splitlines():
                if line.startswith("loadmaster server on "):
                    self.url = line.split(" on ", 1)[1].split()[0]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{text[-4000:]}")
            time.sleep(0.1)
        while "ready in" not in self.output():
            time.sleep(0.1)

    def output(self) -> str:
        with open(self.log, "rb") as f:
            f.seek(self._from)
            return f.read().decode(errors="replace")

    def http(self, token: str = ADMIN) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def cli(self, *args: str, token: str = ADMIN) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "LOADMASTER_URL": self.url, "LOADMASTER_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "loadmaster.cli.main", *args], env=env, capture_output=True,
                              text=True, timeout=60)

    def tenant(self, name: str, gpus: int) -> str:
        with self.http() as c:
            r = c.post("/api/v1/tenants", json={"name": name, "gpus": gpus})
            r.raise_for_status()
            return str(r.json()["token"])

    def job(self, token: str, job_id: str) -> dict[str, Any]:
        with self.http(token) as c:
            found: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
            return found

    def wait(self, token: str, job_id: str, *statuses: str, timeout_s: float = 120,
             until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.job(token, job_id)
            if job["status"] in statuses and (until is None or until(job)):
                return job
            if job["status"] in ("FAILED", "CANCELLED") and job["status"] not in statuses:
                break
            time.sleep(0.1)
        raise AssertionError(f"{job_id} did not reach {statuses}: {job.get('status')} "
                             f"{job.get('history', [])[-3:]}\n{self.log.read_text(errors='replace')[-3000:]}")

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._out.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
