"""The learner's environment contract (torchrun's names, node groups, GPUs by LOCAL_RANK, threads, buffering) and
the stop protocol on whole process trees (launchers whose workers leave the group), with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.platform.executors.base import AttemptSpec, LearnerExit, LearnerSpec
from loadmaster.platform.executors.envvars import learner_env, omp_threads, placements
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.executors.procs import proc_state
from loadmaster.platform.executors.tree import ProcessTable
from loadmaster.platform.manifest import JobManifest
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

TREE_LEARNER = str(Path(__file__).with_name("tree_learner.py"))
GPU_MAP = {"n0": (0, 1, 2, 3), "n1": (4, 5, 6, 7)}


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers()


def _envs(tmp_path: Path, gang: tuple[LearnerSpec, ...], **env: str) -> list[dict[str, str]]:
    spec = attempt_spec(tmp_path, "env", gang=gang, env=env)
    ex = LocalExecutor(gpu_map=GPU_MAP)
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    assert ended.succeeded, [log_text(spec, r) for r in range(len(gang))]
    return [json.loads(log_text(spec, r).strip().splitlines()[-1]) for r in range(len(gang))]


# ----------------------------------------------------------------------------------------------- the contract


def test_learners_on_a_node_see_its_gpus_of_the_job_and_form_a_group(tmp_path: Path) -> None:
    # ranks 0 and 2 on n1, rank 1 on n0: n1 (the node of rank 0) is group 0
    gang = (LearnerSpec(0, "n1", (3,), 2.0, 1.0), LearnerSpec(1, "n0", (1,), 2.0, 1.0),
            LearnerSpec(2, "n1", (0,), 2.0, 1.0))
    envs = _envs(tmp_path, gang)
    got = [{k: e[k] for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                              "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "WORLD_SIZE",
                              "CUDA_VISIBLE_DEVICES")} for e in envs]
    assert got == [
        {"RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "NODE_RANK": "0",
         "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "3", "ROLE_NAME": "default",
         "WORLD_SIZE": "3", "CUDA_VISIBLE_DEVICES": "7,4"},  # n1's GPUs 3 and 0 are the machine's 7 and 4
        {"RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1", "NODE_RANK": "1",
         "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "3", "ROLE_NAME": "default",
         "WORLD_SIZE": "3", "CUDA_VISIBLE_DEVICES": "1"},
        {"RANK": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "NODE_RANK": "0",
         "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "2", "ROLE_WORLD_SIZE": "3", "ROLE_NAME": "default",
         "WORLD_SIZE": "3", "CUDA_VISIBLE_DEVICES": "7,4"},
    ]
    # torch.cuda.set_device(LOCAL_RANK) selects the learner's own GPU
    for e, learner in zip(envs, gang, strict=True):
        physical = GPU_MAP[learner.node][learner.gpu_ids[0]]
        assert e["CUDA_VISIBLE_DEVICES"].split(",")[int(e["LOCAL_RANK"])] == str(physical)


def test_learners_with_several_gpus_see_only_their_own(tmp_path: Path) -> None:
    # two torchrun-style learners of 2 GPUs on one node: by LOCAL_RANK they could not tell their GPUs apart
    gang = learners(("n0", (0, 1)), ("n0", (2, 3)))
    envs = _envs(tmp_path, gang)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]
    assert [(e["LOCAL_RANK"], e["GROUP_RANK"]) for e in envs] == [("0", "0"), ("1", "0")]


def test_threads_follow_the_cpus_and_output_is_unbuffered_unless_the_manifest_says_otherwise(tmp_path: Path) -> None:
    gang = (LearnerSpec(0, "n0", (), 2.5, 1.0), LearnerSpec(1, "n0", (), 0.5, 1.0))
    envs = _envs(tmp_path, gang)
    assert [e["OMP_NUM_THREADS"] for e in envs] == ["2", "1"]
    assert {e["PYTHONUNBUFFERED"] for e in envs} == {"1"}
    envs = _envs(tmp_path, gang, OMP_NUM_THREADS="4", PYTHONUNBUFFERED="")
    assert [(e["OMP_NUM_THREADS"], e["PYTHONUNBUFFERED"]) for e in envs] == [("4", ""), ("4", "")]


@pytest.mark.parametrize(("cpus", "threads"), [(0.1, 1), (1.0, 1), (1.999, 1), (2.0, 2), (16.0, 16), (64.5, 64)])
def test_omp_threads(cpus: float, threads: int) -> None:
    assert omp_threads(cpus) == threads


@st.composite
def gangs(draw: st.DrawFn) -> tuple[LearnerSpec, ...]:
    nodes = draw(st.integers(1, 4))
    size = draw(st.integers(1, 12))
    per = draw(st.sampled_from([0, 1, 1, 2]))
    free = {f"n{i}": list(draw(st.permutations(range(32)))) for i in range(nodes)}
    out = []
    for rank in range(size):
        node = draw(st.sampled_from(sorted(free)))
        ids = tuple(free[node].pop(0) for _ in range(per))
        out.append(LearnerSpec(rank, node, ids, 1.0, 1.0))
    return tuple(out)


@settings(max_examples=200, deadline=None)
@given(gangs())
def test_grouping_invariants(gang: tuple[LearnerSpec, ...]) -> None:
    spec = attempt_spec(Path("/nonexistent"), "env", gang=gang)
    places = placements(spec)
    nodes = list(dict.fromkeys(lr.node for lr in gang))  # in order of their lowest rank
    assert places[0].group_rank == 0
    for learner in gang:
        p = places[learner.rank]
        same = [lr.rank for lr in gang if lr.node == learner.node]
        assert p.group_rank == nodes.index(learner.node) and p.group_world_size == len(nodes)
        assert p.local_world_size == len(same) and p.local_rank == same.index(learner.rank)
        # every learner sees its own GPUs, and nothing outside the job's GPUs on its node
        assert set(learner.gpu_ids) <= set(p.visible_gpus)
        node_gpus = {g for lr in gang if lr.node == learner.node for g in lr.gpu_ids}
        assert set(p.visible_gpus) <= node_gpus
        if len(learner.gpu_ids) == 1:
            assert p.visible_gpus[p.local_rank] == learner.gpu_ids[0]
        else:
            assert p.visible_gpus == learner.gpu_ids
        env = learner_env(spec, learner, p, master_addr="h", cuda_visible_devices="", report_file="r",
                          preempt_file="p")
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(p.group_rank)
        assert env["ROLE_RANK"] == env["RANK"] == str(learner.rank)


def test_a_shell_command_fails_when_any_stage_of_a_pipe_fails(tmp_path: Path) -> None:
    argv = JobManifest(name="p", command="echo before; false | cat; echo after").argv
    spec = attempt_spec(tmp_path, command=argv, gang=learners(("n0", ())))
    ex = LocalExecutor()
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    assert ended.succeeded  # pipefail alone does not stop a script (no -e): the pipe's status is what it is
    argv = JobManifest(name="p", command="false | cat").argv
    spec = attempt_spec(tmp_path, command=argv, gang=learners(("n0", ())))
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    assert ended.exits == (LearnerExit(0, 1),)  # /bin/sh would have said 0 (cat's status)


# ------------------------------------------------------------------------------------------- process trees


def _pid(directory: Path, name: str) -> int:
    return int((directory / f"pid-{name}").read_text())


def _gone(pid: int) -> bool:
    state = proc_state(pid)
    return state is None or state.exited


def _launch_tree_learner(tmp_path: Path, mode: str) -> tuple[LocalExecutor, AttemptSpec, Path]:
    """One learner running tree_learner.py MODE; the folder its processes mark themselves in."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = attempt_spec(tmp_path, command=(sys.executable, TREE_LEARNER, mode, str(marks)), gang=learners(("n0", ())))
    ex = LocalExecutor()
    ex.launch(spec)
    return ex, spec, marks


