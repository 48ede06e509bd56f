"""The API served for real: uvicorn on a free port in a background thread, a real store (SQLite file or
PostgreSQL), real HTTP through httpx. Tests import the fixtures they use from here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadmaster.core.cluster import Cluster, Node
from loadmaster.platform.api.app import create_app
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.serving import ApiServer
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.tenants import create_tenant, ensure_admin_token

# Two servers of 4 GPUs, 16 CPUs and 64 GB each.
CLUSTER = Cluster((Node("n0", 4, 16.0, 64.0), Node("n1", 4, 16.0, 64.0)), name="test")


@dataclass
class Api:
    url: str
    admin_token: str
    store: Store
    ctx: ApiContext

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def admin(self) -> httpx.Client:
        return self.client(self.admin_token)

    def tenant(self, name: str, gpus: int = 8, borrow: int | None = None) -> str:
        """A new tenant's token (made in the store, as `tenant create` would)."""
        with self.store.session() as s:
            _, token = create_tenant(s, name, gpus, borrow, time.time())
        return token


def serve(store: Store, data_dir: Path, loop: Any = None, cluster: Cluster = CLUSTER) -> tuple[ApiServer, Api]:
    with store.session() as s:
        admin = ensure_admin_token(s, None, time.time())
    assert admin is not None
    ctx = ApiContext(store, cluster, JobDirs(data_dir), loop=loop, stream_poll_s=0.05)
    server = ApiServer(create_app(ctx), "127.0.0.1", 0, on_exit=ctx.closing.set)
    server.start_in_thread()
    return server, Api(server.url, admin, store, ctx)


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    """The API alone (no control loop) on SQLite and on PostgreSQL."""
    store = Store.open(db_url)
    server, handle = serve(store, tmp_path / "data")
    try:
        yield handle
    finally:
        server.stop()
        store.close()


@pytest.fixture
def sqlite_api(sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    """The API alone on SQLite only (for tests whose subject is not the store)."""
    store = Store.open(sqlite_url)
    server, handle = serve(store, tmp_path / "data")
    try:
        yield handle
    finally:
        server.stop()
        store.close()


def manifest(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "train", "command": ["python", "train.py"]}
    base.update(fields)
    return base


# ---------------------------------------------------------------------------------------------- the platform

ADMIN_SECRET = "test-admin-token-0123456789"


@dataclass
class Live:
    """A whole server (store, 2x4 virtual nodes, local executor, control loop, API) in this process."""

    platform: Any  # loadmaster.platform.server.Platform
    url: str
    admin_token: str

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def tenant(self, name: str, gpus: int = 8, borrow: int | None = None) -> str:
        with self.client(self.admin_token) as c:
            r = c.post("/api/v1/tenants", json={"name": name, "gpus": gpus, "borrow": borrow})
            assert r.status_code == 201, r.text
            return str(r.json()["token"])

    def wait(self, token: str, job_id: str, *statuses: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The job once it is in one of `statuses`."""
        deadline = time.monotonic() + timeout_s
        with self.client(token) as c:
            while True:
                job: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
                if job["status"] in statuses:
                    return job
                if time.monotonic() > deadline:
                    raise AssertionError(f"{job_id} is {job['status']}, not {statuses}: {job['history']}")
                time.sleep(0.05)

    @staticmethod
    def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


def start_platform(db_url: str, data_dir: Path, **options: Any) -> Live:
    from loadmaster.platform.server import Platform, ServerOptions

    options.setdefault("nodes", "2x4:8cpu:32gb")
    options.setdefault("tick_s", 0.1)
    options.setdefault("grace_s", 3.0)
    options.setdefault("policy", "fair")
    # Learners run the test's own Python (which may live where tenants' users cannot read it): as the server's
    # user and unconfined, several tenants allowed. tests/platform/test_isolation.py tests the isolation.
    options.setdefault("sandbox", "none")
    options.setdefault("tenant_users", False)
    options.setdefault("insecure_shared_user", True)
    opts = ServerOptions(db=db_url, port=0, data_dir=data_dir, dashboard=False, **options)
    platform = Platform.build(opts, env={"LOADMASTER_ADMIN_TOKEN": ADMIN_SECRET})
    url = platform.serve_in_thread()
    return Live(platform, url, ADMIN_SECRET)


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[Live]:
    """The whole platform on SQLite and on PostgreSQL."""
    handle = start_platform(db_url, tmp_path / "data")
    try:
        yield handle
    finally:
        handle.platform.shutdown()


@pytest.fixture
def sqlite_live(sqlite_url: str, tmp_path: Path) -> Iterator[Live]:
    handle = start_platform(sqlite_url, tmp_path / "data")
    try:
        yield handle
    finally:
        handle.platform.shutdown()
