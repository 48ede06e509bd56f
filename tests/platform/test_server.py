"""`loadmaster server` as a user runs it: a process that prints where it listens (and the admin token once),
stops cleanly on SIGTERM, refuses bad options with one line, and picks up its running jobs after a restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from loadmaster.cli.main import app
from tests.platform.process_output import ProcessOutput

# Learners run the test's own Python: as the server's user, unconfined (tests/platform/test_isolation.py
# tests the isolation).
SERVER = [sys.executable, "-m", "loadmaster.cli.main", "server", "--sandbox", "none", "--no-tenant-users",
          "--insecure-shared-user"]


class Proc(ProcessOutput):
    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOADMASTER_")}
        self.p = subprocess.Popen([*SERVER, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**full_env, **(env or {})})
        super().__init__(self.p)

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        code = self.p.wait(timeout=30)
        time.sleep(0.1)
        return code


def _url(line: str) -> str:
    return line.split(" on ", 1)[1].split()[0]


def test_first_start_prints_the_admin_token_once_and_sigterm_stops_cleanly(tmp_path: Path) -> None:
    args = ["--nodes", "1x2", "--port", "0", "--data-dir", str(tmp_path)]
    first = Proc(args)
    try:
        url = _url(first.until("loadmaster server on"))
        # Started without a sandbox (SERVER's options): it says so, and that it takes several tenants.
        assert "learners run as the server's OS user, NO sandbox" in first.until("isolation")
        assert "--insecure-shared-user" in first.until("WARNING")
        first.until("Admin token")
        token = first.until("lm_").strip()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
            assert c.get("/api/v1/whoami").json()["admin"] is True
            health = c.get("/health").json()
            assert health["scheduler"] is True and health["sandbox"] is False and health["tenant_users"] is False
            assert c.get("/docs").status_code == 200
    finally:
        code = first.stop()
    assert code == 0, first.rest()
    assert "stopped" in first.rest()
    assert (tmp_path / "loadmaster.db").is_file()  # the default store lives in the data directory

    second = Proc(args)
    try:
        second.until("ready in")
    finally:
        assert second.stop() == 0
    assert "Admin token" not in second.rest()  # printed once, at the first start only


@pytest.mark.parametrize(("args", "words"), [
    (["--policy", "best"], "--policy 'best': choose one of"),
    (["--placement", "anywhere"], "--placement 'anywhere': choose one of"),
    (["--nodes", "lots"], "--nodes 'lots'"),
    (["--executor", "k8s"], "--executor 'k8s'"),
    (["--db", "mysql://x/y"], "only sqlite:// and postgresql://"),
])
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, ["server", "--data-dir", str(tmp_path), "--port", "0", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["server", "--data-dir", str(tmp_path), "--nodes", "1x1", "--port",
                                          str(port)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output and "Traceback" not in result.output


def test_a_restart_picks_up_the_running_job(tmp_path: Path) -> None:
    admin = "restart-admin-token-0123456789"
    args = ["--nodes", "1x2", "--port", "0", "--data-dir", str(tmp_path), "--grace", "3"]
    env = {"LOADMASTER_ADMIN_TOKEN": admin}
    first = Proc(args, env)
    try:
        url = _url(first.until("loadmaster server on"))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=10) as c:
            c.post("/api/v1/tenants", json={"name": "vision", "gpus": 2})
            job_id = c.post("/api/v1/jobs", params={"tenant": "vision"}, json={
                "name": "outlives", "command": [sys.executable, "-c", "import time; time.sleep(4); print('done')"],
            }).json()["id"]
            for _ in range(200):
                if c.get(f"/api/v1/jobs/{job_id}").json()["status"] == "PROCESSING":
                    break
                time.sleep(0.05)
    finally:
        assert first.stop() == 0, first.rest()
    second = Proc(args, env)
    try:
        url = _url(second.until("loadmaster server on"))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=10) as c:
            for _ in range(300):
                job = c.get(f"/api/v1/jobs/{job_id}").json()
                if job["status"] in ("COMPLETED", "FAILED"):
                    break
                time.sleep(0.1)
            assert job["status"] == "COMPLETED", job
            assert job["attempts"] == 1  # re-attached, not relaunched
            assert c.get(f"/api/v1/jobs/{job_id}/logs").json()["ranks"][0]["lines"] == ["done"]
    finally:
        assert second.stop() == 0, second.rest()


def test_the_checkpoint_interval_reaches_the_policies_that_weigh_it() -> None:
    from loadmaster.platform.server import ServerOptions, server_policy

    assert server_policy(ServerOptions(policy="priority", checkpoint_interval_s=60.0)).checkpoint_interval_s == 60.0
    assert server_policy(ServerOptions(policy="las")).checkpoint_interval_s == 900.0  # the policy's default
    assert server_policy(ServerOptions(policy="fifo", checkpoint_interval_s=60.0)).name == "fifo"  # none to weigh
