"""The Ray cluster as a living thing, through the real server (a child process) and CLI, on a real
multi-node Ray cluster (a head and worker raylets on this machine, labelled, with fake GPUs):
a worker dies under a job, a worker joins, a node is drained, the server and a worker die together.

One cluster for the module (Ray is CPU-heavy: never two at once), stopped at the end by pid."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadmaster.platform.executors.ray import NAMESPACE
from loadmaster.platform.layout import JobDirs
from tests.platform.executor_helpers import processes_of, wait_until
from tests.platform.ray_cluster import RayCluster, Server

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

LEARNER = str(Path(__file__).with_name("control_learner.py"))
REPO = Path(__file__).resolve().parents[2]
GPUS = 4  # per worker


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    c = RayCluster()
    saved = dict(os.environ)
    try:
        c.start({"w1": GPUS, "w2": GPUS})
        os.environ.update(c.env)
        ray.init(address=c.address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.stop()
        os.environ.clear()
        os.environ.update(saved)


def _actors_of(job_id: str) -> list[str]:
    """Host actors of the job alive in Ray, by the state API (named or not)."""
    from ray.util.state import list_actors

    alive = list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, raise_on_missing_output=False)
    return sorted(a.name or "" for a in alive if (a.name or "").startswith(f"{job_id}:"))


def _attempts_alive(job_id: str) -> set[str]:
    return {name.split(":")[1] for name in _actors_of(job_id)}


def _nothing_left(job_id: str) -> None:
    wait_until(lambda: _actors_of(job_id) == [] and processes_of(job_id) == [], 30,
               f"no actor or process of {job_id} left")


def _restore(cluster: RayCluster) -> None:
    """Back to the module's two workers, whatever a test killed (a failed test must not fail the next)."""
    for label in ("w1", "w2"):
        if label not in cluster.workers:
            cluster.add_worker(label, GPUS)


def _submit(server: Server, token: str, **manifest: Any) -> str:
    with server.http(token) as c:
        r = c.post("/api/v1/jobs", json=manifest)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def _train(steps: int, step_s: float) -> list[str]:
    # `python`, not sys.executable: the learners find the server's Python first on PATH (the Ray nodes'
    # own environment need not have what the job imports)
    return ["python", LEARNER, "train", str(steps), str(step_s)]


def _nodes_of(job: dict[str, Any]) -> list[str]:
    return [learner["node"] for learner in (job.get("allocation") or {}).get("learners", [])]


def _stepping(job: dict[str, Any]) -> bool:
    return (job["progress"]["last_step"] or 0) >= 3


def _cluster_json(server: Server) -> dict[str, Any]:
    out = server.cli("cluster", "--json")
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def _node(server: Server, name: str) -> dict[str, Any]:
    return next(n for n in _cluster_json(server)["nodes"] if n["name"] == name)


def test_a_lost_node_resumes_on_the_other_and_completes(cluster: RayCluster, tmp_path: Path) -> None:
    server = Server(cluster, tmp_path / "data")
    try:
        token = server.tenant("vision", 8)
        job_id = _submit(server, token, name="lose-a-node", learners=2, placement={"strategy": "spread"},
                         retry={"policy": "always", "max_attempts": 1}, command=_train(40, 0.25))
        job = server.wait(token, job_id, "PROCESSING", until=_stepping)
        nodes = _nodes_of(job)
        assert sorted(nodes) == ["w1", "w2"]
        lost = nodes[1]  # rank 0 survives: it checkpoints when the gang is stopped
        cluster.kill_worker(lost)
        done = server.wait(token, job_id, "COMPLETED", timeout_s=120)
        outcomes = [a["outcome"] for a in done["attempt_history"]]
        assert outcomes == ["lost", "succeeded"], done["attempt_history"]
        assert lost not in _nodes_of(done) or done["allocation"] is None
        first, last, attempt = (JobDirs(tmp_path / "data").results(job_id) / "out.txt").read_text().split()[:3]
        assert int(first) > 0 and last == "40" and attempt == "2"  # resumed from attempt 1's checkpoint
        assert _node(server, lost)["state"] == "dead"
        _nothing_left(job_id)
        cluster.add_worker(lost, GPUS)  # it comes back under its name
        wait_until(lambda: _node(server, lost)["state"] == "alive", 30, f"{lost} back")
    finally:
        server.stop()
        _restore(cluster)


