"""RayExecutor on a real local Ray instance (one for the module): gang, env, failure, stop, launch
failures, reattach by actor name, and the copying of logs and reports back to the server's paths."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadmaster.platform.executors.base import AttemptSpec, LaunchError, LearnerExit
from loadmaster.platform.executors.ray import NAMESPACE, RayExecutor, actor_name, node_names, ray_cluster, ray_nodes
from tests.platform.executor_helpers import (
    attempt_spec,
    kill_leftovers,
    learners,
    log_text,
    processes_of,
    wait_for_end,
    wait_until,
)

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local Ray instance shared by the module's tests; yields loadmaster's name of its one node."""
    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False,
             configure_logging=False)
    try:
        yield next(iter(node_names(ray_nodes())))
    finally:
        ray.shutdown()


@pytest.fixture
def scratch(tmp_path: Path) -> str:
    return str(tmp_path / "node-scratch")


def _named_actors(job_id: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(job_id)]


def _actor_gone(name: str) -> bool:
    """Whether Ray no longer finds the actor by name (what reattach asks; list_named_actors may say so first)."""
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    return False


def _env_of(spec: AttemptSpec, rank: int) -> dict[str, Any]:
    env: dict[str, Any] = json.loads(log_text(spec, rank).strip().splitlines()[-1])
    return env


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers()  # only a failed test leaves learners behind; the others would not run beside them


