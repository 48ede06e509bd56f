"""The API when things go wrong: a busy store answers 503 with Retry-After (never a 500, and nothing half
written), an unexpected error is a 500 that keeps the client's connection, /health fails when the control
loop is stuck, /metrics exposes the loop to the admin, and the queue is paginated."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event

from tests.platform.api_fixtures import Live, manifest, start_platform
from tests.platform.faults import StoreFaults
from tests.platform.invariants import check_store


@pytest.fixture
def faulty_live(db_url: str, tmp_path: Path) -> Iterator[tuple[Live, StoreFaults]]:
    handle = start_platform(db_url, tmp_path / "data")
    faults = StoreFaults(handle.platform.store)
    try:
        yield handle, faults
    finally:
        faults.close()
        handle.platform.shutdown()


def _loop_thread(live: Live) -> int | None:
    thread = live.platform.loop._thread
    return thread.ident if thread is not None else None


def test_a_busy_store_is_503_with_retry_after_and_changes_nothing(faulty_live: tuple[Live, StoreFaults]) -> None:
    live, faults = faulty_live
    token = live.tenant("vision")
    with live.client(token) as c:
        job = c.post("/api/v1/jobs", json=manifest(name="kept", command=["sleep", "60"])).json()["id"]
        before = c.get(f"/api/v1/jobs/{job}").json()
        with faults.everywhere(rate=1.0, spare=(_loop_thread(live),)):
            answers = [c.post("/api/v1/jobs", json=manifest(name="lost")), c.post(f"/api/v1/jobs/{job}/cancel"),
                       c.post(f"/api/v1/jobs/{job}/halt")]
        for r in answers:
            assert r.status_code == 503, r.text
            assert r.headers["Retry-After"] == "1" and "retry" in r.json()["error"]
        after = c.get(f"/api/v1/jobs/{job}").json()
        assert (after["cancel_requested"], after["halt_requested"]) == (before["cancel_requested"], False)
        assert [j["name"] for j in c.get("/api/v1/jobs").json()["jobs"]] == ["kept"]
        assert c.post(f"/api/v1/jobs/{job}/cancel").status_code == 200  # the retry goes through
    assert check_store(live.platform.store) == []


def test_an_unexpected_error_is_a_500_that_keeps_the_connection(faulty_live: tuple[Live, StoreFaults]) -> None:
    live, _ = faulty_live
    token = live.tenant("vision")
    engine = live.platform.store.engine

    def broken(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "FROM jobs" in statement and "LIMIT" in statement:
            raise RuntimeError("a bug on the list path")

    host, port = live.url.removeprefix("http://").split(":")
    event.listen(engine, "before_cursor_execute", broken)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            first = _request(sock, "/api/v1/jobs", token)
            second = _request(sock, "/api/v1/whoami", token)  # the same connection, still open
    finally:
        event.remove(engine, "before_cursor_execute", broken)
    assert first.startswith("HTTP/1.1 500") and "internal error" in first
    assert second.startswith("HTTP/1.1 200") and "vision" in second


def _request(sock: socket.socket, path: str, token: str) -> str:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    length = int(lengths[0])
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode()


def test_health_fails_while_the_loop_is_stuck_and_metrics_are_the_admins(sqlite_url: str, tmp_path: Path) -> None:
    live = start_platform(sqlite_url, tmp_path / "data")
    try:
        loop = live.platform.loop
        loop.stuck_after_s = 0.5
        with httpx.Client(base_url=live.url, timeout=10) as c:
            ok = c.get("/health")
            assert ok.status_code == 200 and ok.json()["status"] == "ok" and ok.json()["last_round_age_s"] < 5
            with loop._lock:  # a round that never ends: the loop's thread waits here
                loop.wake()
                time.sleep(1.0)
                stuck = c.get("/health")
            assert stuck.status_code == 503 and stuck.json()["status"] == "stuck" and "Retry-After" in stuck.headers
            deadline = time.monotonic() + 10
            while c.get("/health").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert c.get("/health").status_code == 200
        token = live.tenant("vision")
        with live.client(token) as c:
            assert c.get("/metrics").status_code == 403
            c.post("/api/v1/jobs", json=manifest(command=["true"]))
        with live.client(live.admin_token) as c:
            deadline = time.monotonic() + 20
            while 'status="COMPLETED"' not in (text := c.get("/metrics").text) and time.monotonic() < deadline:
                time.sleep(0.1)
        for name in ('loadmaster_jobs{status="COMPLETED",tenant="vision"} 1.0', "loadmaster_queue_length",
                     'loadmaster_gpus_free{node="gpu-000"} 4.0', "loadmaster_round_seconds_bucket",
                     "loadmaster_decide_seconds_count", "loadmaster_last_round_age_seconds",
                     'loadmaster_attempt_ends_total{failure_class="",outcome="succeeded"}'):
            assert name in text, name
    finally:
        live.platform.shutdown()


def test_a_round_that_raises_is_counted_and_the_loop_goes_on(sqlite_url: str, tmp_path: Path) -> None:
    """A bug in a round does not end the loop, and /metrics counts it by error (else a round failing every
    time, as the estimator's pickling of the registry's placers once did, shows only in the log)."""
    live = start_platform(sqlite_url, tmp_path / "data")
    try:
        loop = live.platform.loop
        follow = loop._follow_nodes
        raised: list[int] = []

        def broken(*args: object, **kwargs: object) -> None:
            if not raised:
                raised.append(1)
                raise RuntimeError("a bug")
            follow(*args, **kwargs)  # type: ignore[arg-type]

        loop._follow_nodes = broken  # type: ignore[method-assign]
        loop.wake()
        token = live.tenant("vision")
        with live.client(token) as c:
            job = c.post("/api/v1/jobs", json=manifest(command=["true"])).json()["id"]
        with live.client(live.admin_token) as c:
            deadline = time.monotonic() + 20
            while (c.get(f"/api/v1/jobs/{job}").json()["status"] != "COMPLETED"
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            assert c.get(f"/api/v1/jobs/{job}").json()["status"] == "COMPLETED"
            assert 'loadmaster_round_failures_total{error="RuntimeError"} 1.0' in c.get("/metrics").text
    finally:
        live.platform.shutdown()


def test_the_queue_is_paginated(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loadmaster.platform import client as client_module
    from loadmaster.platform.api.models import QueueOut

    live = start_platform(sqlite_url, tmp_path / "data")
    try:
        mine, theirs = live.tenant("vision"), live.tenant("speech")
        with live.client(mine) as c:
            c.post("/api/v1/jobs", json=manifest(name="blocker", learners=2, resources={"gpus": 4},
                                                 command=["sleep", "60"]))
            ids = [c.post("/api/v1/jobs", json=manifest(name=f"w{i}", command=["true"])).json()["id"]
                   for i in range(25)]
        with live.client(theirs) as c:
            other = c.post("/api/v1/jobs", json=manifest(name="theirs", command=["true"])).json()["id"]
        with live.client(mine) as c:
            deadline = time.monotonic() + 20
            while c.get("/api/v1/queue").json()["total"] != 25 and time.monotonic() < deadline:
                time.sleep(0.1)
            pages, offset = [], 0
            while offset is not None:
                page = c.get("/api/v1/queue", params={"limit": 10, "offset": offset}).json()
                assert QueueOut.model_validate(page).model_dump(mode="json") == page  # written by hand (api/queue.py)
                assert page["total"] == 25 and page["limit"] == 10
                pages.append(page)
                offset = page["next_offset"]
            assert [len(p["entries"]) for p in pages] == [10, 10, 5]
            entries = [e for p in pages for e in p["entries"]]
            assert {e["job_id"] for e in entries} == set(ids) and other not in {e["job_id"] for e in entries}
            assert [e["position"] for e in entries] == sorted(e["position"] for e in entries)
        monkeypatch.setattr(client_module, "QUEUE_PAGE_MAX", 10)  # the client's pages: 10, 10, 5 as above
        with client_module.Client(live.url, mine) as api:
            assert [e["job_id"] for e in api.queue()] == [e["job_id"] for e in entries]
            assert [e["job_id"] for e in api.queue(limit=12)] == [e["job_id"] for e in entries[:12]]
        with live.client(live.admin_token) as c:
            assert c.get("/api/v1/queue", params={"limit": 1}).json()["total"] == 26
    finally:
        live.platform.shutdown()


def test_the_first_start_on_a_busy_port_makes_nothing(tmp_path: Path) -> None:
    from loadmaster.platform.server import Platform, ServerOptions

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # tenant_users off: the test's data directory is under one closed to other users (/tmp/pytest-of-root).
        options = ServerOptions(port=port, data_dir=tmp_path / "data", nodes="1x1", dashboard=False,
                                tenant_users=False)
        with pytest.raises(OSError, match="cannot listen"):
            Platform.build(options, env={})
    assert not (tmp_path / "data" / "loadmaster.db").exists()  # no store, so no admin token nobody saw
    first = Platform.build(ServerOptions(port=0, data_dir=tmp_path / "data", nodes="1x1", dashboard=False,
                                         tenant_users=False), env={})
    try:
        assert first.admin_token is not None  # the first start that works makes (and shows) the token
        from loadmaster.platform.server import ServerError

        with pytest.raises(ServerError, match="another loadmaster server"):
            Platform.build(ServerOptions(port=0, data_dir=tmp_path / "data", nodes="1x1", dashboard=False,
                                         tenant_users=False), env={})
    finally:
        first.shutdown()

