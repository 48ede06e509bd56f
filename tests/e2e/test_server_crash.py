"""Faults against a real `loadmaster server` process: kill -9 of the server while jobs run and wait, kill -9
of one learner, and `job submit --follow`'s exit status.

The jobs run tests/e2e/learner.py (reports every step, rank 0 checkpoints every few steps and when asked to
stop, writes results/out.json with the step its attempt began at). Nothing is mocked: the store is a real
PostgreSQL database (SQLite for the smaller scenarios), the learners real processes under their shims.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from loadmaster import runtime
from tests.e2e.harness import (
    PY,
    Server,
    clean_env,
    kill_all,
    kill_leftovers,
    learner_pids,
    processes_under,
    running_server,
    wait_for,
    write_manifest,
)

LEARNER = str(Path(__file__).with_name("learner.py"))
SMALL = {"cpus": 0.1, "memory_gb": 0.1}  # fits --nodes 2x4 on any machine (a node has the machine's share)


def training(name: str, learners: int, gpus: int, steps: int, step_s: float, every: int = 5,
             hold: tuple[int, Path] | None = None, **extra: Any) -> dict[str, Any]:
    """A manifest running learner.py; with hold=(step, file) its learners wait at that step for the file."""
    held = [str(hold[0]), str(hold[1])] if hold else []
    return {"name": name, "learners": learners, "resources": {"gpus": gpus, **SMALL},
            "command": [PY, LEARNER, str(steps), str(step_s), str(every), *held], **extra}


def results_of(server: Server, job_id: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((server.data_dir / "jobs" / job_id / "results" / "out.json").read_text())
    return out


def checkpoint_step(server: Server, job_id: str) -> int:
    latest = runtime.latest_checkpoint(server.data_dir / "jobs" / job_id / "checkpoints")
    return 0 if latest is None else runtime.checkpoint_step(latest)


def has_checkpoint(server: Server, job_id: str, step: int = 5) -> bool:
    return checkpoint_step(server, job_id) >= step


def statuses(job: dict[str, Any]) -> list[str]:
    return [h["to_status"] for h in job["history"]]


def submit_all(server: Server, token: str, tmp: Path, manifests: list[dict[str, Any]]) -> list[str]:
    """`job submit` for each manifest, all at once (one CLI process each)."""
    procs = []
    for m in manifests:
        path = write_manifest(tmp / f"{m['name']}.json", m)
        procs.append(subprocess.Popen(
            [PY, "-m", "loadmaster.cli.main", "job", "submit", str(path), "--json"], text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**server_env(server), "LOADMASTER_TOKEN": token}))
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, out + err
        ids.append(str(json.loads(out)["id"]))
    return ids


def server_env(server: Server) -> dict[str, str]:
    return clean_env({"LOADMASTER_URL": server.url})


# --------------------------------------------------------------------------------------- kill -9 of the server


def test_kill_9_of_the_server_loses_nothing_and_every_job_completes(pg_url: str, tmp_path: Path) -> None:
    with running_server(pg_url, tmp_path) as server:
        token = server.tenant("crash", gpus=8, borrow=0)
        # Two jobs run (6 of the tenant's 8 GPUs), held at step 10 until the test releases them; two wait
        # behind them for GPUs.
        release = tmp_path / "release"
        survivor, victim = submit_all(server, token, tmp_path, [
            training("survivor", learners=2, gpus=2, steps=30, step_s=0.05, hold=(10, release)),
            training("victim", learners=2, gpus=1, steps=30, step_s=0.05, hold=(10, release)),
        ])
        for job_id in (survivor, victim):  # both have reported and checkpointed step 10, where they wait
            server.wait_job(job_id, lambda j: j["status"] == "PROCESSING" and j["progress"]["last_step"] == 10,
                            "PROCESSING at step 10")
            wait_for(partial(has_checkpoint, server, job_id, 10), 30, f"the checkpoint of {job_id} at step 10")
        waiting = submit_all(server, token, tmp_path, [
            training("waits-4", learners=1, gpus=4, steps=10, step_s=0.05),
            training("waits-2x2", learners=2, gpus=2, steps=10, step_s=0.05),
        ])
        for job_id in waiting:
            server.wait_job(job_id, lambda j: j["status"] == "QUEUED" and j["wait_reason"] not in ("", None),
                            "QUEUED with a wait reason from the scheduler")
        before = {j["id"]: server.job(j["id"]) for j in server.jobs()}
        survivor_learners = sorted(learner_pids(survivor))
        assert len(survivor_learners) == 2

        server.kill9()
        # The victim's processes die with the machine's "crash" too: its shims first (so nothing records an
        # exit), then its learners. The survivor's learners run on while no server watches them.
        victim_dir = server.data_dir / "jobs" / victim
        shims = [p for p in processes_under(victim_dir) if p not in learner_pids(victim)]
        assert shims, "the victim's shims were not found"
        kill_all(shims)
        kill_all(learner_pids(victim))
        wait_for(lambda: not processes_under(victim_dir), 10, "the victim's processes to be gone")
        victim_step = checkpoint_step(server, victim)
        assert sorted(learner_pids(survivor)) == survivor_learners, "the survivor's learners died with the server"

        server.start()
        log = server.log_path().read_text()
        assert "recovered 1 re-attached, 1 requeued" in log, log
        assert sorted(learner_pids(survivor)) == survivor_learners  # the same processes, watched again

        # Nothing lost: every job is there, with the history it had before the crash as its beginning.
        after = {j["id"]: j for j in server.jobs()}
        assert set(after) == set(before) == {survivor, victim, *waiting}
        for job_id, old in before.items():
            new = server.job(job_id)
            assert new["history"][:len(old["history"])] == old["history"], job_id
            assert (new["submitted_at"], new["name"], new["manifest"]) == (old["submitted_at"], old["name"],
                                                                          old["manifest"])

        release.touch()
        done = {job_id: server.wait_status(job_id, *("COMPLETED", "FAILED", "CANCELLED"), timeout_s=90)
                for job_id in (survivor, victim, *waiting)}
        assert {job_id: j["status"] for job_id, j in done.items()} == dict.fromkeys(done, "COMPLETED"), done

        # The survivor was re-attached: one attempt, never requeued, ran to its end from step 0.
        s = done[survivor]
        assert s["attempts"] == 1 and statuses(s) == ["QUEUED", "PROCESSING", "COMPLETED"], s["history"]
        assert results_of(server, survivor) == {"first_step": 0, "last_step": 30, "attempt": 1, "world_size": 2}
        assert s["progress"]["last_step"] == 30  # its reports were read on after the re-attachment
        assert [(e["rank"], e["exit_code"]) for e in s["attempt_history"][0]["exit_codes"]] == [(0, 0), (1, 0)]

        # The victim's attempt was lost with the crash: an infrastructure failure, requeued whatever the retry
        # policy says (not held against the job), and its second attempt resumed from the checkpoint.
        v = done[victim]
        assert statuses(v) == ["QUEUED", "PROCESSING", "QUEUED", "PROCESSING", "COMPLETED"], v["history"]
        assert "requeued" in v["history"][2]["reason"]
        lost, second = v["attempt_history"]
        assert lost["outcome"] == "lost" and lost["failure_category"] == "infrastructure", lost
        assert "requeued" in (lost["retry_decision"] or ""), lost
        assert second["outcome"] == "succeeded" and v["failures"] == 0
        assert victim_step == 10
        assert results_of(server, victim) == {"first_step": 10, "last_step": 30, "attempt": 2, "world_size": 2}

        for job_id in waiting:  # they waited through the crash and ran once there was room
            w = done[job_id]
            assert w["attempts"] == 1 and statuses(w) == ["QUEUED", "PROCESSING", "COMPLETED"], w["history"]
            assert results_of(server, job_id)["first_step"] == 0

        log = server.log()
        assert "Traceback" not in log, log
    assert not processes_under(tmp_path)


# ---------------------------------------------------------------------------------- one learner killed -9


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("server")
    with running_server(f"sqlite:///{root / 'loadmaster.db'}", root, grace_s=5.0) as server:
        yield server


@pytest.fixture
def cleanup(sqlite_server: Server) -> Iterator[Server]:
    """The module's server; what a test leaves running under it is killed after the test."""
    try:
        yield sqlite_server
    finally:
        for job in sqlite_server.jobs():
            if job["status"] not in ("COMPLETED", "FAILED", "CANCELLED"):
                with sqlite_server.http() as c:
                    c.post(f"/api/v1/jobs/{job['id']}/cancel")
        running = sqlite_server.proc
        kill_leftovers(sqlite_server.data_dir, keep=(running.pid,) if running is not None else ())


