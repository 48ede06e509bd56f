"""The control loop under store faults (a fault-injecting wrapper around the real store: faults.py), with
real learners: every hand-off survives a failed write, and the store's invariants hold after every round.

The issue's reproductions first (a retryable failure on a full cluster, a store error while an end is
handled, a failed write during a cancel), then faults at random at every write the loop makes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadmaster.core.job import JobStatus as S
from loadmaster.platform.executors.procs import is_running
from tests.platform.control_fixtures import Env, learner, make_env
from tests.platform.faults import StoreFaults
from tests.platform.invariants import Runs, attempts_of, check_store, learner_processes, recording


@pytest.fixture
def faulty(env: Env) -> Iterator[tuple[Env, StoreFaults]]:
    faults = StoreFaults(env.store)
    yield env, faults
    faults.close()


def _tick(env: Env, faults: StoreFaults | None = None, rate: float | None = None) -> None:
    if faults is None:
        env.loop.tick()
    else:
        with faults.armed(rate):
            env.loop.tick()
    assert check_store(env.store) == []


def test_a_retryable_failure_on_a_full_cluster_gives_its_gpus_back_and_is_relaunched(lite: Env) -> None:
    # Issue 10.1: every GPU busy; one job's first attempt fails with a retryable class (a network error).
    blockers = [lite.submit(resources={"gpus": 2}, command=learner("train", 30, 0.05)) for _ in range(3)]
    flaky = lite.submit(resources={"gpus": 2},
                        command=learner("fail-once", 0, 1, "ConnectionResetError: Connection reset by peer", 4, 0.01))
    waiting = lite.submit(resources={"gpus": 2}, command=learner("train", 2, 0.01))
    lite.drive(lambda: len(lite.attempts(flaky)) >= 1 and lite.attempts(flaky)[0].ended_at is not None,
               what="the first attempt to fail")
    assert check_store(lite.store) == []
    first = lite.attempts(flaky)[0]
    assert first.failure_category == "mpi_runtime" and (first.retry_decision or "").startswith("retried")
    lite.drive(lambda: all(lite.status(j) is S.COMPLETED for j in [*blockers, flaky, waiting]), timeout_s=60,
               what="everything to complete")
    assert lite.job(flaky).attempts == 2 and check_store(lite.store, settled=True) == []


def test_an_end_whose_write_fails_is_kept_until_it_is_recorded(faulty: tuple[Env, StoreFaults]) -> None:
    # Issue 10.2: the store fails while an attempt's end is handled; the end is neither lost nor half-done.
    env, faults = faulty
    job = env.submit(command=learner("train", 3, 0.01))
    env.until_running(job)
    deadline = time.monotonic() + 20
    while not env.loop.ctx.executor.poll().ended and time.monotonic() < deadline:  # the learner exits
        time.sleep(0.02)
    for _ in range(3):
        _tick(env, faults)  # every write fails
        assert env.status(job) is S.PROCESSING and env.loop.ctx.runs[job].attempt == 1
        assert env.loop.last_tick is not None and env.loop.last_tick.store_error
    assert [e.job_id for e in env.loop.ctx.executor.poll().ended] == [job]  # still reported, not forgotten
    env.until_status(job, S.COMPLETED)
    assert job not in env.loop.ctx.runs and env.loop.ctx.executor.poll().ended == ()
    assert env.job(job).allocation is None and check_store(env.store, settled=True) == []


def test_a_cancel_whose_write_fails_signals_nobody_until_it_is_written(faulty: tuple[Env, StoreFaults]) -> None:
    # Issue 10.3: the stop is in the store before any learner is signalled, and a failed write is retried.
    env, faults = faulty
    job = env.submit(command=learner("train", 10_000, 0.05))
    env.until_running(job)
    env.request(job, cancel_requested=True)
    _tick(env, faults)
    run = env.loop.ctx.runs[job]
    assert run.stop is None and env.attempts(job)[0].outcome == "running"  # nothing in memory only
    pid = run.spec and env.job(job).executor_handle["learners"][0]  # type: ignore[index]
    assert is_running(pid["pid"], pid["start"])
    env.until_status(job, S.CANCELLED, timeout_s=20)
    assert not is_running(pid["pid"], pid["start"]) and check_store(env.store, settled=True) == []


def test_random_store_faults_at_every_write_lose_and_double_nothing(lite: Env, tmp_path: Path) -> None:
    faults = StoreFaults(lite.store, rate=0.15, seed=7)
    runs = tmp_path / "runs.log"
    try:
        jobs = [lite.submit(resources={"gpus": 1 + i % 3}, command=recording(runs, "sleep 0.1"),
                            retry={"policy": "always", "max_attempts": 3}) for i in range(12)]
        cancelled = lite.submit(resources={"gpus": 1}, command=recording(runs, "sleep 30"))
        halted = lite.submit(resources={"gpus": 1}, command=recording(runs, "sleep 30"))
        failing = lite.submit(resources={"gpus": 1}, command=recording(runs, "exit 3"), retry={"policy": "never"})
        requested = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            _tick(lite, faults)
            if not requested and lite.job(cancelled).executor_handle and lite.job(halted).executor_handle:
                lite.request(cancelled, cancel_requested=True)
                lite.request(halted, halt_requested=True)
                requested = True
            if all(lite.status(j).terminal for j in [*jobs, cancelled, failing]) and lite.status(halted) is S.HALTED:
                break
            time.sleep(0.02)
        states = {j.id: (j.status, j.status_reason) for j in lite.all_jobs()}
        assert {lite.status(j) for j in jobs} == {S.COMPLETED}, states
        assert faults.injected > 20, faults.injected  # the loop met faults at many of its writes
        assert lite.status(cancelled) is S.CANCELLED and lite.status(halted) is S.HALTED
        assert lite.status(failing) is S.FAILED
        assert check_store(lite.store, settled=True) == []
        assert Runs.read(runs).problems(attempts_of(lite.store)) == []
        assert learner_processes(lite.dirs.root) == []
    finally:
        faults.close()


def test_a_leaked_gpu_is_freed_and_a_stranded_job_requeued_by_reconciliation(sqlite_url: str, tmp_path: Path) -> None:
    env = make_env(sqlite_url, tmp_path)
    try:
        loop = env.new_loop(reconcile_s=0.2)
        blocker = env.submit(learners=2, resources={"gpus": 3}, command=learner("train", 10_000, 0.05))
        env.until_running(blocker)
        # Three jobs wait behind it (4 GPUs each; 1 is free per node)...
        halted, queued, stranded = (env.submit(resources={"gpus": 4}, command=learner("train", 1, 0.01))
                                    for _ in range(3))
        loop.tick()
        from loadmaster.platform.store.models import Job

        # ...and what the first bug, or an older version, leaves: GPUs booked by jobs that cannot use
        # them, and a job said to run with no attempt.
        leak = {"learners": [{"rank": 0, "node": "n1", "gpu_ids": [3], "cpus": 1.0, "mem_gb": 1.0}],
                "master_port": 29990}
        with env.store.session() as s:
            h, q, p = s.get(Job, halted), s.get(Job, queued), s.get(Job, stranded)
            assert h is not None and q is not None and p is not None
            h.status, h.allocation = "HALTED", leak
            q.allocation = leak
            p.status = "PROCESSING"
        started = time.monotonic()
        env.drive(lambda: check_store(env.store) == [], timeout_s=10, what="the repairs")
        assert time.monotonic() - started < 5
        assert env.job(halted).allocation is None and env.job(queued).allocation is None
        assert env.status(stranded) is S.QUEUED and "requeued" in env.history(stranded)[-1][2]
        kinds = {s.labels["kind"] for m in loop.metrics.registry.collect() if m.name == "loadmaster_reconcile_repairs"
                 for s in m.samples if s.value}
        assert {"booked_without_attempt", "job_without_attempt"} <= kinds
        env.request(blocker, cancel_requested=True)
        env.drive(lambda: env.status(queued) is S.COMPLETED and env.status(stranded) is S.COMPLETED,
                  what="the waiting jobs to run")
        assert check_store(env.store, settled=True) == []
    finally:
        env.close()


def test_a_learner_nobody_accounts_for_is_stopped_and_a_lost_run_is_adopted(sqlite_url: str, tmp_path: Path) -> None:
    from loadmaster.platform.control import ControlLoop
    from loadmaster.platform.executors.local import LocalExecutor
    from loadmaster.scheduling import make_placer, make_policy

    env = make_env(sqlite_url, tmp_path)
    try:
        loop = ControlLoop(env.store, env.cluster, LocalExecutor(survey_root=env.dirs.root), env.dirs,
                           policy=make_policy("fifo"), placer=make_placer("pack"), estimates=False, reconcile_s=0.2,
                           grace_s=2.0)
        env.loops.append(loop)
        job = env.submit(command=learner("train", 10_000, 0.05))
        env.until_running(job)
        # The loop forgets the run (an effect lost): reconciliation adopts it again from the store.
        run = loop.ctx.runs.pop(job)
        loop.ctx.executor.release(job, run.attempt)
        env.drive(lambda: job in loop.ctx.runs, timeout_s=10, what="the run to be adopted")
        # A learner of this data directory that no attempt accounts for: killed.
        from tests.platform.executor_helpers import attempt_spec, processes_of

        orphan_spec = attempt_spec(env.dirs.root / "jobs", "env", attempt=7)
        orphan = LocalExecutor()
        orphan.launch(__import__("dataclasses").replace(orphan_spec, checkpoint_dir=str(env.dirs.checkpoints("ghost")),
                                                        command=("sleep", "60")))
        orphan.close()
        # processes_of reads each environment once, minding processes that exit meanwhile (as the orphan does)
        env.drive(lambda: not processes_of(orphan_spec.job_id), timeout_s=10, what="the orphan to be killed")
        env.request(job, cancel_requested=True)
        env.until_status(job, S.CANCELLED)
        assert check_store(env.store, settled=True) == []
    finally:
        env.close()


def test_directories_that_cannot_be_made_fail_the_launch_not_the_round(lite: Env) -> None:
    job = lite.submit(command=learner("train", 1, 0.01))
    (lite.dirs.root / "jobs").mkdir(parents=True, exist_ok=True)
    lite.dirs.job(job).write_text("a file where the job's directory goes\n")
    lite.drive(lambda: bool(lite.attempts(job)) and lite.attempts(job)[0].ended_at is not None, timeout_s=30,
               what="the launch to fail")
    attempt = lite.attempts(job)[0]
    row = lite.job(job)
    assert attempt.outcome == "not_launched" and attempt.failure_category == "infrastructure"
    assert row.status == S.QUEUED.value and row.wait_reason == "launch_failed"  # tried again after a backoff
    assert "cannot prepare its directories" in row.status_reason
    lite.dirs.job(job).unlink()
    lite.until_status(job, S.COMPLETED, timeout_s=60)
