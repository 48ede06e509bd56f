"""The job lifecycle under the control loop, with real learner processes (LocalExecutor) and a real store."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from loadmaster.core.job import JobStatus as S
from loadmaster.platform.control import ControlLoop
from tests.platform.control_fixtures import Env, learner, make_env


def test_a_gang_runs_to_completion_with_its_history_and_progress(env: Env) -> None:
    job = env.submit(learners=2, command=learner("train", 12, 0.05))
    env.until_status(job, S.PROCESSING)
    assert env.attempts(job)[0].outcome in ("launching", "running")  # PROCESSING from its booking on
    env.until_running(job)
    row = env.job(job)
    assert row.allocation is not None and row.executor_handle is not None
    learners = row.allocation["learners"]
    assert [x["rank"] for x in learners] == [0, 1]
    assert {x["node"] for x in learners} == {"n0"}  # pack: both on one server
    assert sorted(g for x in learners for g in x["gpu_ids"]) == [0, 1]  # lowest free GPUs
    env.until_status(job, S.COMPLETED)
    assert env.statuses(job) == ["QUEUED", "PROCESSING", "COMPLETED"]
    reasons = [reason for _, _, reason in env.history(job)]
    assert "2 learner(s) launching on n0" in reasons[1] and "exited 0" in reasons[2]
    [attempt] = env.attempts(job)
    assert attempt.outcome == "succeeded" and sorted(map(tuple, attempt.exit_codes or [])) == [(0, 0), (1, 0)]
    done = env.job(job)
    assert done.allocation is None and done.finished_at is not None and done.first_started_at is not None
    assert done.attained_gpu_s > 0
    assert (env.dirs.results(job) / "out.txt").read_text() == "0 12 1"
    # What a job without a data source leaves: no data directory, and no lock file beside each log (the shim's
    # lock is its log).
    assert not env.dirs.data(job).exists()
    assert sorted(p.name for p in env.dirs.logs(job, 1).iterdir()) == [
        f"rank-{r}.{kind}" for r in (0, 1) for kind in ("exit", "log", "pid")]


def test_learned_progress_feeds_the_expected_duration(lite: Env) -> None:
    job = lite.submit(command=learner("train", 60, 0.05), expected_duration_s=1000)
    lite.drive(lambda: (lite.job(job).last_step or 0) >= 30, what="30 steps reported")
    row = lite.job(job)
    # 60 steps at ~20 steps/s: about 3 s, learned from the reports instead of the manifest's 1,000 s.
    assert row.expected_duration_s is not None and 1.5 < row.expected_duration_s < 15
    assert 0 < row.work_done_s <= row.expected_duration_s
    lite.until_status(job, S.COMPLETED)
    assert lite.job(job).last_step == 60


def test_a_failed_learner_is_classified_and_a_deterministic_failure_not_retried(env: Env) -> None:
    job = env.submit(learners=2, command=learner("fail", 1, 1, "ModuleNotFoundError: No module named 'apex'"),
                     retry={"policy": "classified", "max_attempts": 3})
    env.until_status(job, S.FAILED)
    [attempt] = env.attempts(job)
    assert attempt.outcome == "failed" and attempt.failure_category == "import_error"
    codes = dict(map(tuple, attempt.exit_codes or []))
    # Rank 1 failed; rank 0 was stopped: it exits 0 once its handler sees the stop, or dies of the SIGTERM if
    # the stop comes before it got that far (a loaded machine starts it late: rank 1 fails 0.2 s into its run).
    assert codes[1] == 1 and codes[0] in (0, -signal.SIGTERM) and len(codes) == 2
    assert "deterministic" in (attempt.retry_decision or "")
    row = env.job(job)
    assert row.failures == 1 and "import_error" in row.status_reason and "apex" in row.status_reason


def test_a_transient_failure_is_retried_and_the_retry_completes(lite: Env) -> None:
    job = lite.submit(learners=2, retry={"policy": "classified", "max_attempts": 3},
                      command=learner("fail-once", 0, 1, "RuntimeError: [gloo] Connection reset by peer", 5, 0.02))
    lite.until_status(job, S.COMPLETED)
    first, second = lite.attempts(job)
    assert first.failure_category == "mpi_runtime" and (first.retry_decision or "").startswith("retried")
    assert second.outcome == "succeeded"
    assert lite.statuses(job) == ["QUEUED", "PROCESSING", "QUEUED", "PROCESSING", "COMPLETED"]


def test_retry_never_fails_at_the_first_failure(lite: Env) -> None:
    job = lite.submit(retry={"policy": "never"}, command=learner("fail", 0, 3, "RuntimeError: NCCL error"))
    lite.until_status(job, S.FAILED)
    [attempt] = lite.attempts(job)
    assert attempt.failure_category == "mpi_runtime" and "never" in (attempt.retry_decision or "")


def test_a_job_that_can_never_fit_is_rejected_with_the_reason(lite: Env) -> None:
    job = lite.submit(learners=3, resources={"gpus": 4}, command=["true"])
    lite.until_status(job, S.FAILED)
    assert lite.job(job).status_reason.startswith("rejected: needs 12 GPUs but the cluster has 8")


def test_cancel_and_halt_of_running_jobs(env: Env) -> None:
    cancelled = env.submit(command=learner("train", 400, 0.05))
    halted = env.submit(learners=2, command=learner("train", 60, 0.03))
    env.drive(lambda: (env.job(halted).last_step or 0) >= 5, what="progress")
    env.request(cancelled, cancel_requested=True)
    env.request(halted, halt_requested=True)
    env.drive(lambda: env.status(cancelled) is S.CANCELLED and env.status(halted) is S.HALTED, what="stops")
    assert env.history(cancelled)[-1] == ("PROCESSING", "CANCELLED", "cancelled by the user")
    assert env.history(halted)[-1] == ("PROCESSING", "HALTED", "halted by the user")
    assert env.attempts(halted)[0].outcome == "stopped"
    row = env.job(halted)
    assert not row.halt_requested and row.allocation is None and (row.checkpoint_step or 0) >= 5
    # resume: what the API does (HALTED -> QUEUED), then it starts from its checkpoint and completes
    from loadmaster.platform.store.jobs import transition
    from loadmaster.platform.store.models import Job

    with env.store.session() as s:
        stored = s.get(Job, halted)
        assert stored is not None
        transition(s, stored, S.QUEUED, 0.0 + stored.submitted_at + 1, "resumed by the user")
    env.until_status(halted, S.COMPLETED)
    start, end, attempt = (env.dirs.results(halted) / "out.txt").read_text().split()
    assert int(start) >= 5 and end == "60" and attempt == "2"


def test_max_runtime_stops_the_job_and_fails_it(lite: Env) -> None:
    job = lite.submit(command=learner("train", 1000, 0.05), max_runtime_s=1.0)
    lite.until_status(job, S.FAILED)
    assert "past max_runtime_s 1 s" in lite.job(job).status_reason
    assert lite.attempts(job)[0].outcome == "stopped"


def test_data_is_staged_and_results_are_stored(env: Env, tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "input.txt").write_text("hello")
    target = tmp_path / "bucket" / "run-1"
    job = env.submit(command=learner("train", 3, 0.02), data=data.as_uri(), results=target.as_uri())
    env.until_status(job, S.COMPLETED)
    assert env.statuses(job) == ["QUEUED", "DOWNLOADING", "PROCESSING", "STORING", "COMPLETED"]
    assert (env.dirs.data(job) / "input.txt").read_text() == "hello"
    assert (target / "out.txt").read_text() == "0 3 1 hello"
    assert "results copied to" in env.history(job)[-1][2]


def test_missing_data_fails_as_incorrect_input(lite: Env, tmp_path: Path) -> None:
    job = lite.submit(command=learner("train", 3, 0.02), data=(tmp_path / "nope").as_uri())
    lite.until_status(job, S.FAILED)
    [attempt] = lite.attempts(job)
    assert attempt.failure_category == "incorrect_input"
    assert lite.statuses(job) == ["QUEUED", "DOWNLOADING", "FAILED"]


def test_queued_jobs_carry_their_wait_reason_and_position(lite: Env) -> None:
    big = lite.submit(learners=2, resources={"gpus": 4}, command=learner("train", 400, 0.05))
    lite.until_status(big, S.PROCESSING)
    second = lite.submit(command=learner("train", 1, 0.01))
    third = lite.submit(command=learner("train", 1, 0.01))
    lite.drive(lambda: len(lite.loop.queue()) == 2, what="two queued")
    entries = lite.loop.queue()
    assert [(e.job_id, e.position, e.wait_reason) for e in entries] == [
        (second, 1, "no_capacity"), (third, 2, "no_capacity")]
    assert lite.job(second).wait_reason == "no_capacity"
    lite.request(big, cancel_requested=True)
    lite.drive(lambda: lite.status(third) is S.COMPLETED and lite.status(second) is S.COMPLETED, what="the rest")
    assert lite.job(second).wait_reason == ""


def test_an_idle_loop_does_not_decide_again(lite: Env) -> None:
    loop = lite.new_loop(progress_flush_s=3600.0)  # progress that matters would be a reason to decide
    job = lite.submit(command=learner("train", 400, 0.05))
    lite.until_status(job, S.PROCESSING)
    loop.tick()
    before = loop.decisions
    for _ in range(5):
        report = loop.tick()
        assert not report.decided
    assert loop.decisions == before


def test_a_job_waiting_for_locality_is_decided_again_when_its_wait_relaxes(sqlite_url: str, tmp_path: Path) -> None:
    from loadmaster.platform.executors.local import LocalExecutor
    from loadmaster.scheduling import make_policy
    from loadmaster.scheduling.placement.locality import LocalityPlacer

    env = make_env(sqlite_url, tmp_path)
    try:
        # Hold out 1 s for one server, then take one rack; nothing else happens meanwhile: only the placer's
        # next_change_s can bring the decision.
        loop = ControlLoop(env.store, env.cluster, LocalExecutor(), env.dirs, policy=make_policy("fifo"),
                           placer=LocalityPlacer(node_wait_s=1.0, rack_wait_s=1.0), estimates=False)
        env.loops.append(loop)
        blockers = [env.submit(resources={"gpus": 3}, command=learner("train", 400, 0.05)) for _ in range(2)]
        env.drive(lambda: all(env.status(b) is S.PROCESSING for b in blockers), what="two blockers")
        assert {env.job(b).allocation["learners"][0]["node"] for b in blockers} == {"n0", "n1"}  # type: ignore[index]
        job = env.submit(learners=2, resources={"gpus": 1}, command=learner("train", 2, 0.01))
        loop.tick()
        assert env.job(job).wait_reason == "locality_wait"
        assert loop._due_at == pytest.approx(env.job(job).queued_since + 1.0, abs=0.01)
        env.until_status(job, S.PROCESSING, S.COMPLETED)
        row = env.job(job)
        assert row.first_started_at is not None and 1.0 <= row.first_started_at - row.queued_since < 3.0
        assert {x["node"] for x in env.attempts(job)[0].allocation["learners"]} == {"n0", "n1"}
    finally:
        env.close()


def test_the_loop_runs_on_its_own_thread_and_a_wake_up_starts_a_job_at_once(lite: Env) -> None:
    import time

    # Rounds come from wake-ups (the submission, the finished launch), not from the clock: the next
    # timed round is 30 s away. (An attempt's end is noticed by the next timed round: tick_s, 0.5 s by default.)
    loop = lite.new_loop(tick_s=30.0)
    loop.start()
    try:
        job = lite.submit(command=learner("train", 1000, 0.05))  # submit() wakes the loop, as the API does
        deadline = time.monotonic() + 20
        while lite.status(job) is not S.PROCESSING and time.monotonic() < deadline:
            time.sleep(0.02)
        row = lite.job(job)
        assert row.status == "PROCESSING"
        assert row.first_started_at is not None and row.first_started_at - row.submitted_at < 10
    finally:
        loop.stop()


def test_a_learner_ended_before_its_launch_is_confirmed_ends_in_the_confirming_round(lite: Env) -> None:
    loop = lite.loop
    job = lite.submit(command=[sys.executable, "-c", "pass"])
    lite.until_status(job, S.PROCESSING)  # the start's round: the launch is handed to the launcher
    loop.ctx.launcher.wait(30)
    deadline = time.monotonic() + 30
    while not loop.ctx.executor.poll().ended:  # reported until released: the round below sees it too
        assert time.monotonic() < deadline, "the learner did not end"
        time.sleep(0.02)
    loop.tick()  # one round: the launch confirmed and the end recorded in one batch
    assert lite.status(job) is S.COMPLETED
    [attempt] = lite.attempts(job)
    assert attempt.outcome == "succeeded" and attempt.exit_codes == [[0, 0]]
    assert lite.job(job).executor_handle is None and not loop.ctx.runs