def test_a_learner_killed_9_stops_its_gang_and_the_retry_policy_decides(cleanup: Server, tmp_path: Path) -> None:
    server = cleanup
    token = server.tenant("learners", gpus=8, borrow=0)
    release = tmp_path / "release"
    retried, given_up = submit_all(server, token, tmp_path, [
        training("retried", learners=2, gpus=1, steps=30, step_s=0.05, hold=(10, release),
                 retry={"policy": "classified", "max_attempts": 3}),
        training("given-up", learners=2, gpus=1, steps=30, step_s=0.05, hold=(10, release),
                 retry={"policy": "never"}),
    ])
    gangs = {}
    for job_id in (retried, given_up):  # both held at step 10, checkpointed there
        server.wait_job(job_id, lambda j: j["status"] == "PROCESSING" and j["progress"]["last_step"] == 10,
                        "PROCESSING at step 10")
        wait_for(partial(has_checkpoint, server, job_id, 10), 30, f"the checkpoint of {job_id} at step 10")
        gangs[job_id] = learner_pids(job_id)
    assert all(len(pids) == 2 for pids in gangs.values()), gangs
    for job_id in (retried, given_up):
        (rank1,) = learner_pids(job_id, rank=1)
        os.kill(rank1, signal.SIGKILL)

    # The gang stops: rank 0 is told to stop (it checkpoints and exits 0) once rank 1 is gone.
    failed = server.wait_status(given_up, "FAILED", "COMPLETED", "CANCELLED", timeout_s=60)
    assert failed["status"] == "FAILED", failed["history"]
    attempt = failed["attempt_history"][0]
    assert attempt["outcome"] == "failed" and attempt["failure_category"] == "infrastructure", attempt
    assert {e["rank"]: e["exit_code"] for e in attempt["exit_codes"]}[1] == -9, attempt
    assert (attempt["retry_decision"] or "").startswith("not retried"), attempt
    assert failed["attempts"] == 1 and failed["failures"] == 1
    assert "infrastructure" in failed["history"][-1]["reason"], failed["history"]
    wait_for(lambda: not learner_pids(given_up), 20, "the failed gang's learners to be gone")
    server.wait_job(retried, lambda j: j["attempt_history"][0]["outcome"] == "failed", "its first attempt failed")
    release.touch()

    done = server.wait_status(retried, "COMPLETED", "FAILED", "CANCELLED", timeout_s=60)
    assert done["status"] == "COMPLETED", done["history"]
    assert statuses(done) == ["QUEUED", "PROCESSING", "QUEUED", "PROCESSING", "COMPLETED"], done["history"]
    first, second = done["attempt_history"]
    assert first["outcome"] == "failed" and first["failure_category"] == "infrastructure", first
    codes = {e["rank"]: e["exit_code"] for e in first["exit_codes"]}
    assert codes[1] == -9 and codes[0] in (0, -15, -9), first  # rank 0 stopped with the gang
    assert (first["retry_decision"] or "").startswith("retried"), first
    assert second["outcome"] == "succeeded" and done["failures"] == 1 and done["attempts"] == 2
    out = results_of(server, retried)
    assert out == {"first_step": 10, "last_step": 30, "attempt": 2, "world_size": 2}  # resumed from its checkpoint
    # Nothing lost: both jobs are in the list with their whole history.
    assert {retried, given_up} <= {j["id"] for j in server.jobs()}


