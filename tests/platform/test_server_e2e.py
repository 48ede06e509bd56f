"""The whole platform in one process (store, virtual nodes, the local executor running real learner
processes, the control loop, the API over real HTTP): jobs go from submission to their end."""

from __future__ import annotations

import sys
import time

from tests.platform import api_fixtures
from tests.platform.api_fixtures import Live

live = api_fixtures.live
sqlite_live = api_fixtures.sqlite_live

PY = sys.executable


def _script(code: str) -> list[str]:
    return [PY, "-c", code]


def test_submit_runs_to_completed_with_logs(live: Live) -> None:
    token = live.tenant("vision", gpus=4)
    code = ("import os, time; r = os.environ['RANK']; print('hello from', r, 'of', os.environ['WORLD_SIZE'], "
            "flush=True); time.sleep(0.5); print('bye from', r)")
    with live.client(token) as c:
        r = c.post("/api/v1/jobs", json={"name": "hello", "learners": 2, "command": _script(code)})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        live.wait(token, job_id, "PROCESSING", "COMPLETED")
        done = live.wait(token, job_id, "COMPLETED")
        assert [h["to_status"] for h in done["history"]] == ["QUEUED", "PROCESSING", "COMPLETED"]
        attempt = done["attempt_history"][0]
        assert attempt["outcome"] == "succeeded"
        assert sorted((e["rank"], e["exit_code"]) for e in attempt["exit_codes"]) == [(0, 0), (1, 0)]
        logs = c.get(f"/api/v1/jobs/{job_id}/logs").json()
        assert [r["lines"] for r in logs["ranks"]] == [["hello from 0 of 2", "bye from 0"],
                                                       ["hello from 1 of 2", "bye from 1"]]


def test_halt_resume_and_cancel_of_a_running_job(sqlite_live: Live) -> None:
    live = sqlite_live
    token = live.tenant("vision", gpus=4)
    with live.client(token) as c:
        job_id = c.post("/api/v1/jobs", json={"name": "long", "command": _script(
            "import time\nfor i in range(600):\n    print(i, flush=True); time.sleep(0.1)")}).json()["id"]
        live.wait(token, job_id, "PROCESSING")
        r = c.post(f"/api/v1/jobs/{job_id}/halt").json()
        assert r["halt_requested"] is True or r["status"] == "HALTED"
        halted = live.wait(token, job_id, "HALTED")
        assert halted["attempt_history"][-1]["outcome"] == "stopped"
        assert c.post(f"/api/v1/jobs/{job_id}/resume").json()["status"] == "QUEUED"
        again = live.wait(token, job_id, "PROCESSING")
        assert again["attempts"] == 2
        c.post(f"/api/v1/jobs/{job_id}/cancel")
        cancelled = live.wait(token, job_id, "CANCELLED")
        assert [h["to_status"] for h in cancelled["history"]] == [
            "QUEUED", "PROCESSING", "HALTED", "QUEUED", "PROCESSING", "CANCELLED"]


def test_a_failing_job_is_failed_with_its_exit_code_and_class(sqlite_live: Live) -> None:
    live = sqlite_live
    token = live.tenant("vision", gpus=4)
    with live.client(token) as c:
        job_id = c.post("/api/v1/jobs", json={
            "name": "broken", "retry": {"policy": "never"},
            "command": _script("import sys; print('ModuleNotFoundError: No module named torchx', file=sys.stderr); "
                               "sys.exit(3)")}).json()["id"]
        failed = live.wait(token, job_id, "FAILED")
        attempt = failed["attempt_history"][0]
        assert attempt["outcome"] == "failed" and attempt["exit_codes"][0]["exit_code"] == 3
        assert attempt["failure_category"] and attempt["retry_decision"]


def test_queue_shows_positions_reasons_and_estimates(sqlite_live: Live) -> None:
    live = sqlite_live
    token = live.tenant("vision", gpus=8, borrow=0)
    hold = _script("import time; time.sleep(60)")
    with live.client(token) as c:
        first = c.post("/api/v1/jobs", json={"name": "all-gpus", "learners": 2, "resources": {"gpus": 4},
                                             "command": hold, "max_runtime_s": 120}).json()["id"]
        live.wait(token, first, "PROCESSING")
        waiting = [c.post("/api/v1/jobs", json={"name": f"w{i}", "command": hold, "expected_duration_s": 30}
                          ).json()["id"] for i in range(2)]
        for _ in range(100):  # until a round of the loop has placed them
            entries = c.get("/api/v1/queue").json()["entries"]
            if [e["job_id"] for e in entries] == waiting and all(e["wait_reason"] != "not_yet_considered"
                                                                 for e in entries):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(entries)
        assert [e["position"] for e in entries] == [1, 2]
        assert entries[0]["wait_reason"] in ("no_capacity", "fragmentation", "over_quota")
        shown = c.get(f"/api/v1/jobs/{waiting[0]}").json()
        assert shown["queue"]["position"] == 1
        c.post(f"/api/v1/jobs/{first}/cancel")
        for job_id in waiting:
            c.post(f"/api/v1/jobs/{job_id}/cancel")
        live.wait(token, first, "CANCELLED")