def test_stop_reaches_workers_in_sessions_of_their_own_and_kills_them_after_the_grace(tmp_path: Path) -> None:
    ex, spec, marks = _launch_tree_learner(tmp_path, "launcher")
    wait_until(lambda: "ready" in log_text(spec, 0), what="the launcher's workers")
    workers = [_pid(marks, f"worker{i}") for i in range(2)]
    assert all(os.getsid(w) == w for w in workers)  # their own sessions: a group signal misses them
    start = time.monotonic()
    ex.stop(spec.job_id, spec.attempt, grace_s=1.0)
    ended, _ = wait_for_end(ex)
    assert time.monotonic() - start >= 1.0  # they used their grace period (they trap SIGTERM)
    assert ended.stopped and ended.exits == (LearnerExit(0, -signal.SIGKILL),)
    for name in ("launcher", "worker0", "worker1"):
        assert (marks / f"term-{name}").exists(), f"SIGTERM did not reach {name}"
        # once: a second SIGTERM can kill a Python learner that is exiting after the first
        assert len((marks / f"term-{name}").read_text().splitlines()) == 1, name
    assert all(_gone(w) for w in workers)
    assert processes_of(spec.job_id) == []


def test_an_orphan_that_left_the_group_dies_with_its_learner(tmp_path: Path) -> None:
    ex, spec, marks = _launch_tree_learner(tmp_path, "orphan")
    ended, _ = wait_for_end(ex)
    assert ended.succeeded
    orphan = _pid(marks, "orphan")
    wait_until(lambda: _gone(orphan), timeout_s=10, what="the orphaned worker to be killed")
    assert processes_of(spec.job_id) == []


