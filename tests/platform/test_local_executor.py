"""LocalExecutor with real processes: gang start and end, the environment, stop, launch failures, reattach
after a simulated server crash, and progress tailing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadmaster.platform.executors.base import AttemptSpec, LaunchError, LearnerExit
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.executors.ports import free_port
from loadmaster.platform.executors.procs import proc_state
from tests.platform.executor_helpers import (
    attempt_spec,
    kill_leftovers,
    learners,
    log_text,
    processes_of,
    wait_for_end,
    wait_until,
)

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the tests inspect processes through /proc")

GPU_MAP = {"n0": (0, 1, 2, 3), "n1": (4, 5, 6, 7)}


def _env_of(spec_log: str) -> dict[str, str]:
    env: dict[str, str] = json.loads(spec_log.strip().splitlines()[-1])
    return env


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers()  # only a failed test leaves learners behind; the others would not run beside them


def test_gang_succeeds_and_every_learner_gets_the_runtime_env(tmp_path: Path) -> None:
    gang = learners(("n0", (2, 3)), ("n0", (0,)), ("n1", (1,)), ("n1", ()))
    spec = attempt_spec(tmp_path, "env", gang=gang, env={"MANIFEST_VAR": "x y", "RANK": "manifest loses"})
    ex = LocalExecutor(gpu_map=GPU_MAP)
    handle = ex.launch(spec)
    assert json.loads(json.dumps(handle)) == handle  # persisted as JSON by the control loop
    ended, _ = wait_for_end(ex)

    assert ended.succeeded and not ended.stopped and ended.first_failure is None
    assert ended.exits == tuple(LearnerExit(r, 0) for r in range(4))
    envs = [_env_of(log_text(spec, r)) for r in range(4)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert [(e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [("0", "2"), ("1", "2"), ("0", "2"), ("1", "2")]
    # node n1's GPU 1 is the machine's GPU 5; a learner without GPUs sees none
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2,3", "0", "5", ""]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("127.0.0.1", str(spec.master_port))}
    for rank, e in enumerate(envs):
        assert e["MANIFEST_VAR"] == "x y"
        assert e["LOADMASTER_JOB_ID"] == spec.job_id and e["LOADMASTER_ATTEMPT"] == "1"
        assert e["LOADMASTER_CHECKPOINT_DIR"] == spec.checkpoint_dir
        assert e["LOADMASTER_RESULTS_DIR"] == spec.results_dir
        assert e["LOADMASTER_REPORT_FILE"] == str(Path(spec.report_dir) / f"rank-{rank}.jsonl")
        assert Path(e["LOADMASTER_PREEMPT_FILE"]).parent == Path(spec.log_dir)
        assert "LOADMASTER_DATA_DIR" not in e
        assert (Path(spec.log_dir) / f"rank-{rank}.exit").read_text().strip() == "0"
    assert Path(spec.checkpoint_dir).is_dir() and Path(spec.results_dir).is_dir()
    assert not Path(envs[0]["LOADMASTER_PREEMPT_FILE"]).exists()  # nobody asked it to stop


def test_nothing_of_the_host_environment_is_inherited_and_data_dir_is_set(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADMASTER_DB_URL", "postgresql://secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "server-secret")
    spec = attempt_spec(tmp_path, "env", gang=learners(("n0", (0,))), data_dir=str(tmp_path / "data"))
    ex = LocalExecutor()
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    env = _env_of(log_text(spec, 0))
    assert ended.succeeded
    assert "LOADMASTER_DB_URL" not in env and env["LOADMASTER_DATA_DIR"] == str(tmp_path / "data")
    assert "AWS_SECRET_ACCESS_KEY" not in env  # nor anything else of the server's environment
    assert env["PATH"].startswith(os.path.dirname(sys.executable) + ":")  # the server's Python first
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # no gpu_map: the ids as given


def test_one_learner_failing_stops_the_others(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "fail", "1", "3", gang=learners(("n0", (0,)), ("n0", (1,)), ("n0", (2,))))
    ex = LocalExecutor(failure_grace_s=5)
    ex.launch(spec)
    start = time.monotonic()
    ended, _ = wait_for_end(ex)
    assert time.monotonic() - start < 5  # the others went down at SIGTERM, not at the deadline
    assert ended.first_failure == LearnerExit(1, 3)
    assert dict((e.rank, e.exit_code) for e in ended.exits) == {0: -signal.SIGTERM, 1: 3, 2: -signal.SIGTERM}
    assert not ended.stopped and not ended.succeeded
    assert json.loads((Path(spec.log_dir) / "preempt").read_text())["reason"] == "gang_failure"
    assert processes_of(spec.job_id) == []


def test_stop_lets_a_learner_that_traps_sigterm_finish(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "trap")
    ex = LocalExecutor()
    ex.launch(spec)
    wait_until(lambda: all("ready" in log_text(spec, r) for r in (0, 1)), what="learners to arm their handlers")
    ex.stop(spec.job_id, spec.attempt, grace_s=20)
    ended, _ = wait_for_end(ex)
    assert ended.stopped and not ended.succeeded and ended.first_failure is None
    assert ended.exits == (LearnerExit(0, 0), LearnerExit(1, 0))
    # the preempt file was there before SIGTERM arrived
    assert all("SIGTERM preempt=True" in log_text(spec, r) for r in (0, 1))


def test_stop_kills_a_learner_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "ignore", gang=learners(("n0", (0,))))
    ex = LocalExecutor()
    ex.launch(spec)
    wait_until(lambda: "ready" in log_text(spec, 0), what="the learner to ignore SIGTERM")
    start = time.monotonic()
    ex.stop(spec.job_id, spec.attempt, grace_s=0.5)
    ended, _ = wait_for_end(ex)
    assert 0.5 <= time.monotonic() - start < 10
    assert ended.stopped and ended.exits == (LearnerExit(0, -signal.SIGKILL),)
    assert processes_of(spec.job_id) == []


def test_stop_of_an_unknown_attempt_is_a_no_op(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ex.stop("nobody", 1, grace_s=1)
    assert ex.poll().ended == ()


def test_launch_failure_missing_workdir_starts_nothing(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env", workdir=str(tmp_path / "missing"))
    with pytest.raises(LaunchError, match="workdir"):
        LocalExecutor().launch(spec)
    assert not Path(spec.log_dir).exists() and processes_of(spec.job_id) == []


def test_launch_failure_missing_executable_names_it(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, command=("/nonexistent/trainer", "--lr", "1"))
    ex = LocalExecutor()
    with pytest.raises(LaunchError, match=r"could not start: .*/nonexistent/trainer"):
        ex.launch(spec)
    assert processes_of(spec.job_id) == [] and ex.poll().ended == ()
    assert "/nonexistent/trainer" in log_text(spec, 0)  # the user finds the reason in the log too


def test_launch_failure_after_one_learner_started_kills_it(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "ignore")
    # rank 1's log path is a directory: its shim cannot start, after rank 0's has
    (Path(spec.log_dir) / "rank-1.log").mkdir(parents=True)
    ex = LocalExecutor()
    with pytest.raises(LaunchError, match="learner 1 could not start"):
        ex.launch(spec)
    assert processes_of(spec.job_id) == []
    ex.launch(attempt_spec(tmp_path, "env", gang=learners(("n0", (0,)))))  # the executor still works
    assert wait_for_end(ex)[0].succeeded


@pytest.mark.parametrize(("gpus", "match"), [(("n2", (0,)), "node 'n2'"), (("n1", (4,)), r"GPUs \[4\]")])
def test_launch_refuses_placements_outside_the_gpu_map(tmp_path: Path, gpus: tuple[str, tuple[int, ...]],
                                                       match: str) -> None:
    spec = attempt_spec(tmp_path, "env", gang=learners(("n0", (0,)), gpus))
    with pytest.raises(LaunchError, match=match):
        LocalExecutor(gpu_map=GPU_MAP).launch(spec)
    assert processes_of(spec.job_id) == []


def test_launch_refuses_bad_specs(tmp_path: Path) -> None:
    ex = LocalExecutor()
    with pytest.raises(LaunchError, match="command is empty"):
        ex.launch(attempt_spec(tmp_path, command=()))
    with pytest.raises(LaunchError, match=r"ranks must be 0..1"):
        ex.launch(attempt_spec(tmp_path, "env", gang=learners(("n0", ()), ("n0", ()))[1:] * 2))
    spec = attempt_spec(tmp_path, "trap", gang=learners(("n0", ())))
    ex.launch(spec)
    with pytest.raises(LaunchError, match="already running"):
        ex.launch(spec)
    ex.stop(spec.job_id, spec.attempt, 0)
    wait_for_end(ex)


def test_leftover_processes_of_a_learner_are_killed_with_it(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, command=("/bin/sh", "-c", "sleep 300 & echo $!; exit 0"),
                        gang=learners(("n0", ())))
    ex = LocalExecutor()
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    assert ended.succeeded
    background = int(log_text(spec, 0).split()[0])
    state = proc_state(background)
    assert state is None or state.exited


def test_reattach_after_a_server_crash_adopts_the_running_gang(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    first = LocalExecutor()
    handle = json.loads(json.dumps(first.launch(spec)))
    wait_until(lambda: all(_reports(spec, r) >= 2 for r in (0, 1)), what="some progress")
    first.poll()
    del first  # the server crashes: no close(), no stop

    second = LocalExecutor()
    assert second.reattach(spec, handle)
    assert second.reattach(spec, handle)  # idempotent
    early = second.poll()
    assert early.ended == ()
    (tmp_path / "go-0").write_text("0")
    (tmp_path / "go-1").write_text("0")
    ended, progress = wait_for_end(second)
    progress = [*early.progress, *progress]
    assert ended.succeeded
    # after a reattach every line of the attempt is reported again (the loop keeps the latest step)
    for rank in (0, 1):
        steps = [p.report["step"] for p in progress if p.rank == rank]
        assert steps == list(range(1, _reports(spec, rank) + 1))


SERVER = """
import json, sys
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.platform.executors.local import LocalExecutor
raw = json.loads(sys.argv[1])
spec = AttemptSpec(**{**raw, "command": tuple(raw["command"]),
                      "learners": tuple(LearnerSpec(**{**l, "gpu_ids": tuple(l["gpu_ids"])}) for l in raw["learners"])})
