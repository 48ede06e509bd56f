"""A running platform for the dashboard tests, and the API calls the tests make around the browser."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadmaster.platform.server import ADMIN_ENV, ServerOptions
from loadmaster.platform.server import Platform as ServerPlatform

ADMIN_TOKEN = "lm-admin-web-tests-0123456789abcdef"


@dataclass
class Platform:
    url: str
    admin: str
    tokens: dict[str, str] = field(default_factory=dict)  # tenant -> token

    def call(self, method: str, path: str, token: str, **kw: Any) -> Any:
        r = httpx.request(method, self.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10, **kw)
        assert r.status_code < 400, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def add_tenant(self, name: str, gpus: int) -> str:
        out = self.call("POST", "/api/v1/tenants", self.admin, json={"name": name, "gpus": gpus, "borrow": 0})
        self.tokens[name] = out["token"]
        return str(out["token"])

    def submit(self, tenant: str, **manifest: Any) -> str:
        return str(self.call("POST", "/api/v1/jobs", self.tokens[tenant], json=manifest)["id"])

    def job(self, tenant: str, job_id: str) -> Any:
        return self.call("GET", f"/api/v1/jobs/{job_id}", self.tokens[tenant])

    def cancel_everything(self, timeout_s: float = 20.0) -> None:
        """Cancel every unfinished job and wait for them to end: the server keeps learners running across its own
        shutdown (a restart re-attaches them), so a test that leaves one running would leak its processes."""
        active = ["QUEUED", "DOWNLOADING", "PROCESSING", "STORING", "HALTED"]
        jobs = self.call("GET", "/api/v1/jobs", self.admin, params={"status": active, "limit": 10_000})["jobs"]
        for job in jobs:
            httpx.post(f"{self.url}/api/v1/jobs/{job['id']}/cancel", timeout=10,
                       headers={"Authorization": f"Bearer {self.admin}"})  # one that just ended answers 409
        deadline = time.monotonic() + timeout_s
        while self.call("GET", "/api/v1/jobs", self.admin, params={"status": active})["jobs"]:
            assert time.monotonic() < deadline, "jobs still running after cancelling them all"
            time.sleep(0.1)

    def wait_status(self, tenant: str, job_id: str, *statuses: str, timeout_s: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(tenant, job_id)
            if job["status"] in statuses:
                return job
            assert time.monotonic() < deadline, f"{job_id} still {job['status']} after {timeout_s}s, not {statuses}"
            time.sleep(0.1)


@contextmanager
def running_platform(root: Path) -> Iterator[Platform]:
    """`loadmaster server --nodes 2x4 --executor local` with its data and SQLite file under `root`, the API in a
    background thread on a free port."""
    server = ServerPlatform.build(
        ServerOptions(db=f"sqlite:///{root / 'loadmaster.db'}", executor="local", nodes="2x4", port=0,
                      data_dir=root / "data", tick_s=0.2, grace_s=2.0, sandbox="none", tenant_users=False,
                      insecure_shared_user=True),
        env={ADMIN_ENV: ADMIN_TOKEN})
    try:
        url = server.serve_in_thread()
        platform = Platform(url, ADMIN_TOKEN)
        try:
            yield platform
        finally:
            platform.cancel_everything()
    finally:
        server.shutdown()
