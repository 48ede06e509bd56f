"""examples/ddp_digits: two real learners over a real gloo rendezvous, launched the way an executor does
(env:// variables and the LOADMASTER_* contract set by hand). One run goes straight through; another is
stopped by SIGTERM to both learners after its first checkpoint and resumed as attempt 2. Both must end
with the same weights, hence the same accuracy."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadmaster import runtime
from loadmaster.runtime import env

pytest.importorskip("torch")
pytest.importorskip("sklearn")
# Six learner processes, each starting Python, torch and scikit-learn: 25-45 s on a busy 2-core machine.
pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "examples" / "ddp_digits" / "train.py"
WORLD = 2
EPOCHS = 10
STEPS_PER_EPOCH = 23  # ceil(ceil(1437 / 2) / 32): the digits' 80 % split over 2 learners, batches of 32
RUN_TIMEOUT_S = 300
RUNTIME_VARS = [v for k, v in vars(env).items() if k.isupper() and isinstance(v, str)]


@dataclass(frozen=True)
class Attempt:
    directory: Path
    exit_codes: tuple[int, ...]
    wall_s: float

    def log(self, rank: int) -> str:
        return (self.directory / f"rank-{rank}.log").read_text()

    def reports(self, rank: int) -> list[dict[str, Any]]:
        path = self.directory / "reports" / f"rank-{rank}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass(frozen=True)
class Runs:
    straight: Attempt
    straight_results: dict[str, Any]
    interrupted: Attempt
    checkpoint_step_at_stop: int
    results_after_stop: bool
    resumed: Attempt
    resumed_results: dict[str, Any]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(job: Path, attempt: int, *args: str) -> tuple[Path, list[subprocess.Popen[bytes]]]:
    """What an executor does for one attempt: one process (group) per rank, the runtime contract in env."""
    attempt_dir = job / f"attempt-{attempt}"
    (attempt_dir / "reports").mkdir(parents=True)
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if k not in RUNTIME_VARS}
    learners = []
    for rank in range(WORLD):
        learner_env = {
            **base,
            "PYTHONPATH": str(REPO / "src"),
            env.RANK: str(rank), env.WORLD_SIZE: str(WORLD), env.LOCAL_RANK: str(rank),
            env.LOCAL_WORLD_SIZE: str(WORLD), env.MASTER_ADDR: "127.0.0.1", env.MASTER_PORT: str(port),
            env.JOB_ID: job.name, env.ATTEMPT: str(attempt),
            env.CHECKPOINT_DIR: str(job / "checkpoints"), env.RESULTS_DIR: str(job / "results"),
            env.REPORT_FILE: str(attempt_dir / "reports" / f"rank-{rank}.jsonl"),
            env.PREEMPT_FILE: str(attempt_dir / "preempt"),
        }
        with (attempt_dir / f"rank-{rank}.log").open("wb") as log:
            learners.append(subprocess.Popen(
                [sys.executable, str(SCRIPT), "--epochs", str(EPOCHS), *args], cwd=job, env=learner_env,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))
    return attempt_dir, learners


def _wait(attempt_dir: Path, learners: list[subprocess.Popen[bytes]], started: float) -> Attempt:
    try:
        codes = tuple(learner.wait(timeout=RUN_TIMEOUT_S) for learner in learners)
    finally:
        for learner in learners:
            if learner.poll() is None:
                os.killpg(learner.pid, signal.SIGKILL)
                learner.wait()
    return Attempt(attempt_dir, codes, time.monotonic() - started)


def _results(job: Path) -> dict[str, Any]:
    return dict(json.loads((job / "results" / "metrics.json").read_text()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    straight_job = tmp_path_factory.mktemp("straight")
    started = time.monotonic()
    straight = _wait(*_launch(straight_job, 1), started)
    assert straight.exit_codes == (0,) * WORLD, straight.log(0) + straight.log(1)

    job = tmp_path_factory.mktemp("interrupted")
    started = time.monotonic()
    # The delay stands in for a heavier model: it leaves time to interrupt after the first checkpoint.
    attempt_dir, learners = _launch(job, 1, "--step-delay", "0.02")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not runtime.list_checkpoints(job / "checkpoints"):
        assert time.monotonic() < deadline and all(p.poll() is None for p in learners), "no first checkpoint"
        time.sleep(0.02)
    for learner in learners:  # the executor's stop: SIGTERM to every learner's process group
        os.killpg(learner.pid, signal.SIGTERM)
    interrupted = _wait(attempt_dir, learners, started)
    latest = runtime.latest_checkpoint(job / "checkpoints")
    assert latest is not None
    stop_step = runtime.checkpoint_step(latest)
    results_after_stop = (job / "results" / "metrics.json").exists()

    started = time.monotonic()
    resumed = _wait(*_launch(job, 2), started)
    assert resumed.exit_codes == (0,) * WORLD, resumed.log(0) + resumed.log(1)
    return Runs(straight, _results(straight_job), interrupted, stop_step, results_after_stop, resumed,
                _results(job))


def test_straight_run_learns_the_digits(runs: Runs) -> None:
    results = runs.straight_results
    assert results["test_accuracy"] > 0.9
    assert (results["steps"], results["world_size"], results["epochs"]) == (EPOCHS * STEPS_PER_EPOCH, WORLD, EPOCHS)


def test_sigterm_stops_both_learners_cleanly_mid_training(runs: Runs) -> None:
    assert runs.interrupted.exit_codes == (0,) * WORLD, runs.interrupted.log(0) + runs.interrupted.log(1)
    # Stopped after the first epoch's checkpoint and well before the end, with nothing final written.
    assert STEPS_PER_EPOCH <= runs.checkpoint_step_at_stop < EPOCHS * STEPS_PER_EPOCH
    assert not runs.results_after_stop
    assert "asked to stop; checkpointed" in runs.interrupted.log(0)


def test_resumed_run_ends_exactly_where_the_straight_run_did(runs: Runs) -> None:
    straight, resumed = runs.straight_results, runs.resumed_results
    assert f"step {runs.checkpoint_step_at_stop})" in runs.resumed.log(0)  # it resumed, not restarted
    assert resumed["attempt"] == 2 and resumed["steps"] == straight["steps"]
    assert resumed["weights_sha256"] == straight["weights_sha256"]
    assert resumed["test_accuracy"] == straight["test_accuracy"] > 0.9


def test_learners_report_progress_per_rank(runs: Runs) -> None:
    for rank in range(WORLD):
        lines = runs.straight.reports(rank)
        assert {line["rank"] for line in lines} == {rank}
        assert all({"time", "step", "epoch"} <= line.keys() for line in lines)
        assert any("loss" in line and "accuracy" in line for line in lines)
        epochs = [line for line in lines if "test_accuracy" in line]
        assert [line["epoch"] for line in epochs] == list(range(1, EPOCHS + 1))
        assert epochs[-1]["test_accuracy"] == runs.straight_results["test_accuracy"]
        # The resumed attempt reports only the steps it ran.
        assert min(line["step"] for line in runs.resumed.reports(rank)) > runs.checkpoint_step_at_stop
