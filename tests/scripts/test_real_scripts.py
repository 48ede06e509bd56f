"""Real training scripts, run unmodified on CPU under a real `loadmaster server` (virtual nodes 2x4): a plain DDP
script that picks its device by LOCAL_RANK, the same script launched by torchrun (2 nodes x 2 processes as two
learners of 2 GPUs), and a Lightning-style script (Lightning's own environment checks, with loadmaster.runtime).
Each is preempted once by a job of a tenant reclaiming its quota (the fair policy) and resumed from its checkpoint;
the log of every attempt is complete, although the server runs without PYTHONUNBUFFERED (learners get it from the
platform). A Lightning-style job whose num_nodes does not match the job fails once, as the user's error."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.e2e.harness as harness
from tests.e2e.harness import REPO, Server, running_server, write_manifest

pytest.importorskip("torch")

SCRIPTS = Path(__file__).parent
STEPS = 30
DELAY = "0.3"  # seconds a step: the preemption lands mid-training, whatever the load
# Two tenants: `research` has no quota and borrows the whole cluster; `prod` owns it and takes it back.
RESEARCH, PROD = "research", "prod"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("scripts")

    def without_unbuffered(extra: dict[str, str] | None = None) -> dict[str, str]:
        env = clean_env(extra)
        env.pop("PYTHONUNBUFFERED", None)  # as a user's shell: the learners must get it from the platform
        return env

    clean_env = harness.clean_env
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "clean_env", without_unbuffered)
        with running_server(f"sqlite:///{root / 'loadmaster.db'}", root / "server", grace_s=10.0) as srv:
            srv.tokens = {RESEARCH: srv.tenant(RESEARCH, gpus=0, borrow=8),  # type: ignore[attr-defined]
                          PROD: srv.tenant(PROD, gpus=8, borrow=0)}
            for tenant in (RESEARCH, PROD):  # the scripts run from this checkout: a root the admin allows
                done = srv.cli("tenant", "set-roots", tenant, "--root", f"{REPO}:ro")
                assert done.returncode == 0, done.stdout + done.stderr
            yield srv


def _submit(server: Server, tmp_path: Path, tenant: str, manifest: dict[str, Any]) -> str:
    token: str = server.tokens[tenant]  # type: ignore[attr-defined]
    return server.submit(write_manifest(tmp_path / f"{manifest['name']}.json", manifest), token)


def _job(name: str, command: str | list[str], learners: int, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "learners": learners, "command": command, "workdir": str(REPO),
            "resources": {"gpus": gpus, "cpus": 0.5, "memory_gb": 0.5}, "placement": {"strategy": "spread"},
            "expected_duration_s": 20, **extra}


def _logs(server: Server, job_id: str, attempt: int, rank: int) -> list[str]:
    with server.http() as c:
        r = c.get(f"/api/v1/jobs/{job_id}/logs", params={"attempt": attempt, "rank": rank})
    assert r.status_code == 200, r.text
    return list(r.json()["ranks"][0]["lines"])


def _steps(lines: list[str], rank: int) -> list[int]:
    # Anywhere in a line: torchrun's workers share their learner's log, and an unbuffered print() is two writes
    # (the text, then the newline), so two workers' lines may share one.
    return [int(m.group(1)) for line in lines for m in re.finditer(rf"rank {rank} step (\d+) loss -?\d", line)]


def _preempt_and_resume(server: Server, tmp_path: Path, job_id: str, progressed: str) -> None:
    """Wait for `progressed` in rank 0's log, then take the cluster back with a `prod` job that needs every GPU:
    the fair policy preempts the borrower, which runs again (a new attempt) once the prod job is done."""
    server.wait_job(job_id, lambda j: j["status"] == "PROCESSING" and any(
        progressed in line for line in _logs(server, job_id, 1, 0)), f"showing {progressed!r}", timeout_s=180)
    prod = _submit(server, tmp_path, PROD, _job("reclaim", "sleep 1", learners=2, gpus=4))
    server.wait_job(job_id, lambda j: any("preempted by" in h["reason"] for h in j["history"]), "preempted",
                    timeout_s=60)
    server.wait_status(prod, "COMPLETED", timeout_s=60)
    done = server.wait_status(job_id, "COMPLETED", "FAILED", timeout_s=240)
    assert done["status"] == "COMPLETED", json.dumps(done["attempt_history"], indent=1)
    assert done["preemptions"] == 1 and done["failures"] == 0 and len(done["attempt_history"]) == 2
    first = done["attempt_history"][0]
    assert first["outcome"] == "stopped" and first["failure_category"] == "preempted"


def _contracts(server: Server, job_id: str, attempt: int, ranks: int, tag: str) -> dict[int, dict[str, Any]]:
    """The `contract {...}` line each rank printed in an attempt."""
    found = {}
    for rank in range(ranks):
        lines = [line for line in _logs(server, job_id, attempt, rank) if line.startswith(f"{tag} ")]
        assert lines, f"rank {rank} of attempt {attempt} printed no `{tag}` line"
        found[rank] = json.loads(lines[0].split(" ", 1)[1])
    return found


# ------------------------------------------------------------------------------------------------------- tests


@pytest.mark.slow  # 30-45 s each on 2 busy cores: two attempts of 4-6 torch processes
def test_plain_ddp_script_picks_its_gpu_by_local_rank_and_resumes_after_preemption(server: Server,
                                                                                    tmp_path: Path) -> None:
    command = ["python", str(SCRIPTS / "train_ddp.py"), "--steps", str(STEPS), "--delay", DELAY, "--cpu"]
    job_id = _submit(server, tmp_path, RESEARCH, _job("plain-ddp", command, learners=4, gpus=1))
    _preempt_and_resume(server, tmp_path, job_id, "rank 0 checkpoint step 10")
    for attempt in (1, 2):
        seen = _contracts(server, job_id, attempt, 4, "contract")
        by_node: dict[tuple[str, str], list[int]] = {}
        for rank, env in seen.items():
            assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4" and env["ROLE_RANK"] == str(rank)
            assert env["NODE_RANK"] == env["GROUP_RANK"] and env["GROUP_WORLD_SIZE"] == "2"
            assert env["OMP_NUM_THREADS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
            visible = env["CUDA_VISIBLE_DEVICES"].split(",")
            assert len(visible) == int(env["LOCAL_WORLD_SIZE"]) == 2  # spread: two learners a node
            by_node.setdefault((env["GROUP_RANK"], env["CUDA_VISIBLE_DEVICES"]), []).append(int(env["LOCAL_RANK"]))
        # the learners of a node see the same GPUs and hold local ranks 0 and 1; the nodes' GPUs differ
        assert sorted(by_node.values()) == [[0, 1], [0, 1]] and len({gpus for _, gpus in by_node}) == 2
    _every_attempts_log_is_complete(server, job_id, ranks=4)


@pytest.mark.slow
def test_torchrun_as_the_command_two_nodes_of_two_processes(server: Server, tmp_path: Path) -> None:
    command = ("torchrun --nnodes=$GROUP_WORLD_SIZE --node_rank=$NODE_RANK --nproc_per_node=2 "
               "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT "
               f"{SCRIPTS / 'train_ddp.py'} --steps {STEPS} --delay {DELAY} --cpu")
    job_id = _submit(server, tmp_path, RESEARCH, _job("torchrun", command, learners=2, gpus=2))
    _preempt_and_resume(server, tmp_path, job_id, "rank 0 checkpoint step 10")
    for attempt in (1, 2):
        workers: dict[int, dict[str, Any]] = {}
        for learner in (0, 1):
            for line in _logs(server, job_id, attempt, learner):
                if line.startswith("contract "):
                    env = json.loads(line.split(" ", 1)[1])
                    workers[int(env["RANK"])] = {**env, "learner": learner}
        assert sorted(workers) == [0, 1, 2, 3], workers  # torchrun's four workers
        for rank, env in workers.items():
            # torchrun numbers its workers from the node rank the platform gave the learner
            assert env["GROUP_RANK"] == str(env["learner"]) and env["LOCAL_RANK"] == str(rank % 2)
            assert env["TORCHELASTIC_RUN_ID"] and env["WORLD_SIZE"] == "4"
            assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2  # the learner's own two GPUs
    _every_attempts_log_is_complete(server, job_id, ranks=2, workers={0: (0, 1), 1: (2, 3)})


@pytest.mark.slow
def test_lightning_style_script_reads_the_node_groups_and_checkpoints_on_a_stop(server: Server,
                                                                               tmp_path: Path) -> None:
    command = ["python", str(SCRIPTS / "lightning_style.py"), "--num-nodes", "2", "--devices", "2",
               "--steps", str(STEPS), "--delay", DELAY]
    job_id = _submit(server, tmp_path, RESEARCH, _job("lightning", command, learners=4, gpus=1))
    _preempt_and_resume(server, tmp_path, job_id, "rank 0 step 8 loss")
    first = _contracts(server, job_id, 1, 4, "lightning")
    assert [first[r]["global_rank"] for r in range(4)] == [0, 1, 2, 3]
    assert [first[r]["node_rank"] for r in range(4)] == [0, 0, 1, 1]
    stopped_at = [int(line.rsplit(" ", 1)[1]) for line in _logs(server, job_id, 1, 0) if "stopped at step" in line]
    assert len(stopped_at) == 1  # it checkpointed on the stop request, every rank at the same step
    for rank in range(4):
        resumed = [line for line in _logs(server, job_id, 2, rank) if "resumed from step" in line]
        assert resumed == [f"rank {rank} resumed from step {stopped_at[0]}"]
        assert _logs(server, job_id, 2, rank)[-1] == f"rank {rank} done"
    detail = server.job(job_id)
    assert detail["progress"]["last_step"] == STEPS


def test_lightning_style_script_with_the_wrong_num_nodes_fails_once_as_the_users_error(server: Server,
                                                                                       tmp_path: Path) -> None:
    command = ["python", str(SCRIPTS / "lightning_style.py"), "--num-nodes", "3", "--devices", "2"]
    job_id = _submit(server, tmp_path, RESEARCH, _job("lightning-bad", command, learners=4, gpus=1))
    done = server.wait_status(job_id, "FAILED", "COMPLETED", timeout_s=120)
    assert done["status"] == "FAILED"
    [attempt] = done["attempt_history"]  # not retried
    assert attempt["failure_category"] == "incorrect_input", attempt
    assert "does not match the world size" in done["status_reason"]


def _every_attempts_log_is_complete(server: Server, job_id: str, ranks: int,
                                    workers: dict[int, tuple[int, ...]] | None = None) -> None:
    """Attempt 1 (stopped by SIGTERM, no handler) logged every step up to the checkpoint the next attempt resumed
    from, without a gap; attempt 2 logged every step from there to the end."""
    workers = workers or {r: (r,) for r in range(ranks)}
    for learner, worker_ranks in workers.items():
        first, second = _logs(server, job_id, 1, learner), _logs(server, job_id, 2, learner)
        for rank in worker_ranks:
            before, after = _steps(first, rank), _steps(second, rank)
            resumed = [int(line.rsplit(" ", 1)[1]) for line in second if line.startswith(f"rank {rank} resumed")]
            assert len(resumed) == 1, second[:20]
            assert before == list(range(1, len(before) + 1)) and len(before) >= resumed[0] >= 10
            assert after == list(range(resumed[0] + 1, STEPS + 1))
            assert f"rank {rank} done" in second
