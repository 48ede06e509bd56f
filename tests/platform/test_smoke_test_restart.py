"""Smoke-test and early-stop state survive a kill -9 of the server (`loadmaster server` in a process of its own,
real learners that outlive it): a job whose smoke test passed is not tested again, a test under way at the crash
ends as it began, after its own seconds, whatever --smoke-test the next server is given, and a plateau counted
before the crash still stops the job."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Attempt
from tests.platform.control_fixtures import learner
from tests.platform.invariants import check_store
from tests.platform.test_server import Proc, _url

ADMIN = "smoke-restart-admin-token-0123456789"


def _wait(c: httpx.Client, job_id: str, done: Any, what: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
        if done(job):
            return job
        assert time.monotonic() < deadline, f"{job_id}: timed out waiting for {what}: {job['history']}"
        time.sleep(0.05)


def test_a_kill_9_mid_smoke_test_neither_tests_a_passed_job_again_nor_changes_a_running_test(
        db_url: str, tmp_path: Path) -> None:
    """Two GPUs. `blocker` holds one; `passed` (2 GPUs) runs its 3 s test on the other, passes, and waits for
    its gang; `midtest` (2 GPUs) then runs its test there, and the server is killed (SIGKILL) mid-test. The
    next server runs with --smoke-test 30: `passed` is not tested again (2 attempts: the test, the gang), and
    `midtest`'s test ends after its 3 s (its attempt's), then its gang runs."""
    args = ["--nodes", "1x2", "--port", "0", "--data-dir", str(tmp_path / "data"), "--db", db_url,
            "--grace", "3", "--tick", "0.1"]
    env = {"LOADMASTER_ADMIN_TOKEN": ADMIN}
    first = Proc([*args, "--smoke-test", "3"], env)
    try:
        url = _url(first.until("loadmaster server on"))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
            assert c.post("/api/v1/tenants", json={"name": "vision", "gpus": 2}).status_code == 201

            def submit(name: str, gpus: int, *command: object) -> str:
                r = c.post("/api/v1/jobs", params={"tenant": "vision"}, json={
                    "name": name, "resources": {"gpus": gpus}, "command": learner(*command)})
                assert r.status_code == 201, r.text
                return str(r.json()["id"])

            blocker = submit("blocker", 1, "train", 400, 0.05)  # 20 s: it holds one GPU past the restart
            _wait(c, blocker, lambda j: j["status"] == "PROCESSING", "the blocker to run")
            # 5 s: longer than its 3 s test; its gang runs after the restart
            passed = submit("passed", 2, "train", 100, 0.05)
            _wait(c, passed, lambda j: any(h["reason"].startswith("smoke test passed") for h in j["history"]),
                  "its smoke test to pass")
            # Its test's learner would run 100 s: only the test's 3 s can end it, however long the restart takes
            # on a loaded machine (a 5 s learner outlived a slow restart's 3 s and ended the test itself, "exited
            # 0 within its 3 s"); its gang then counts to step 100 from the test's checkpoint, as `passed`'s.
            midtest = submit("midtest", 2, "long-first", 2000, 100, 0.05)
            # PROCESSING comes with the attempt's row, before its learner is spawned (outcome `launching`): a kill
            # then is a launch cut short, which the next server redoes as a new test ([1, 1, 2]). The test is
            # under way once its learner runs (the executor's handle kept: progress.run_started_at).
            _wait(c, midtest, lambda j: j["status"] == "PROCESSING" and j["progress"]["run_started_at"] is not None,
                  "its smoke test's learner to run")
    except BaseException:
        first.p.kill()
        raise
    first.p.kill()  # kill -9: no shutdown of any kind; the learners live on
    first.p.wait(timeout=30)
    killed_at = time.time()
    second = Proc([*args, "--smoke-test", "30"], env)
    try:
        url = _url(second.until("loadmaster server on"))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
            jobs = {job_id: _wait(c, job_id, lambda j: j["status"] in ("COMPLETED", "FAILED"), "its end")
                    for job_id in (blocker, passed, midtest)}
    finally:
        assert second.stop() == 0, second.rest()
    assert {j["status"] for j in jobs.values()} == {"COMPLETED"}, jobs
    assert jobs[blocker]["attempts"] == 1  # re-attached, not relaunched
    store = Store.open(db_url)
    try:
        with store.session() as s:
            tries = {(a.job_id, a.number): a for a in s.scalars(select(Attempt))}
        assert check_store(store, settled=True) == []
    finally:
        store.close()

    def gpus(job_id: str) -> list[int]:
        return [sum(len(lr["gpu_ids"]) for lr in a.allocation["learners"])
                for (j, _), a in sorted(tries.items()) if j == job_id]

    assert gpus(passed) == [1, 2], jobs[passed]["history"]  # not tested again after the restart
    assert gpus(midtest) == [1, 2], jobs[midtest]["history"]
    test_try = tries[(midtest, 1)]
    assert test_try.smoke_test_s == 3.0 and tries[(midtest, 2)].smoke_test_s is None
    assert test_try.retry_decision == "smoke test passed (ran 3 s on one GPU)"
    assert test_try.ended_at is not None and test_try.ended_at < killed_at + 25  # not the new server's 30 s
    assert tries[(passed, 2)].started_at > killed_at  # its gang ran under the second server, untested


def test_a_kill_9_mid_plateau_keeps_the_early_stop_count(db_url: str, tmp_path: Path) -> None:
    """Early stop's count (state.Plateau) lives in the loop's memory, but it is made from the attempt's own
    reports, which the executor hands over again, from the attempt's first line, when the next server
    re-attaches the learners. So a job whose loss plateaued while the server was down is stopped as soon as the
    next server runs, not `patience` reports later."""
    data = tmp_path / "data"
    args = ["--nodes", "1x2", "--port", "0", "--data-dir", str(data), "--db", db_url, "--grace", "3", "--tick", "0.1"]
    env = {"LOADMASTER_ADMIN_TOKEN": ADMIN}
    rule = {"metric": "loss", "patience": 40, "min_delta": 0.01}
    first = Proc(args, env)
    try:
        url = _url(first.until("loadmaster server on"))
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
            assert c.post("/api/v1/tenants", json={"name": "vision", "gpus": 2}).status_code == 201
            # loss 4.5, 4.0, ... 1.0 by step 8, then flat: plateaued (40 reports without a gain) at step 48.
            r = c.post("/api/v1/jobs", params={"tenant": "vision"}, json={
                "name": "flat", "early_stop": rule, "command": learner("plateau", 4000, 0.05, 1.0)})
            assert r.status_code == 201, r.text
            job_id = str(r.json()["id"])
        reports = JobDirs(data).reports(job_id, 1) / "rank-0.jsonl"

        def steps() -> list[tuple[float, int]]:
            lines = reports.read_text().splitlines() if reports.exists() else []
            return [(float(x["time"]), int(x["step"])) for x in map(json.loads, lines[:-1])]

        deadline = time.monotonic() + 60
        while len(steps()) < 30:  # 22 reports into the plateau's 40
            assert time.monotonic() < deadline, first.rest()
            time.sleep(0.05)
    except BaseException:
        first.p.kill()
        raise
    first.p.kill()
    first.p.wait(timeout=30)
    time.sleep(2.5)  # the learner reports on: its loss has plateaued by the time the next server runs
    second = Proc(args, env)
    try:
        url = _url(second.until("loadmaster server on"))
        up_at = time.time()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
            done = _wait(c, job_id, lambda j: j["status"] in ("COMPLETED", "FAILED"), "its early stop")
    finally:
        assert second.stop() == 0, second.rest()
    assert done["status"] == "COMPLETED" and done["attempts"] == 1, done["history"]
    assert done["status_reason"].startswith("early stop: loss plateaued at 1 "), done["status_reason"]
    after = [step for at, step in steps() if at > up_at]
    # Counting afresh would take 40 more reports (2 s); the replayed count stops it at the first rounds.
    assert len(after) < 25, (len(after), after[:3])
