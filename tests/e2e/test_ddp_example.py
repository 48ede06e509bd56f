"""examples/ddp_digits under a real `loadmaster server`, driven with the real CLI: 2 learners, halted
mid-training (`job halt`: they checkpoint, the job is HALTED), resumed (`job resume`), COMPLETED with the
results copied to the manifest's `results` target; the final weights are bit for bit those of the same
script run alone (two learners started by hand, meanwhile, in this test), and `job logs ID --rank 1` shows
rank 1's log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadmaster import runtime
from loadmaster.runtime import env as runtime_env
from tests.e2e.harness import PY, REPO, Server, clean_env, free_port, running_server

pytest.importorskip("torch")
pytest.importorskip("sklearn")
# Four learners of torch and scikit-learn on 2 cores, two of them started twice: 40-70 s.
pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "ddp_digits"
STEPS = 230  # 10 epochs of 23 steps with 2 learners (README)
# Slows every step down (the weights do not depend on it) so that the halt lands mid-training.
STEP_DELAY = "0.04"


@pytest.fixture
def alone(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The example run alone, as its README shows: two learners with an env:// rendezvous set by hand."""
    root = tmp_path / "alone"
    root.mkdir()
    port = free_port()
    base = {k: v for k, v in clean_env({"OMP_NUM_THREADS": "1"}).items()
            if k not in (runtime_env.RANK, runtime_env.WORLD_SIZE, runtime_env.LOCAL_RANK, runtime_env.MASTER_ADDR,
                         runtime_env.MASTER_PORT, runtime_env.LOCAL_WORLD_SIZE)}
    learners = []
    for rank in range(2):
        learner_env = {**base, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}
        with (root / f"rank-{rank}.log").open("wb") as log:
            learners.append(subprocess.Popen(
                [PY, str(EXAMPLE / "train.py"), "--checkpoint-dir", str(root / "checkpoints"),
                 "--results-dir", str(root / "results")],
                cwd=root, env=learner_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    try:
        yield learners
    finally:
        for p in learners:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def manifest(tmp_path: Path, results: Path) -> Path:
    """examples/ddp_digits/job.yaml as a user adapts it: workdir at the checkout, a results target."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    doc["workdir"] = str(REPO)
    doc["results"] = results.as_uri()  # file://...
    doc["command"] = [*doc["command"], "--step-delay", STEP_DELAY]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_ddp_digits_halts_resumes_and_ends_as_it_does_alone(sqlite_url: str, tmp_path: Path,
                                                             alone: list[subprocess.Popen[bytes]]) -> None:
    results = tmp_path / "results-target"
    with running_server(sqlite_url, tmp_path / "server", grace_s=20.0) as server:
        token = server.tenant("digits", gpus=8)
        job_id = server.submit(manifest(tmp_path, results), token)
        halting = _halt_mid_training(server, token, job_id)
        checkpoint = runtime.latest_checkpoint(server.data_dir / "jobs" / job_id / "checkpoints")
        assert checkpoint is not None
        stopped_at = runtime.checkpoint_step(checkpoint)
        assert halting <= stopped_at < STEPS
        assert not (results / "metrics.json").exists()  # nothing is stored for a halted job

        done = server.cli("job", "resume", job_id, token=token)
        assert done.returncode == 0 and "QUEUED" in done.stdout, done.stdout + done.stderr
        job = server.wait_status(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout_s=180)
        assert job["status"] == "COMPLETED", job["history"]
        assert [h["to_status"] for h in job["history"]] == [
            "QUEUED", "PROCESSING", "HALTED", "QUEUED", "PROCESSING", "STORING", "COMPLETED"]
        first, second = job["attempt_history"]
        assert first["outcome"] == "stopped" and second["outcome"] == "succeeded"
        assert [(e["rank"], e["exit_code"]) for e in first["exit_codes"]] == [(0, 0), (1, 0)]  # both checkpointed
        assert job["failures"] == 0

        platform_run = json.loads((results / "metrics.json").read_text())  # copied to the results target
        assert platform_run["attempt"] == 2 and platform_run["steps"] == STEPS and platform_run["world_size"] == 2

        logs = server.cli("job", "logs", job_id, "--rank", "1", token=token)
        assert logs.returncode == 0, logs.stdout + logs.stderr
        assert f"rank 1: resumed from {checkpoint.name}" in logs.stdout, logs.stdout
        assert "rank 0:" not in logs.stdout and "[rank 0]" not in logs.stdout, logs.stdout
        first_logs = server.cli("job", "logs", job_id, "--rank", "0", "--attempt", "1", token=token)
        assert f"rank 0: asked to stop; checkpointed {checkpoint.name}" in first_logs.stdout, first_logs.stdout

    codes = [p.wait(timeout=300) for p in alone]
    alone_logs = "".join((tmp_path / "alone" / f"rank-{r}.log").read_text() for r in range(2))
    assert codes == [0, 0], alone_logs
    alone_run = json.loads((tmp_path / "alone" / "results" / "metrics.json").read_text())
    assert alone_run["attempt"] == 1 and alone_run["steps"] == STEPS
    assert platform_run["weights_sha256"] == alone_run["weights_sha256"]
    assert platform_run["test_accuracy"] == alone_run["test_accuracy"] > 0.9


def _halt_mid_training(server: Server, token: str, job_id: str) -> int:
    """`job halt` once the learners have reported some steps; the step reached when asked. Waits for HALTED."""
    running = server.wait_job(job_id, lambda j: j["status"] == "PROCESSING" and (j["progress"]["last_step"] or 0) >= 20,
                              "PROCESSING past step 20", timeout_s=120)
    reached = int(running["progress"]["last_step"])
    done = server.cli("job", "halt", job_id, token=token)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "halt requested" in done.stdout or "HALTED" in done.stdout, done.stdout
    halted = server.wait_status(job_id, "HALTED", "COMPLETED", "FAILED", timeout_s=60)
    assert halted["status"] == "HALTED", halted["history"]
    (attempt,) = halted["attempt_history"]
    assert attempt["outcome"] == "stopped" and attempt["ended_at"] is not None, attempt
    return reached