def test_importing_the_module_does_not_import_ray() -> None:
    code = "import sys, loadmaster.platform.executors.ray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_gang_succeeds_env_and_files_come_back(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "env", gang=learners((node, (0, 1)), (node, ())), env={"MANIFEST_VAR": "1"})
    ex = RayExecutor(scratch_root=scratch)
    handle = ex.launch(spec)
    assert json.loads(json.dumps(handle)) == handle
    ended, _ = wait_for_end(ex)
    assert ended.succeeded and ended.exits == (LearnerExit(0, 0), LearnerExit(1, 0))
    envs = [_env_of(spec, r) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", ""]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    # picked free on rank 0's node, from the executor's range (the server's booking is only a preference)
    assert {e["MASTER_PORT"] for e in envs} == {str(handle["master_port"])} and 29500 <= handle["master_port"] < 30000
    assert {e["MASTER_ADDR"] for e in envs} == {handle["master_addr"]} and handle["master_addr"] != "127.0.0.1"
    assert {e["MANIFEST_VAR"] for e in envs} == {"1"}
    # the learners wrote on "their node" (the scratch dir); the server has the copies at the spec's paths
    assert all(e["LOADMASTER_REPORT_FILE"].startswith(scratch) for e in envs)
    assert all((Path(spec.log_dir) / f"rank-{r}.exit").read_text().strip() == "0" for r in (0, 1))
    wait_until(lambda: _named_actors(spec.job_id) == [], 20, "the hosts to go")
    wait_until(lambda: not any(Path(scratch).rglob("rank-*")), 20, "the scratch files to go")


def test_one_learner_failing_stops_the_other(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "fail", "1", "3", gang=learners((node, ()), (node, ())))
    ex = RayExecutor(scratch_root=scratch, failure_grace_s=5)
    ex.launch(spec)
    ended, _ = wait_for_end(ex)
    assert ended.first_failure == LearnerExit(1, 3) and not ended.stopped
    assert ended.exits == (LearnerExit(0, -signal.SIGTERM), LearnerExit(1, 3))
    assert processes_of(spec.job_id) == []


def test_stop_grace_then_sigkill(node: str, tmp_path: Path, scratch: str) -> None:
    # rank 0 traps SIGTERM and exits 0 within the grace; rank 1 ignores it and is killed at the deadline
    spec = attempt_spec(tmp_path, "mixed", gang=learners((node, ()), (node, ())))
    ex = RayExecutor(scratch_root=scratch)
    ex.launch(spec)

    def armed() -> bool:
        ex.poll()
        return all("ready" in log_text(spec, r) for r in (0, 1))

    wait_until(armed, what="the learners to arm their handlers")
    ex.stop(spec.job_id, spec.attempt, grace_s=1.0)
    ended, _ = wait_for_end(ex)
    assert ended.stopped and ended.exits == (LearnerExit(0, 0), LearnerExit(1, -signal.SIGKILL))
    assert "SIGTERM preempt=True" in log_text(spec, 0)
    assert processes_of(spec.job_id) == []


def test_launch_failure_leaves_nothing(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "env", workdir=str(tmp_path / "missing"), gang=learners((node, ()), (node, ())))
    ex = RayExecutor(scratch_root=scratch)
    with pytest.raises(LaunchError, match=r"could not start on .*missing"):
        ex.launch(spec)
    wait_until(lambda: _named_actors(spec.job_id) == [], 20, "the hosts to go")
    assert processes_of(spec.job_id) == [] and ex.poll().ended == ()


def test_a_node_ray_does_not_have_is_refused(node: str, tmp_path: Path) -> None:
    spec = attempt_spec(tmp_path, "env", gang=learners(("gpu-017", ())))
    with pytest.raises(LaunchError, match=f"'gpu-017', which matches no alive Ray node \\(known: {node}\\)"):
        RayExecutor().launch(spec)
    mapped = RayExecutor(node_map={"gpu-017": ray_nodes()[0].node_id})
    mapped.launch(spec)
    assert wait_for_end(mapped)[0].succeeded


def _launch_then_crash(spec: AttemptSpec, scratch: str) -> dict[str, Any]:
    first = RayExecutor(scratch_root=scratch)
    handle: dict[str, Any] = json.loads(json.dumps(first.launch(spec)))
    ranks_seen: set[int] = set()

    def both_reported() -> bool:
        ranks_seen.update(p.rank for p in first.poll().progress)
        return ranks_seen == {0, 1}

    wait_until(both_reported, what="some progress of each learner copied")
    return handle  # the executor is dropped without close() or stop(): the server crashed


def test_reattach_by_actor_name_after_a_crash(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners((node, ()), (node, ())))
    handle = _launch_then_crash(spec, scratch)
    (tmp_path / "go-1").write_text("0")  # rank 1 ends while nobody watches
    second = RayExecutor(scratch_root=scratch)
    assert second.reattach(spec, handle)
    (tmp_path / "go-0").write_text("0")
    ended, progress = wait_for_end(second)
    assert ended.succeeded
    for rank in (0, 1):  # every line of the attempt, the ones copied before the crash included
        copied = (Path(spec.report_dir) / f"rank-{rank}.jsonl").read_text().splitlines()
        assert [p.report["step"] for p in progress if p.rank == rank] == list(range(1, len(copied) + 1))
    # the hosts are gone now: an attempt with a missing exit file cannot be accounted for
    # the names as reattach looks them up: under load a host listed as gone was still found by get_actor once
    wait_until(lambda: _named_actors(spec.job_id) == [] and all(
        _actor_gone(actor_name(spec.job_id, spec.attempt, rank)) for rank in (0, 1)), 20, "the hosts to go")
    (Path(spec.log_dir) / "rank-0.exit").unlink()
    assert not RayExecutor().reattach(spec, handle)
    assert not RayExecutor().reattach(spec, {**handle, "executor": "local"})


def test_a_lost_host_counts_as_killed_and_its_learner_is_cleaned_up(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "go", str(tmp_path), gang=learners((node, ()), (node, ())))
    ex = RayExecutor(scratch_root=scratch, failure_grace_s=5)
    handle = ex.launch(spec)
    ray.kill(ray.get_actor(handle["learners"][1]["actor"], namespace=NAMESPACE))
    ended, _ = wait_for_end(ex)
    assert ended.first_failure == LearnerExit(1, -signal.SIGKILL)
    assert ended.exits[0] == LearnerExit(0, -signal.SIGTERM)
    assert "Ray actor hosting this learner is gone" in log_text(spec, 1)
    wait_until(lambda: processes_of(spec.job_id) == [], 20, "the orphaned learner to be killed")


def test_progress_with_a_partial_line_is_copied_whole(node: str, tmp_path: Path, scratch: str) -> None:
    spec = attempt_spec(tmp_path, "partial", str(tmp_path), gang=learners((node, ())))
    ex = RayExecutor(scratch_root=scratch)
    ex.launch(spec)
    seen: list[dict[str, Any]] = []

    def half_written() -> bool:
        seen.extend(p.report for p in ex.poll().progress)
        return "ready" in log_text(spec, 0) and bool(seen)

    wait_until(half_written, what="the first line and the half line")
    assert seen == [{"step": 1}]
    (tmp_path / "go-0").write_text("0")
    ended, progress = wait_for_end(ex)
    assert ended.succeeded and [p.report for p in progress] == [{"step": 2}, {"step": 3}]
    assert (Path(spec.report_dir) / "rank-0.jsonl").read_text() == '{"step": 1}\n{"step": 2}\nnot json\n{"step": 3}'


def test_ray_cluster_lists_the_nodes(node: str) -> None:
    cluster = ray_cluster()
    assert [n.name for n in cluster.nodes] == [node]
    assert cluster.nodes[0].cpus == 2.0 and cluster.nodes[0].gpus == 0
