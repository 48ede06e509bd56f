"""Accounting (`loadmaster usage`, GET /api/v1/usage and /usage/timeline) from a real store after real
attempts: one that completes, one that fails, one preempted and resumed. The figures must equal what the
attempts themselves say."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadmaster.platform.usage import Held, UsageBy, _days, timeline
from tests.cli.test_platform_cli import run
from tests.platform.api_fixtures import ADMIN_SECRET, Live, start_platform

# Attempt 1 checkpoints after a moment, then runs until it is stopped; attempt 2 ends at once.
RESUMABLE = ("import os, time\nfrom loadmaster import runtime\nif os.environ['LOADMASTER_ATTEMPT'] == '1':\n"
             "    time.sleep(0.5)\n    runtime.save_checkpoint(b'state', 1)\n    time.sleep(60)\n")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("usage")
    handle = start_platform(f"sqlite:///{root / 'lm.db'}", root / "data", nodes="1x2:8cpu:32gb", policy="priority",
                            grace_s=1.0)
    try:
        yield handle
    finally:
        handle.platform.shutdown()


def job(name: str, code: str, gpus: int, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, "-c", code], "resources": {"gpus": gpus, "cpus": 0.5},
            "retry": {"policy": "never"}, **fields}


@pytest.fixture(scope="module")
def ran(live: Live) -> dict[str, Any]:
    token = live.tenant("acct", gpus=2)
    with live.client(token) as c:
        ok = c.post("/api/v1/jobs", json=job("ok", "import time; time.sleep(0.5)", 2)).json()
        live.wait(token, ok["id"], "COMPLETED")
        bad = c.post("/api/v1/jobs", json=job("bad", "import time; time.sleep(0.5); raise SystemExit(2)", 1)).json()
        live.wait(token, bad["id"], "FAILED")
        low = c.post("/api/v1/jobs", json=job("low", RESUMABLE, 2)).json()
        live.wait(token, low["id"], "PROCESSING")
        time.sleep(1.5)  # past its checkpoint
        high = c.post("/api/v1/jobs", json=job("high", "pass", 2, priority=10)).json()
        jobs = {k: live.wait(token, j["id"], "COMPLETED", "FAILED", timeout_s=60)
                for k, j in {"ok": ok, "bad": bad, "low": low, "high": high}.items()}
    assert jobs["low"]["status"] == "COMPLETED" and jobs["low"]["preemptions"] == 1, jobs["low"]["history"]
    return {"token": token, "jobs": jobs, "other": live.tenant("other", gpus=2)}


def _hours(j: dict[str, Any], gpus: int, which: str = "all") -> float:
    out = 0.0
    for a in j["attempt_history"]:
        if which == "preempted" and a["failure_category"] != "preempted":
            continue
        if which == "failed" and a["outcome"] not in ("failed", "lost"):
            continue
        out += gpus * (a["ended_at"] - a["started_at"]) / 3600
    return out


def test_usage_by_job_equals_the_attempts(live: Live, ran: dict[str, Any]) -> None:
    jobs = ran["jobs"]
    with live.client(ran["token"]) as c:
        out = c.get("/api/v1/usage", params={"by": "job", "since": time.time() - 3600}).json()
    rows = {r["key"]: r for r in out["rows"]}
    gpus = {"ok": 2, "bad": 1, "low": 2, "high": 2}
    for name, j in jobs.items():
        row = rows[j["id"]]
        assert row["name"] == name
        assert row["gpu_hours"] == pytest.approx(_hours(j, gpus[name]), rel=1e-6)
        assert row["attempts"] == len(j["attempt_history"])
    assert rows[jobs["bad"]["id"]]["failed_gpu_hours"] == pytest.approx(_hours(jobs["bad"], 1), rel=1e-6)
    assert rows[jobs["ok"]["id"]]["failed_gpu_hours"] == 0
    low = rows[jobs["low"]["id"]]
    assert low["preempted_gpu_hours"] > 0
    assert low["preempted_gpu_hours"] == pytest.approx(_hours(jobs["low"], 2, "preempted"), rel=1e-6)
    assert low["preempted_gpu_hours"] < low["gpu_hours"]
    # lost: only the preempted attempt's time after its checkpoint (about a second of its 1.5 s and more)
    first = jobs["low"]["attempt_history"][0]
    took = first["ended_at"] - first["started_at"]
    assert 0 < low["lost_gpu_hours"] < low["preempted_gpu_hours"]
    assert low["lost_gpu_hours"] * 3600 / 2 < took - 0.4
    assert out["total"]["lost_gpu_hours"] == pytest.approx(low["lost_gpu_hours"])
    assert out["total"]["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] for r in out["rows"]))
    assert out["total"]["jobs"] == 4 and out["tenant"] == "acct"


def test_usage_by_day_and_tenant_and_windows(live: Live, ran: dict[str, Any]) -> None:
    with live.client(ran["token"]) as c:
        by_day = c.get("/api/v1/usage", params={"by": "day", "since": time.time() - 3600}).json()
        by_tenant = c.get("/api/v1/usage", params={"by": "tenant", "since": time.time() - 3600}).json()
        empty = c.get("/api/v1/usage", params={"since": 0, "until": 1000}).json()
        refused = c.get("/api/v1/usage", params={"tenant": "other"})
        backwards = c.get("/api/v1/usage", params={"since": 10, "until": 5})
        bogus = c.get("/api/v1/usage", params={"by": "bogus"})
    assert sum(r["gpu_hours"] for r in by_day["rows"]) == pytest.approx(by_day["total"]["gpu_hours"])
    assert [r["key"] for r in by_tenant["rows"]] == ["acct"]
    assert empty["rows"] == [] and empty["total"]["gpu_hours"] == 0
    assert refused.status_code == 403 and backwards.status_code == 422 and bogus.status_code == 422
    with live.client(ran["other"]) as c:  # another tenant sees none of it
        assert c.get("/api/v1/usage", params={"since": time.time() - 3600}).json()["total"]["gpu_hours"] == 0
    with live.client(ADMIN_SECRET) as c:
        everyone = c.get("/api/v1/usage", params={"by": "tenant", "since": time.time() - 3600}).json()
        one = c.get("/api/v1/usage", params={"tenant": "acct", "since": time.time() - 3600}).json()
    assert {r["key"] for r in everyone["rows"]} == {"acct"}
    assert one["total"]["gpu_hours"] == pytest.approx(by_day["total"]["gpu_hours"])


def test_timeline_integrates_to_the_gpu_hours(live: Live, ran: dict[str, Any]) -> None:
    since = min(a["started_at"] for j in ran["jobs"].values() for a in j["attempt_history"]) - 5
    until = time.time()
    with live.client(ran["token"]) as c:
        line = c.get("/api/v1/usage/timeline", params={"since": since, "until": until, "step_s": 1}).json()
        total = c.get("/api/v1/usage", params={"since": since, "until": until}).json()["total"]["gpu_hours"]
        too_fine = c.get("/api/v1/usage/timeline", params={"since": 0, "until": until, "step_s": 1})
    assert line["total_gpus"] == 2 and max(line["busy_gpus"]) <= 2 + 1e-9
    steps = [min(1.0, until - (since + i)) for i in range(len(line["busy_gpus"]))]
    assert sum(b * s for b, s in zip(line["busy_gpus"], steps, strict=True)) / 3600 == pytest.approx(total, rel=1e-6)
    assert too_fine.status_code == 422 and too_fine.json()["problems"][0]["field"] == "step_s"


def test_cli(live: Live, ran: dict[str, Any]) -> None:
    code, out = run(live, "usage", "--by", "job", "--since", "1h", token=ran["token"])
    assert code == 0, out
    assert ran["jobs"]["low"]["id"] in out and "preempted" in out and "lost" in out and "total" in out
    code, out = run(live, "usage", "--by", "bogus", token=ran["token"])
    assert code == 2 and "--by 'bogus'" in out
    code, out = run(live, "usage", "--since", "yesterday", token=ran["token"])
    assert code == 2 and "--since 'yesterday'" in out
    code, out = run(live, "usage", "--by", "tenant", "--since", "2020-01-01", admin=True)
    assert code == 0 and "acct" in out
    code, out = run(live, "usage", "--by", "user", "--since", "1h", admin=True)
    assert code == 0 and "acct/default" in out and "by user" in out, out


def test_days_split_at_utc_midnight() -> None:
    midnight = 1_764_028_800.0  # 2025-11-25T00:00:00Z
    pieces = list(_days(midnight - 1800, midnight + 3600))
    assert [(d, b - a) for d, a, b in pieces] == [("2025-11-24", 1800.0), ("2025-11-25", 3600.0)]
    assert UsageBy("day") is UsageBy.DAY


def _user_token(live: Live, tenant: str, user: str) -> str:
    with live.client(live.admin_token) as c:
        r = c.post(f"/api/v1/tenants/{tenant}/tokens", json={"user": user})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])


def test_usage_on_both_stores(db_url: str, tmp_path: Path) -> None:
    """The accounting query (allocations read as text, a window over the attempts, jobs' users) on SQLite and
    PostgreSQL. By user: each tenant's users apart, keyed tenant/user, so two tenants' "alice" do not add up."""
    handle = start_platform(db_url, tmp_path / "data", nodes="1x2:8cpu:32gb")
    try:
        token = handle.tenant("both", gpus=2)
        handle.tenant("rival", gpus=2)
        alice, bob = _user_token(handle, "both", "alice"), _user_token(handle, "both", "bob")
        rival_alice = _user_token(handle, "rival", "alice")
        done: dict[str, dict[str, Any]] = {}
        for who, tok, gpus in (("default", token, 2), ("alice", alice, 1), ("bob", bob, 2), ("rival", rival_alice, 1)):
            with handle.client(tok) as c:
                j = c.post("/api/v1/jobs", json=job(who, "import time; time.sleep(0.3)", gpus)).json()
            done[who] = handle.wait(tok, j["id"], "COMPLETED")
        since = time.time() - 600
        with handle.client(token) as c:
            out = c.get("/api/v1/usage", params={"by": "job", "since": since}).json()
            line = c.get("/api/v1/usage/timeline", params={"since": since}).json()
            mine = c.get("/api/v1/usage", params={"by": "user", "since": since}).json()
        with handle.client(handle.admin_token) as c:
            every = c.get("/api/v1/usage", params={"by": "user", "since": since}).json()
        assert {r["key"]: r["name"] for r in out["rows"]} == {done[w]["id"]: w for w in ("default", "alice", "bob")}
        assert out["total"]["gpu_hours"] == pytest.approx(
            _hours(done["default"], 2) + _hours(done["alice"], 1) + _hours(done["bob"], 2), rel=1e-6)
        assert max(line["busy_gpus"]) > 0
        # A tenant's token: its own users only.
        assert {r["key"] for r in mine["rows"]} == {"both/default", "both/alice", "both/bob"}
        rows = {r["key"]: r for r in every["rows"]}
        assert set(rows) == {"both/default", "both/alice", "both/bob", "rival/alice"}
        for key, who, gpus in (("both/default", "default", 2), ("both/alice", "alice", 1), ("both/bob", "bob", 2),
                               ("rival/alice", "rival", 1)):
            assert rows[key]["gpu_hours"] == pytest.approx(_hours(done[who], gpus), rel=1e-6)
            assert rows[key]["jobs"] == 1
        assert every["total"]["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] for r in every["rows"]))
    finally:
        handle.platform.shutdown()


@pytest.mark.parametrize(("since", "until"), [(1700340285.235002, 1700369406.7637432), (5.0, 5.0)])
def test_timeline_default_step_gives_the_window_in_200_points(since: float, until: float) -> None:
    # The API's default step is the window over 200; for these windows that step divides back to a hair
    # above 200, which once made a 201st bucket of width 0 (a ZeroDivisionError, answered 500).
    step = (until - since) / 200 or 1.0
    held = Held("j", "j", "t", "u", since, until, 2, failed=False, preempted=False)
    line = timeline([held], since, until, step)
    assert len(line) == (200 if until > since else 1)
    assert all(v >= 0 for v in line)