print(json.dumps(LocalExecutor().launch(spec)), flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_learners_survive_a_kill_9_of_the_server_process(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    raw = dataclasses.asdict(spec)
    server = subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(raw)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    handle = json.loads(server.stdout.readline())
    server.kill()  # SIGKILL: no cleanup of any kind
    server.wait()
    wait_until(lambda: all(_reports(spec, r) >= 2 for r in (0, 1)), what="the learners to go on reporting")
    ex = LocalExecutor()
    assert ex.reattach(spec, handle)
    (tmp_path / "go-0").write_text("0")
    (tmp_path / "go-1").write_text("0")
    assert wait_for_end(ex)[0].succeeded


def test_reattach_reports_learners_that_ended_while_the_server_was_down(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    first = LocalExecutor(failure_grace_s=5)
    handle = first.launch(spec)
    first.close()  # the server stops; learners keep running
    (tmp_path / "go-1").write_text("2")  # rank 1 fails while nobody watches
    wait_until(lambda: (Path(spec.log_dir) / "rank-1.exit").exists(), what="rank 1 to exit")

    second = LocalExecutor(failure_grace_s=5)
    assert second.reattach(spec, handle)
    ended, _ = wait_for_end(second)  # rank 0 is stopped because rank 1 failed
    assert ended.first_failure == LearnerExit(1, 2)
    assert ended.exits == (LearnerExit(0, -signal.SIGTERM), LearnerExit(1, 2))
    assert processes_of(spec.job_id) == []


def test_reattach_when_every_learner_ended_meanwhile(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env")
    first = LocalExecutor()
    handle = first.launch(spec)
    first.close()
    wait_until(lambda: all((Path(spec.log_dir) / f"rank-{r}.exit").exists() for r in (0, 1)), what="exits")
    second = LocalExecutor()
    assert second.reattach(spec, handle)
    assert wait_for_end(second)[0].succeeded


def test_reattach_restores_a_stop_that_was_under_way(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "ignore", gang=learners(("n0", ())))
    first = LocalExecutor()
    handle = first.launch(spec)
    wait_until(lambda: "ready" in log_text(spec, 0), what="the learner to ignore SIGTERM")
    first.stop(spec.job_id, spec.attempt, grace_s=0.5)
    first.close()
    second = LocalExecutor()
    assert second.reattach(spec, handle)
    ended, _ = wait_for_end(second)
    assert ended.stopped and ended.exits == (LearnerExit(0, -signal.SIGKILL),)


def test_reattach_refuses_what_it_cannot_account_for(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env")
    ex = LocalExecutor()
    handle = ex.launch(spec)
    wait_for_end(ex)
    assert not ex.reattach(spec, {**handle, "executor": "ray"})
    assert not ex.reattach(spec, {**handle, "attempt": 2})
    assert not ex.reattach(spec, {"executor": "local", "job_id": spec.job_id, "attempt": 1, "learners": [{}]})
    (Path(spec.log_dir) / "rank-1.exit").unlink()  # as after a reboot: no process and no exit code
    assert not ex.reattach(spec, handle)


def test_reattach_does_not_mistake_a_recycled_pid(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners(("n0", ())))
    ex = LocalExecutor()
    handle = ex.launch(spec)
    ex.close()
    # the same pids, started at another time: not our learner (its real shim is left running here)
    forged = {**handle, "learners": [{**entry, "shim_start": "1", "start": "1"} for entry in handle["learners"]]}
    other = LocalExecutor()
    assert not other.reattach(spec, forged)
    assert other.reattach(spec, handle)
    (tmp_path / "go-0").write_text("0")
    assert wait_for_end(other)[0].succeeded


def test_a_learner_whose_shim_is_killed_counts_as_killed_and_stops_the_gang(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path))
    ex = LocalExecutor(failure_grace_s=5)
    handle = ex.launch(spec)
    rank1 = handle["learners"][1]
    os.kill(rank1["shim_pid"], signal.SIGKILL)
    ended, _ = wait_for_end(ex)
    assert ended.first_failure == LearnerExit(1, -signal.SIGKILL)
    assert "shim" in log_text(spec, 1)
    assert processes_of(spec.job_id) == []


def test_no_zombies_are_left_behind(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env")
    ex = LocalExecutor()
    handle = ex.launch(spec)
    wait_for_end(ex)
    for entry in handle["learners"]:
        assert proc_state(entry["shim_pid"]) is None or proc_state(entry["shim_pid"]).start != entry["shim_start"]


def test_progress_is_tailed_incrementally_and_a_partial_line_waits(tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "partial", str(tmp_path), gang=learners(("n0", ())))
    ex = LocalExecutor()
    ex.launch(spec)
    wait_until(lambda: "ready" in log_text(spec, 0), what="the half-written line")
    seen = [p.report for p in ex.poll().progress]
    assert seen == [{"step": 1}]
    assert ex.poll().progress == ()  # nothing new: the half line is not reported
    (tmp_path / "go-0").write_text("0")
    ended, progress = wait_for_end(ex)
    assert ended.succeeded
    # the line finished later is whole; the non-JSON line is skipped; the last line has no newline
    assert [p.report for p in progress] == [{"step": 2}, {"step": 3}]
    assert {(p.job_id, p.attempt, p.rank) for p in progress} == {(spec.job_id, 1, 0)}


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _reports(spec: AttemptSpec, rank: int) -> int:
    path = Path(spec.report_dir) / f"rank-{rank}.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def test_the_shim_runs_from_a_source_checkout_without_install(tmp_path: Path) -> None:
    # The shim must not depend on the server's working directory (it is started with its own).
    spec = attempt_spec(tmp_path, "env", gang=learners(("n0", ())))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ex = LocalExecutor()
        ex.launch(spec)
        assert wait_for_end(ex)[0].succeeded
    finally:
        os.chdir(cwd)
