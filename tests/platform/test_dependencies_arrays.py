"""Slurm's daily tools on the platform: dependencies (after, afterany, afterok), job arrays with a
concurrency limit and LOADMASTER_ARRAY_INDEX, and resources.gpu_type. A real server over HTTP, real
learner processes, a real SQLite store."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_platform_cli import run
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api, Live, start_platform


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    handle = start_platform(f"sqlite:///{tmp_path / 'lm.db'}", tmp_path / "data",
                            nodes="1x4:a100:8cpu:32gb,1x4:v100:8cpu:32gb")
    try:
        yield handle
    finally:
        handle.platform.shutdown()


def job(name: str, code: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, "-c", code], "resources": {"gpus": 1, "cpus": 0.5},
            "retry": {"policy": "never"}, **fields}


def submit(c: httpx.Client, manifest: dict[str, Any]) -> dict[str, Any]:
    r = c.post("/api/v1/jobs", json=manifest)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


SLOW_OK = "import time; time.sleep(1.5)"
FAILS = "import time; time.sleep(0.5); raise SystemExit(3)"


def test_dependencies(live: Live) -> None:
    token = live.tenant("deps")
    with live.client(token) as c:
        a = submit(c, job("a", SLOW_OK))
        x = submit(c, job("x", FAILS))
        b = submit(c, job("b", "pass", afterok=[a["id"]]))
        d = submit(c, job("d", "pass", after=[a["id"]]))  # Slurm's `after`: once a has started
        e = submit(c, job("e", "pass", afterany=[x["id"]]))
        f = submit(c, job("f", "pass", afterok=[x["id"]]))
        g = submit(c, job("g", "pass", afterok=[f["id"]]))  # a chain of afterok fails all along
        waiting = live.wait(token, b["id"], "QUEUED")
        assert waiting["status"] == "QUEUED"
        bad = c.post("/api/v1/jobs", json=job("h", "pass", afterok=["j-000000000000"]))
        assert bad.status_code == 422 and bad.json()["problems"][0]["field"] == "afterok"
    done = {k: live.wait(token, j["id"], "COMPLETED", "FAILED", "CANCELLED", timeout_s=60)
            for k, j in {"a": a, "x": x, "b": b, "d": d, "e": e, "f": f, "g": g}.items()}
    assert {k: v["status"] for k, v in done.items()} == {"a": "COMPLETED", "x": "FAILED", "b": "COMPLETED",
                                                          "d": "COMPLETED", "e": "COMPLETED", "f": "FAILED",
                                                          "g": "FAILED"}
    assert done["b"]["first_started_at"] >= done["a"]["finished_at"]
    assert done["d"]["first_started_at"] >= done["a"]["first_started_at"]
    assert done["e"]["first_started_at"] >= done["x"]["finished_at"]
    assert f"afterok dependency {x['id']} ended FAILED" in done["f"]["status_reason"]
    assert done["f"]["attempts"] == 0 and done["g"]["attempts"] == 0
    assert f"afterok dependency {f['id']} ended FAILED" in done["g"]["status_reason"]


def test_wait_reason_and_queue_say_dependency(live: Live) -> None:
    token = live.tenant("why")
    with live.client(token) as c:
        a = submit(c, job("a", "import time; time.sleep(30)"))
        b = submit(c, job("b", "pass", afterok=[a["id"]]))
        live.wait(token, a["id"], "PROCESSING")
        for _ in range(100):
            shown = c.get(f"/api/v1/jobs/{b['id']}").json()
            if shown["wait_reason"] == "dependency" and shown["queue"]:
                break
            time.sleep(0.05)
        assert shown["wait_reason"] == "dependency", shown
        assert shown["queue"]["wait_reason"] == "dependency"
        status, out = run(live, "queue", "--all", token=token)
        assert status == 0 and "once its dependencies allow" in out, out
        c.post(f"/api/v1/jobs/{a['id']}/cancel")
    assert live.wait(token, b["id"], "FAILED", timeout_s=30)["status_reason"].endswith("can never run")


def _overlap(intervals: list[tuple[float, float]]) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def test_array_with_a_limit(live: Live, tmp_path: Path) -> None:
    token = live.tenant("arr")
    code = "import os, time; print('index', os.environ['LOADMASTER_ARRAY_INDEX'], " \
           "os.environ['LOADMASTER_ARRAY_JOB_ID']); time.sleep(0.7)"
    with live.client(token) as c:
        out = submit(c, job("sweep", code, array="0-10:2%2"))
        tasks = out["array_tasks"]
        assert len(tasks) == 6 and out["id"] == tasks[0] and out["array_job"] == tasks[0]
        bad = c.post("/api/v1/jobs", json=job("bad", "pass", array="9-0"))
        assert bad.status_code == 422 and bad.json()["problems"][0]["field"] == "array"
        forged = c.post("/api/v1/jobs", json=job("forged", "pass", array_index=3))
        assert forged.status_code == 422 and forged.json()["problems"][0]["field"] == "array_index"
    ended = [live.wait(token, t, "COMPLETED", "FAILED", timeout_s=60) for t in tasks]
    assert [j["status"] for j in ended] == ["COMPLETED"] * 6
    assert [j["array_index"] for j in ended] == [0, 2, 4, 6, 8, 10]
    runs = [(a["started_at"], a["ended_at"]) for j in ended for a in j["attempt_history"]]
    assert _overlap(runs) <= 2, runs  # %2: never more than two at once
    for j in ended:
        status, logs = run(live, "job", "logs", j["id"], token=token)
        assert status == 0 and f"index {j['array_index']} {tasks[0]}" in logs


def test_gpu_type(live: Live) -> None:
    token = live.tenant("types")
    with live.client(token) as c:
        v100 = submit(c, job("v", "import time; time.sleep(0.5)", resources={"gpus": 2, "gpu_type": "v100"}))
        none = c.post("/api/v1/jobs", json=job("h", "pass", resources={"gpus": 1, "gpu_type": "h100"}))
        assert none.status_code == 422
        problem = none.json()["problems"][0]
        assert problem["field"] == "resources.gpu_type" and "a100, v100" in problem["message"]
        big = c.post("/api/v1/jobs", json=job("b", "pass", learners=3, resources={"gpus": 2, "gpu_type": "a100"}))
        assert big.status_code == 422 and "gpu_type" in big.json()["problems"][0]["message"]
        zero = c.post("/api/v1/jobs", json=job("z", "pass", resources={"gpus": 0, "gpu_type": "a100"}))
        assert zero.status_code == 422
    shown = live.wait(token, v100["id"], "COMPLETED")
    history = " ".join(h["reason"] for h in shown["history"])  # "1 learner(s) launching on NODE"
    assert "v100-000" in history and "a100-000" not in history, history


def test_cli_flags(live: Live) -> None:
    token = live.tenant("cli")
    status, out = run(live, "job", "submit", "--array", "0-2", "--gpus", "1", "--gpu-type", "a100", "--",
                      sys.executable, "-c", "pass", token=token)
    assert status == 0 and "3 task(s)" in out, out
    first = out.split()[1]
    status, out = run(live, "job", "submit", "--afterok", first[:8], "--gpus", "0", "--name", "after", "--",
                      sys.executable, "-c", "pass", token=token)
    assert status == 0, out
    then = out.split()[1]
    shown = live.wait(token, then, "COMPLETED", timeout_s=60)
    assert shown["manifest"]["afterok"] == [first]
    assert live.wait(token, first, "COMPLETED")["finished_at"] <= shown["first_started_at"]
    status, out = run(live, "job", "submit", "--gpu-type", "h100", "--", "true", token=token)
    assert status == 2 and "resources.gpu_type" in out


def test_job_show_names_the_array_and_the_dependencies(live: Live) -> None:
    token = live.tenant("show")
    with live.client(token) as c:
        first = submit(c, job("a", "pass", resources={"gpus": 0}))
        tasks = submit(c, job("sweep", "pass", resources={"gpus": 0}, array="3-4", afterok=[first["id"]]))
    status, out = run(live, "job", "show", tasks["array_tasks"][1], token=token)
    flat = " ".join(out.split())
    assert status == 0 and f"array {tasks['id']}, index 4" in flat and f"afterok {first['id']}" in flat


def test_list_and_cancel_an_array(live: Live) -> None:
    token = live.tenant("scancel")
    with live.client(token) as c:
        other = submit(c, job("other", "import time; time.sleep(30)", resources={"gpus": 0}))
        out = submit(c, job("sweep", "import time; time.sleep(30)", resources={"gpus": 0}, array="0-3%2"))
        listed = c.get("/api/v1/jobs", params={"array": out["id"]}).json()["jobs"]
        assert sorted(j["id"] for j in listed) == sorted(out["array_tasks"])
    status, text = run(live, "job", "list", "--array", out["id"][:8], "--json", token=token)
    assert status == 0 and sorted(j["array_index"] for j in json.loads(text)) == [0, 1, 2, 3]
    status, text = run(live, "job", "cancel", "--array", out["id"], token=token)
    assert status == 0 and "cancel requested for 4 of its 4 task(s)" in " ".join(text.split()), text
    for task in out["array_tasks"]:
        assert live.wait(token, task, "CANCELLED", timeout_s=30)["status"] == "CANCELLED"
    assert live.wait(token, other["id"], "PROCESSING")["status"] == "PROCESSING"  # not one of the array's
    status, text = run(live, "job", "cancel", "--array", other["id"], token=token)
    assert status == 2 and "is not an array" in text
    with live.client(token) as c:
        c.post(f"/api/v1/jobs/{other['id']}/cancel")


api = api_fixtures.api  # the API alone (no control loop), on SQLite and PostgreSQL


def test_array_submission_and_filter_on_both_stores(api: Api) -> None:
    token = api.tenant("both")
    with api.client(token) as c:
        first = c.post("/api/v1/jobs", json=job("a", "pass")).json()
        out = c.post("/api/v1/jobs", json=job("sweep", "pass", array="1,5", afterok=[first["id"]])).json()
        assert len(out["array_tasks"]) == 2
        listed = c.get("/api/v1/jobs", params={"array": out["id"]}).json()["jobs"]
        assert sorted((j["id"], j["array_index"]) for j in listed) == sorted(zip(out["array_tasks"], [1, 5],
                                                                                   strict=True))
        assert c.get("/api/v1/jobs", params={"array": first["id"]}).json()["jobs"] == []
