"""Dependencies under store faults: the rejection of a job whose afterok dependency failed is kept until
it is written (a failed write loses nothing), and held jobs never reach the scheduler. A real SQLite store
whose writes fail while armed, real learner processes, the control loop driven round by round."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from loadmaster.core.job import JobStatus as S
from tests.platform.control_fixtures import Env
from tests.platform.faults import StoreFaults
from tests.platform.invariants import check_store


@pytest.fixture
def faulty(lite: Env) -> Iterator[tuple[Env, StoreFaults]]:
    faults = StoreFaults(lite.store)
    yield lite, faults
    faults.close()


def test_a_rejection_whose_write_fails_is_made_at_the_next_round(faulty: tuple[Env, StoreFaults]) -> None:
    env, faults = faulty
    first = env.submit(command=[sys.executable, "-c", "raise SystemExit(3)"], retry={"policy": "never"})
    env.drive(lambda: env.status(first) is S.FAILED, what="the dependency to fail")
    # Submitted after its dependency failed: the next round rejects it (a round that records an end reads
    # the rows again before deciding, so a job submitted before would be rejected in that same round).
    then = env.submit(command=[sys.executable, "-c", "pass"], afterok=[first])
    assert env.status(then) is S.QUEUED and env.job(then).attempts == 0
    for _ in range(3):
        with faults.armed():
            env.loop.tick()  # every write fails: the rejection is not written
        assert env.loop.last_tick is not None and env.loop.last_tick.store_error
        assert env.status(then) is S.QUEUED
    env.drive(lambda: env.status(then) is S.FAILED, what="the rejection")
    job = env.job(then)
    assert job.attempts == 0 and f"afterok dependency {first} ended FAILED" in job.status_reason
    assert check_store(env.store, settled=True) == []


def test_a_held_job_never_starts_before_its_dependency(env: Env) -> None:
    # On SQLite and PostgreSQL: the dependencies are read from the store.
    slow = env.submit(command=[sys.executable, "-c", "import time; time.sleep(1)"])
    after = [env.submit(command=[sys.executable, "-c", "pass"], afterany=[slow]) for _ in range(3)]
    env.drive(lambda: all(env.status(j) is S.COMPLETED for j in [slow, *after]), what="all to complete")
    ended = env.job(slow).finished_at
    assert ended is not None
    assert all((env.job(j).first_started_at or 0) >= ended for j in after)
    assert {env.job(j).wait_reason for j in after} == {""}
