"""Preemption by the scheduler and elastic resizes, with real learners that checkpoint and resume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobStatus as S
from tests.platform.control_fixtures import Env, learner, make_env

ONE_BY_TWO = Cluster((Node("n0", 2, 8.0, 32.0),), name="small")


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    e = make_env(db_url, tmp_path, cluster=ONE_BY_TWO, policy="priority")
    yield e
    e.close()


def test_a_higher_priority_job_preempts_a_running_one_which_resumes(env: Env) -> None:
    low = env.submit(name="low", learners=2, priority=0, command=learner("train", 60, 0.03))
    env.drive(lambda: (env.job(low).last_step or 0) >= 5, what="the low job's progress")
    high = env.submit(name="high", learners=2, priority=10, command=learner("train", 10, 0.02))
    env.until_status(high, S.PROCESSING, S.COMPLETED)
    assert env.status(low) is S.QUEUED
    assert env.history(low)[-2:] == [("PROCESSING", "HALTED", f"preempted by {high}"),
                                     ("HALTED", "QUEUED", "requeued after preemption")]
    first = env.attempts(low)[0]
    assert first.outcome == "stopped" and first.failure_category == "preempted"
    assert first.ended_at is not None and env.attempts(high)[0].started_at >= first.ended_at - 1e-6
    env.drive(lambda: env.status(low) is S.COMPLETED and env.status(high) is S.COMPLETED, what="both done")
    row = env.job(low)
    assert row.preemptions == 1 and row.attempts == 2 and row.failures == 0
    start, end, attempt = (env.dirs.results(low) / "out.txt").read_text().split()
    assert int(start) >= 5 and end == "60" and attempt == "2"  # resumed from its checkpoint


def test_a_user_scale_request_resizes_an_elastic_job_by_checkpoint_restart(tmp_path: Path, sqlite_url: str) -> None:
    env = make_env(sqlite_url, tmp_path, policy="fifo")
    try:
        job = env.submit(learners=2, elastic={"min_learners": 1, "max_learners": 4},
                         command=learner("train", 120, 0.03))
        env.drive(lambda: (env.job(job).last_step or 0) >= 5 and env.job(job).learners == 4,
                  what="the elastic job at its largest size")
        env.request(job, target_learners=2)
        env.drive(lambda: len(env.attempts(job)) == 2 and env.job(job).executor_handle is not None,
                  what="the relaunch at 2 learners")
        first, second = env.attempts(job)
        assert first.outcome == "stopped" and "scaled from 4 to 2 learners" in (first.retry_decision or "")
        assert len(second.allocation["learners"]) == 2
        # The learners that stay keep their GPUs.
        assert [x["gpu_ids"] for x in second.allocation["learners"]] == \
            [x["gpu_ids"] for x in first.allocation["learners"][:2]]
        env.until_status(job, S.COMPLETED)
        assert env.statuses(job) == ["QUEUED", "PROCESSING", "COMPLETED"]  # a resize is not a status change
        assert env.job(job).learners == 2
        start, _, attempt = (env.dirs.results(job) / "out.txt").read_text().split()
        assert int(start) >= 5 and attempt == "2"
    finally:
        env.close()


def test_a_reclaimed_borrowing_job_is_not_restarted_on_gpus_a_guaranteed_job_waits_for(
        tmp_path: Path, sqlite_url: str) -> None:
    """Reclaim thrash, in the live loop: X (quota 1) has a 2-GPU job that only ever borrows; Y (quota 2) has
    three 2-GPU jobs, one running, two waiting. Each time Y's running job ends, Y's next job fits in its
    quota and must get the GPUs; x, submitted before them and with its tenant holding nothing, would take
    them first under a ranking by share alone and be reclaimed at the next round, once per job of Y's."""
    env = make_env(sqlite_url, tmp_path, cluster=ONE_BY_TWO, policy="fair", quota=2)  # tenant "vision" is Y
    try:
        borrower = env.add_tenant("x", gpus=1)
        ys = [env.submit(name="y1", learners=2, command=learner("train", 8, 0.05))]
        env.until_status(ys[0], S.PROCESSING, S.COMPLETED)
        x = env.submit(borrower, name="x", learners=2, command=learner("train", 10, 0.02))
        ys += [env.submit(name=f"y{i}", learners=2, command=learner("train", 8, 0.05)) for i in (2, 3)]
        env.drive(lambda: all(env.status(j) is S.COMPLETED for j in [*ys, x]), what="every job done")
        assert env.job(x).preemptions == 0 and len(env.attempts(x)) == 1
        last_y = max(a.ended_at or 0.0 for y in ys for a in env.attempts(y))
        assert env.attempts(x)[0].started_at >= last_y - 1e-6
    finally:
        env.close()