# ------------------------------------------------------------------------------------- job submit --follow


def test_submit_follow_exits_1_for_a_failing_job_and_0_for_a_succeeding_one(cleanup: Server,
                                                                              tmp_path: Path) -> None:
    server = cleanup
    token = server.tenant("follower", gpus=8, borrow=0)
    good = write_manifest(tmp_path / "good.yaml", {
        "name": "good", "learners": 2, "resources": {"gpus": 1, **SMALL},
        "command": [PY, "-c", "import os; print('hello from rank', os.environ['RANK'])"]})
    bad = write_manifest(tmp_path / "bad.yaml", {
        "name": "bad", "resources": {"gpus": 1, **SMALL}, "retry": {"policy": "never"},
        "command": [PY, "-c", "import sys; print('about to fail', flush=True); sys.exit(3)"]})
    env = {**server_env(server), "LOADMASTER_TOKEN": token}
    runs = {name: subprocess.Popen([PY, "-m", "loadmaster.cli.main", "job", "submit", str(path), "--follow"],
                                   env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for name, path in (("good", good), ("bad", bad))}
    try:
        outputs = {name: p.communicate(timeout=90) for name, p in runs.items()}
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
    good_out, good_err = outputs["good"]
    bad_out, bad_err = outputs["bad"]
    assert runs["good"].returncode == 0, good_out + good_err
    assert "hello from rank 0" in good_out and "hello from rank 1" in good_out, good_out
    assert "COMPLETED" in good_err and "Traceback" not in good_err, good_err
    assert runs["bad"].returncode == 1, bad_out + bad_err
    assert "about to fail" in bad_out, bad_out
    assert "FAILED" in bad_err and "Traceback" not in bad_err, bad_err