def test_a_joining_node_is_used_without_a_restart(cluster: RayCluster, tmp_path: Path) -> None:
    server = Server(cluster, tmp_path / "data")
    try:
        token = server.tenant("vision", 12)
        before = _cluster_json(server)
        assert {n["name"]: n["state"] for n in before["nodes"]} == {"head": "alive", "w1": "alive", "w2": "alive"}
        w1 = next(n for n in before["nodes"] if n["name"] == "w1")
        assert w1["labels"]["loadmaster/node"] == "w1" and w1["node_id"] and w1["last_heartbeat_at"]
        cluster.add_worker("w3", GPUS)
        wait_until(lambda: any(n["name"] == "w3" and n["state"] == "alive" for n in _cluster_json(server)["nodes"]),
                   30, "w3 in `loadmaster cluster`")
        # 12 GPUs: more than w1 and w2 have together, so it must use w3 (and is admitted only now)
        job_id = _submit(server, token, name="needs-three", learners=3, resources={"gpus": 4}, command=_train(3, 0.1))
        job = server.wait(token, job_id, "PROCESSING", "COMPLETED")
        assert sorted(_nodes_of(job) or _nodes_of(server.wait(token, job_id, "COMPLETED"))) == ["w1", "w2", "w3"]
        server.wait(token, job_id, "COMPLETED")
        table = server.cli("cluster")
        assert table.returncode == 0 and "w3" in table.stdout and "alive" in table.stdout
        _nothing_left(job_id)
    finally:
        server.stop()
        if "w3" in cluster.workers:
            cluster.kill_worker("w3")  # Ray is CPU-heavy: back to two workers


def test_draining_a_node_shrinks_an_elastic_job_off_it(cluster: RayCluster, tmp_path: Path) -> None:
    server = Server(cluster, tmp_path / "data")
    try:
        token = server.tenant("vision", 8)
        job_id = _submit(server, token, name="elastic", learners=2, elastic={"min_learners": 1, "max_learners": 2},
                         placement={"strategy": "spread"}, command=_train(2000, 0.2))
        job = server.wait(token, job_id, "PROCESSING", until=_stepping)
        drained = _nodes_of(job)[1]
        out = server.cli("cluster", "drain", drained)
        assert out.returncode == 0 and "draining" in out.stdout, out.stderr
        moved = server.wait(token, job_id, "PROCESSING", timeout_s=60,
                            until=lambda j: j["attempts"] >= 2 and bool(_nodes_of(j)) and drained not in _nodes_of(j))
        assert moved["attempt_history"][0]["outcome"] == "stopped"
        node = _node(server, drained)
        assert node["state"] == "draining" and node["gpus_used"] == 0 and node["jobs"] == []
        # one attempt alive at a time (it may grow back to 2 learners on the other node: a further attempt)
        wait_until(lambda: _attempts_alive(job_id) == {str(server.job(token, job_id)["attempts"])}, 30,
                   "the relaunched attempt's hosts")
        assert drained not in _nodes_of(server.job(token, job_id))
        assert server.cli("cluster", "undrain", drained).returncode == 0
        assert _node(server, drained)["state"] == "alive"
        with server.http(token) as c:
            c.post(f"/api/v1/jobs/{job_id}/cancel")
        server.wait(token, job_id, "CANCELLED")
        _nothing_left(job_id)
        bad = server.cli("cluster", "drain", "no-such-node")
        assert bad.returncode != 0 and "no node 'no-such-node'" in (bad.stdout + bad.stderr)
    finally:
        server.stop()


def test_server_and_worker_die_together_one_attempt_then_nothing_left(cluster: RayCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(cluster, data)
    token = server.tenant("vision", 8)
    job_id = _submit(server, token, name="crash", learners=2, placement={"strategy": "spread"},
                     retry={"policy": "always", "max_attempts": 1}, command=_train(40, 0.25))
    job = server.wait(token, job_id, "PROCESSING", until=_stepping)
    lost = _nodes_of(job)[1]
    server.kill9()
    cluster.kill_worker(lost)
    server = Server(cluster, data)
    try:
        seen: set[str] = set()

        def completed() -> bool:
            alive = _attempts_alive(job_id)
            assert len(alive) <= 1, f"two attempts alive: {alive}"
            seen.update(alive)
            return bool(server.job(token, job_id)["status"] == "COMPLETED")

        wait_until(completed, 120, f"{job_id} completed after the restart")
        done = server.job(token, job_id)
        assert [a["outcome"] for a in done["attempt_history"]] == ["lost", "succeeded"]
        _nothing_left(job_id)
    finally:
        server.stop()
        _restore(cluster)


def test_ddp_digits_trains_across_two_ray_nodes_as_shipped(cluster: RayCluster, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import yaml

    manifest = yaml.safe_load((REPO / "examples" / "ddp_digits" / "job.yaml").read_text())
    # the shipped command (`python ...`), over two Ray nodes: a learner per worker (fake GPUs, CPU torch)
    manifest.update(workdir=str(REPO), resources={"gpus": 1, "cpus": 1, "memory_gb": 2},
                    placement={"strategy": "spread"})
    manifest["command"] = [*manifest["command"][:2], "--epochs", "2"]
    server = Server(cluster, tmp_path / "data")
    try:
        token = server.tenant("vision", 8)
        job_id = _submit(server, token, **manifest)
        running = server.wait(token, job_id, "PROCESSING", until=lambda j: bool(_nodes_of(j)))
        assert sorted(_nodes_of(running)) == ["w1", "w2"]
        done = server.wait(token, job_id, "COMPLETED", timeout_s=240)
        assert [a["outcome"] for a in done["attempt_history"]] == ["succeeded"]
        with server.http(token) as c:
            logs = c.get(f"/api/v1/jobs/{job_id}/logs").json()
        text = "\n".join(line for r in logs["ranks"] for line in r["lines"])
        assert "No module named" not in text
        _nothing_left(job_id)
    finally:
        server.stop()