def test_the_manifests_grace_period_beats_the_servers(tmp_path: Path) -> None:
    import dataclasses

    spec = dataclasses.replace(attempt_spec(tmp_path, "ignore", gang=learners(("n0", ()))), stop_grace_s=0.3)
    ex = LocalExecutor()
    ex.launch(spec)
    wait_until(lambda: "ready" in log_text(spec, 0), what="the learner to ignore SIGTERM")
    start = time.monotonic()
    ex.stop(spec.job_id, spec.attempt, grace_s=60)
    ended, _ = wait_for_end(ex, timeout_s=20)
    assert 0.3 <= time.monotonic() - start < 10
    assert ended.exits == (LearnerExit(0, -signal.SIGKILL),)


def test_a_gang_failure_gives_the_others_the_manifests_grace(tmp_path: Path) -> None:
    import dataclasses

    script = 'if [ "$RANK" = 0 ]; then sleep 0.5; exit 3; else trap "" TERM; sleep 60; fi'
    spec = dataclasses.replace(attempt_spec(tmp_path, command=("bash", "-c", script)), stop_grace_s=0.2)
    ex = LocalExecutor(failure_grace_s=60)
    ex.launch(spec)
    start = time.monotonic()
    ended, _ = wait_for_end(ex, timeout_s=20)
    assert time.monotonic() - start < 10  # not the executor's 60 s
    assert ended.first_failure == LearnerExit(0, 3)
    assert dict((e.rank, e.exit_code) for e in ended.exits) == {0: 3, 1: -signal.SIGKILL}


def test_process_table_finds_descendants_in_other_sessions(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
                              "start_new_session=True); time.sleep(60)"])
    try:
        wait_until(lambda: len(ProcessTable.scan().descendants(child.pid)) == 1, what="the grandchild")
        [grandchild] = ProcessTable.scan().descendants(child.pid)
        assert os.getsid(grandchild) == grandchild
        assert child.pid in ProcessTable.scan().descendants(os.getpid())
    finally:
        for pid in ProcessTable.scan().descendants(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_become_subreaper_in_a_child() -> None:
    code = ("from loadmaster.platform.executors.tree import become_subreaper; import sys; "
            "sys.exit(0 if become_subreaper() else 1)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
