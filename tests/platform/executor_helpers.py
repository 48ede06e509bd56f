"""Shared by the executor tests: attempt specs that run executor_learner.py, and waiting for the end."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from loadmaster.platform.executors.base import AttemptEnded, AttemptSpec, Executor, LearnerSpec, Progress
from loadmaster.platform.executors.ports import free_port

LEARNER = str(Path(__file__).with_name("executor_learner.py"))
# Jobs the tests started: learners outlive their executor by design, so a failing test would leave them
# running; kill_leftovers() ends them (the modules call it after every test).
_STARTED: list[str] = []


def learners(*placements: tuple[str, tuple[int, ...]]) -> tuple[LearnerSpec, ...]:
    """One learner per (node, gpu_ids), ranked in order."""
    return tuple(LearnerSpec(rank, node, gpus, cpus=1.0, mem_gb=1.0) for rank, (node, gpus) in enumerate(placements))


def attempt_spec(
    root: Path,
    *args: str,
    gang: Sequence[LearnerSpec] | None = None,
    env: Mapping[str, str] | None = None,
    attempt: int = 1,
    workdir: str | None = None,
    command: tuple[str, ...] | None = None,
    data_dir: str | None = None,
) -> AttemptSpec:
    job_id = f"job-{uuid.uuid4().hex[:10]}"  # unique: the process scans of concurrent runs never mix
    _STARTED.append(job_id)
    base = root / job_id / f"attempt-{attempt}"
    return AttemptSpec(
        job_id=job_id, attempt=attempt,
        command=command if command is not None else (sys.executable, LEARNER, *args),
        workdir=workdir if workdir is not None else str(root),
        env=dict(env or {}),
        learners=tuple(gang) if gang is not None else learners(("n0", (0,)), ("n0", (1,))),
        master_port=free_port(),
        checkpoint_dir=str(root / job_id / "checkpoints"),
        results_dir=str(root / job_id / "results"),
        log_dir=str(base / "logs"),
        report_dir=str(base / "reports"),
        data_dir=data_dir,
    )


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def wait_for_end(executor: Executor, timeout_s: float = 30.0) -> tuple[AttemptEnded, list[Progress]]:
    """Poll until one attempt ends, and release it (as the control loop does once it has recorded the end);
    everything reported meanwhile comes along."""
    progress: list[Progress] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = executor.poll()
        progress.extend(result.progress)
        if result.ended:
            assert len(result.ended) == 1, result.ended
            ended = result.ended[0]
            executor.release(ended.job_id, ended.attempt)
            return ended, progress
        time.sleep(0.05)
    raise AssertionError(f"no attempt ended within {timeout_s} s")


def log_text(spec: AttemptSpec, rank: int) -> str:
    path = Path(spec.log_dir) / f"rank-{rank}.log"
    return path.read_text() if path.exists() else ""


def processes_with(matches: Callable[[list[bytes]], bool]) -> list[int]:
    """Pids of live processes (not zombies) whose environment (its NAME=VALUE entries) matches."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and matches(environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def processes_of(job_id: str) -> list[int]:
    """Pids of live processes whose environment names this job (learners and their children)."""
    marker = f"LOADMASTER_JOB_ID={job_id}".encode()
    return processes_with(lambda environ: marker in environ)


def kill_leftovers() -> list[str]:
    """SIGKILL what is left of the jobs the tests started; the jobs that had something left."""
    leaked = []
    while _STARTED:
        job_id = _STARTED.pop()
        pids = processes_of(job_id)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if pids:
            leaked.append(job_id)
    return leaked
