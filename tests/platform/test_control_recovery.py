"""recover(): a new ControlLoop (and a new LocalExecutor) over the store an old one left behind, as after
a server crash. The old loop is dropped without stopping anything: its learners keep running."""

from __future__ import annotations

import time
from pathlib import Path

from loadmaster.core.job import JobStatus as S
from loadmaster.platform.store.models import Job
from tests.platform.control_fixtures import Env, learner


def _crash(env: Env) -> None:
    """The server dies: its loop and executor are gone, its learners are not."""
    old = env.loops.pop()
    old.estimator = None
    old.ctx.executor.close()  # forgets its learners without signalling them


def test_a_new_loop_reattaches_running_learners_and_the_job_completes(env: Env) -> None:
    job = env.submit(learners=2, command=learner("train", 100, 0.03))
    env.drive(lambda: (env.job(job).last_step or 0) >= 3, what="progress")
    _crash(env)
    loop = env.new_loop()
    report = loop.recover()
    assert report.reattached == [job] and not report.requeued
    env.until_status(job, S.COMPLETED)
    assert env.statuses(job) == ["QUEUED", "PROCESSING", "COMPLETED"]
    [attempt] = env.attempts(job)
    assert attempt.outcome == "succeeded"
    assert (env.dirs.results(job) / "out.txt").read_text() == "0 100 1"  # one attempt, never interrupted


def test_learners_that_ended_while_the_server_was_down_are_accounted_for(lite: Env) -> None:
    job = lite.submit(command=learner("train", 15, 0.02))
    lite.until_status(job, S.PROCESSING)
    _crash(lite)
    time.sleep(1.5)  # the learner finishes with nobody watching; its exit file tells the new server
    loop = lite.new_loop()
    assert loop.recover().reattached == [job]
    lite.until_status(job, S.COMPLETED)
    assert lite.attempts(job)[0].exit_codes == [[0, 0]]


def test_a_stop_under_way_survives_the_restart(lite: Env) -> None:
    job = lite.submit(command=learner("train", 400, 0.03))
    lite.drive(lambda: (lite.job(job).last_step or 0) >= 3, what="progress")
    lite.request(job, halt_requested=True)
    lite.loop.tick()  # the halt is asked for; the learner may not have exited yet
    assert lite.attempts(job)[0].outcome in ("stopping", "stopped")
    _crash(lite)
    lite.new_loop()
    lite.until_status(job, S.HALTED)
    assert lite.history(job)[-1][2] == "halted by the user"


def test_an_attempt_that_cannot_be_accounted_for_is_requeued_and_resumes(env: Env) -> None:
    job = env.submit(command=learner("train", 150, 0.02))
    env.drive(lambda: (env.job(job).last_step or 0) >= 3, what="progress")
    old = env.loops[-1]
    # The machine "reboots": the learner is gone (it checkpointed on the way out) and so is any trace of it.
    old.ctx.executor.stop(job, 1, 5.0)
    deadline = time.monotonic() + 10
    while not old.ctx.executor.poll().ended and time.monotonic() < deadline:
        time.sleep(0.02)
    for exit_file in env.dirs.logs(job, 1).glob("rank-*.exit"):
        exit_file.unlink()
    _crash(env)
    loop = env.new_loop()
    report = loop.recover()
    assert report.requeued == [job]
    first = env.attempts(job)[0]
    assert first.outcome == "lost" and first.failure_category == "infrastructure"
    assert "requeued" in (first.retry_decision or "")
    env.until_status(job, S.COMPLETED)
    assert env.statuses(job) == ["QUEUED", "PROCESSING", "QUEUED", "PROCESSING", "COMPLETED"]
    start, end, attempt = (env.dirs.results(job) / "out.txt").read_text().split()
    assert int(start) >= 3 and end == "150" and attempt == "2"
    assert env.job(job).failures == 0  # the platform's loss, not the job's failure


def test_downloading_and_storing_interrupted_by_a_crash_are_redone(lite: Env, tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "input.txt").write_text("abc")
    staging = lite.submit(command=learner("train", 2, 0.01), data=str(data))
    lite.loop.tick()
    assert lite.status(staging) is S.DOWNLOADING
    _crash(lite)
    loop = lite.new_loop()
    assert loop.recover().restaged == [staging]
    lite.until_status(staging, S.COMPLETED)
    assert (lite.dirs.results(staging) / "out.txt").read_text() == "0 2 1 abc"

    target = tmp_path / "out"
    storing = lite.submit(command=learner("train", 2, 0.01), results=str(target))
    lite.drive(lambda: lite.status(storing) in (S.STORING, S.COMPLETED), what="STORING")
    assert lite.status(storing) is S.STORING  # the round that ends the attempt begins the copy
    _crash(lite)
    (target / "out.txt").unlink(missing_ok=True)  # as if the copy had not happened
    loop = lite.new_loop()
    assert loop.recover().restored == [storing]
    lite.until_status(storing, S.COMPLETED)
    assert (target / "out.txt").read_text() == "0 2 1"


def test_a_launch_cut_short_leaves_the_job_queued(lite: Env) -> None:
    job = lite.submit(command=learner("train", 2, 0.01))
    # What a crash between the reservation and the launch leaves: an allocation and an open attempt.
    from loadmaster.platform.store.models import Attempt

    with lite.store.session() as s:
        row = s.get(Job, job)
        assert row is not None
        row.attempts = 1
        row.allocation = {"learners": [{"rank": 0, "node": "n0", "gpu_ids": [0], "cpus": 1.0, "mem_gb": 1.0}],
                          "master_port": 29999}
        s.add(Attempt(job_id=job, number=1, started_at=time.time(), allocation=row.allocation, outcome="running",
                      log_dir="x"))
    loop = lite.new_loop()
    assert loop.recover().interrupted_launches == [job]
    first = lite.attempts(job)[0]
    assert first.outcome == "lost" and first.failure_category == "infrastructure"
    assert lite.job(job).allocation is None  # a queued job holds no GPU
    lite.until_status(job, S.COMPLETED)
    assert lite.job(job).attempts == 2
