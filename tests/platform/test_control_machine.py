"""A hypothesis state machine over the control loop with real learners and a real store: random
submissions, cancels, halts, resumes, scales, store faults, learners killed and server crashes, in any
order. After every step the store's invariants hold (invariants.py); at the end every job has ended once
(or waits halted), no learner started twice for one attempt nor for an attempt the job does not count, and
no learner process is left.

The default suite runs a few short sequences; `-m slow` runs many long ones.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from loadmaster.platform.api import actions
from loadmaster.platform.api.errors import ApiError
from loadmaster.platform.store.models import Job
from tests.platform.control_fixtures import Env, make_env
from tests.platform.faults import StoreFaults
from tests.platform.invariants import Runs, attempts_of, check_store, learner_processes, recording

KINDS = ("quick", "slow", "failing", "elastic")
TOTALS: dict[str, int] = {"sequences": 0, "jobs": 0, "faults": 0, "crashes": 0}  # what the slow run reports


class ControlMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lm-machine-"))
        self.env: Env = make_env(f"sqlite:///{self.tmp / 'loadmaster.db'}", self.tmp)
        self.faults = StoreFaults(self.env.store, rate=0.4, seed=1)
        self.runs = self.tmp / "runs.log"
        self.fault_rounds = 0
        self.crashes = 0
        self.env.new_loop(grace_s=1.0, reconcile_s=0.5)

    # -- what users and the world do ------------------------------------------------------------------
    @rule(target=jobs, kind=st.sampled_from(KINDS), gpus=st.integers(1, 4))
    def submit(self, kind: str, gpus: int) -> str:
        manifest: dict[str, Any] = {"resources": {"gpus": gpus, "cpus": 1, "memory_gb": 1},
                                    "retry": {"policy": "always", "max_attempts": 2}}
        if kind == "quick":
            manifest["command"] = recording(self.runs, "sleep 0.1")
        elif kind == "slow":
            manifest["command"] = recording(self.runs, "sleep 30")
        elif kind == "failing":
            manifest["command"] = recording(self.runs, "exit 3")
        else:
            manifest.update(command=recording(self.runs, "sleep 30"), learners=2,
                            elastic={"min_learners": 1, "max_learners": 3}, resources={"gpus": 1})
        return self.env.submit(**manifest)

    @rule(job=jobs, verb=st.sampled_from(["cancel", "halt", "resume"]))
    def request(self, job: str, verb: str) -> None:
        self._act(job, getattr(actions, verb), time.time())

    @rule(job=jobs, learners=st.integers(1, 3))
    def scale(self, job: str, learners: int) -> None:
        self._act(job, actions.scale, learners)

    def _act(self, job_id: str, verb: Any, *args: Any) -> None:
        """As the API does: one locking transaction, then wake the loop."""
        def write(s: Any) -> None:
            job = s.get(Job, job_id, with_for_update=True)
            verb(s, job, *args)

        try:
            actions.in_transaction(self.env.store, write, for_update=True)
        except ApiError:
            return  # 409 and friends: what the job's status does not allow
        self.env.loop.wake()

    @rule(rounds=st.integers(1, 4))
    def store_faults(self, rounds: int) -> None:
        self.fault_rounds = rounds

    @rule(job=jobs)
    def kill_a_learner(self, job: str) -> None:
        marker = f"LOADMASTER_JOB_ID={job}".encode()
        for pid in learner_processes(self.env.dirs.root):
            try:
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
                    return
            except OSError:
                continue

    @precondition(lambda self: self.crashes < 2)
    @rule()
    def crash(self) -> None:
        """The server dies: its loop and executor are gone, its learners are not."""
        old = self.env.loops[-1]
        old.estimator = None
        old.ctx.executor.close()
        self.env.loops.remove(old)
        self.env.new_loop(grace_s=1.0, reconcile_s=0.5)
        self.crashes += 1

    @rule(rounds=st.integers(1, 6))
    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            if self.fault_rounds:
                self.fault_rounds -= 1
                with self.faults.armed():
                    self.env.loop.tick()
            else:
                self.env.loop.tick()
            time.sleep(0.03)

    @invariant()
    def the_store_holds_its_invariants(self) -> None:
        assert check_store(self.env.store) == []

    # -- the end: everything settles -------------------------------------------------------------------
    def teardown(self) -> None:
        try:
            self._settle()
            TOTALS["sequences"] += 1
            TOTALS["jobs"] += len(self.env.all_jobs())
            TOTALS["faults"] += self.faults.injected
            TOTALS["crashes"] += self.crashes
        finally:
            self.faults.close()
            self.env.close()

    def _settle(self) -> None:
        env = self.env
        with env.store.session() as s:
            ids = list(s.scalars(__import__("sqlalchemy").select(Job.id)))
        for job_id in ids:
            self._act(job_id, actions.cancel, time.time())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            env.loop.tick()
            if all(j.status in ("COMPLETED", "FAILED", "CANCELLED") for j in env.all_jobs()) and \
                    not env.loop.ctx.runs:
                break
            for job_id in ids:  # a cancel that met a 503-like fault, or a job requeued since
                self._act(job_id, actions.cancel, time.time())
            time.sleep(0.05)
        statuses = {j.id: (j.status, j.status_reason) for j in env.all_jobs()}
        assert all(status in ("COMPLETED", "FAILED", "CANCELLED") for status, _ in statuses.values()), statuses
        assert check_store(env.store, settled=True) == []
        assert Runs.read(self.runs).problems(attempts_of(env.store)) == []
        deadline = time.monotonic() + 10
        while learner_processes(env.dirs.root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert learner_processes(env.dirs.root) == []


TestControlMachine = ControlMachine.TestCase
TestControlMachine.settings = settings(max_examples=6, stateful_step_count=25, deadline=None,
                                       suppress_health_check=list(HealthCheck))


@pytest.mark.slow
def test_many_long_sequences() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(ControlMachine, settings=settings(
        max_examples=40, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)))
    print(f"\nstate machine: {TOTALS}")
