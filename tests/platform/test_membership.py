"""The living cluster without Ray: node naming (never collapsed, stable), drains through the real server
with the local executor (API, CLI's client, the loop moving jobs off the node), a lost attempt's outcome,
the shim stopping its learner once the process it watches is gone, and the learners' runtime environment
on a Ray node (MASTER_PORT pair, PATH). Ray itself: test_ray_cluster.py (slow)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from loadmaster.platform.control.outcomes import Lost, of_end
from loadmaster.platform.executors.base import AttemptEnded, LearnerExit
from loadmaster.platform.executors.gang import LOST_EXIT_CODE
from loadmaster.platform.executors.procs import start_token
from loadmaster.platform.executors.ray import NodeNames, RayNode, node_names
from loadmaster.platform.executors.ray_host import free_port_pair, on_path
from loadmaster.platform.executors.shim import ShimRequest, lost_marker
from loadmaster.platform.executors.spawn import spawn_shim
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Live
from tests.platform.executor_helpers import wait_until

live = api_fixtures.live
PY = sys.executable


def _node(node_id: str, host: str = "box", ip: str = "10.0.0.1", label: str | None = None,
          alive: bool = True) -> RayNode:
    return RayNode(node_id, ip, host, label, {"GPU": 4.0, "CPU": 8.0}, alive)


def test_raylets_sharing_a_host_and_ip_are_never_one_node() -> None:
    named = node_names([_node("aaaaaaaa11"), _node("bbbbbbbb22"), _node("cccccccc33", label="w1"),
                        _node("dddddddd44", label="w1")])
    assert sorted(named) == ["box-aaaaaaaa", "box-bbbbbbbb", "w1", "w1-dddddddd"]
    assert node_names([_node("a1", host="one"), _node("b2", host="one", ip="10.0.0.2")]).keys() == {"10.0.0.1",
                                                                                                   "10.0.0.2"}


def test_names_stay_while_nodes_join_and_a_node_that_comes_back_takes_its_name() -> None:
    names = NodeNames()
    names.update([_node("a1"), _node("w1old", label="w1")])
    assert set(names.alive()) == {"box", "w1"}
    # a second raylet on the same host joins: the first keeps "box" (allocations name it)
    names.update([_node("a1"), _node("w1old", label="w1"), _node("b2")])
    assert names.by_id["a1"] == "box" and names.by_id["b2"] == "box-b2"
    # w1 dies, then comes back with a new Ray node id under its label
    names.update([_node("a1"), _node("w1old", label="w1", alive=False), _node("b2")])
    assert "w1" not in names.alive() and names.named()["w1"].node_id == "w1old"
    names.update([_node("a1"), _node("w1old", label="w1", alive=False), _node("b2"), _node("w1new", label="w1")])
    assert names.alive()["w1"].node_id == "w1new" and "w1old" not in names.by_id


def test_a_learner_lost_with_its_node_is_lost_not_failed() -> None:
    ended = AttemptEnded("j", 1, (LearnerExit(0, 0), LearnerExit(1, LOST_EXIT_CODE)), False, LearnerExit(1, -9),
                         lost=(1,))
    outcome = of_end(ended, None, "")
    assert isinstance(outcome, Lost) and "lost with their node" in outcome.why
    failed_first = AttemptEnded("j", 1, (LearnerExit(0, 3), LearnerExit(1, -9)), False, LearnerExit(0, 3), lost=(1,))
    assert not isinstance(of_end(failed_first, None, ""), Lost)  # the job failed before the node went


def test_the_shim_stops_its_learner_when_the_watched_process_is_gone(tmp_path: Path) -> None:
    host = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    token = start_token(host.pid)
    assert token is not None
    # a learner that exits 0 on SIGTERM, as a training script that checkpoints would
    code = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
            "print('ready', flush=True)\nwhile True: time.sleep(0.05)\n")
    request = ShimRequest((PY, "-c", code), str(tmp_path), {}, str(tmp_path / "log"), str(tmp_path / "exit"),
                          str(tmp_path / "pid"), watch=((host.pid, token),))
    shim = spawn_shim(request)
    try:
        wait_until(lambda: "ready" in (tmp_path / "log").read_text(), 20, "the learner to run")
        host.kill()
        host.wait()
        gone = time.monotonic()
        shim.wait(timeout=15)
        assert time.monotonic() - gone < 5  # no learner outlives its node by more than a few seconds
        assert (tmp_path / "exit").read_text().strip() == str(LOST_EXIT_CODE)  # not the learner's 0
        assert lost_marker(tmp_path / "exit").exists()
        assert "Ray host or raylet is gone" in (tmp_path / "log").read_text()
    finally:
        if shim.poll() is None:
            os.killpg(shim.pid, signal.SIGKILL)
        host.kill()


def test_master_port_pair_is_free_on_the_node_and_python_first_on_path(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        port = taken.getsockname()[1]
        low = port - (port % 2)
        picked = free_port_pair(low, low + 6, low)
        assert picked is not None and picked != low and low <= picked < low + 6
    assert free_port_pair(5, 5, 5) is None
    env = on_path({"A": "1"}, str(tmp_path))
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path)
    assert on_path({"PATH": "/mine"}, str(tmp_path)) == {"PATH": "/mine"}  # the manifest's own PATH wins
    assert on_path({}, str(tmp_path / "missing")) == {}  # a node without that Python keeps its own


def test_drain_moves_a_job_off_the_node_and_nothing_new_lands_there(live: Live) -> None:
    token = live.tenant("vision", gpus=8)
    hold = [PY, "-c", "import time\nfrom loadmaster import runtime\nruntime.init()\n"
                      "while not runtime.should_preempt():\n    time.sleep(0.05)\n"]
    with live.client(token) as c, live.client(live.admin_token) as admin:
        nodes = [n["name"] for n in c.get("/api/v1/cluster").json()["nodes"]]
        assert all(n["state"] == "alive" for n in c.get("/api/v1/cluster").json()["nodes"])
        rigid = c.post("/api/v1/jobs", json={"name": "rigid", "learners": 2, "command": hold}).json()["id"]
        elastic = c.post("/api/v1/jobs", json={
            "name": "elastic", "learners": 2, "elastic": {"min_learners": 1, "max_learners": 2},
            "placement": {"strategy": "spread"}, "command": hold}).json()["id"]
        for job_id in (rigid, elastic):
            live.wait(token, job_id, "PROCESSING")
        node = c.get(f"/api/v1/jobs/{rigid}").json()["allocation"]["learners"][0]["node"]
        assert c.post(f"/api/v1/cluster/nodes/{node}/drain").status_code == 403  # a tenant may not
        out = admin.post(f"/api/v1/cluster/nodes/{node}/drain")
        assert out.status_code == 200 and out.json() == {"node": node, "state": "draining", "draining": [node]}

        def off_node() -> bool:
            jobs = [c.get(f"/api/v1/jobs/{j}").json() for j in (rigid, elastic)]
            return all(j["status"] == "PROCESSING" and j["attempts"] >= 2 and j["allocation"]
                       and all(lr["node"] != node for lr in j["allocation"]["learners"]) for j in jobs)

        wait_until(off_node, 30, "both jobs off the drained node")
        shown = next(n for n in c.get("/api/v1/cluster").json()["nodes"] if n["name"] == node)
        assert shown["state"] == "draining" and shown["gpus_used"] == 0 and shown["gpus_free"] == 0
        rigid_job = c.get(f"/api/v1/jobs/{rigid}").json()
        assert rigid_job["preemptions"] == 1 and rigid_job["attempt_history"][0]["outcome"] == "stopped"
        assert c.get(f"/api/v1/jobs/{elastic}").json()["preemptions"] == 0  # shrunk off it, not preempted
        bad = admin.post("/api/v1/cluster/nodes/nope/drain")
        assert bad.status_code == 404 and "no node 'nope'" in bad.text and all(n in bad.text for n in nodes)
        assert admin.post(f"/api/v1/cluster/nodes/{node}/undrain").json()["draining"] == []
        for job_id in (rigid, elastic):
            c.post(f"/api/v1/jobs/{job_id}/cancel")
            live.wait(token, job_id, "CANCELLED")


def test_the_master_port_range_is_checked_with_a_clear_error() -> None:
    import pytest

    from loadmaster.platform.server import ServerError, _port_range

    assert _port_range(None, (1, 3)) == (1, 3)
    assert _port_range("29500-29600", (1, 3)) == (29500, 29600)
    for bad in ("29500", "a-b", "30000-29500", "10-11"):
        with pytest.raises(ServerError, match=r"LOADMASTER_MASTER_PORTS=.*give a port range LOW-HIGH"):
            _port_range(bad, (1, 3))


def test_a_joined_node_is_free_capacity_and_a_down_node_has_none() -> None:
    from loadmaster.core.cluster import Cluster, Node
    from loadmaster.platform.control.snapshot import SnapshotBuilder

    one = Cluster((Node("a", 4, 8.0, 32.0),), name="ray")
    builder = SnapshotBuilder(one)
    two = Cluster((*one.nodes, Node("b", 2, 4.0, 16.0)), name="ray")
    builder.grow(two)
    snap = builder.build(0.0, {})
    assert list(snap.free_gpus) == [4.0, 2.0] and builder.node_index == {"a": 0, "b": 1}
    builder.down = [0]  # dead or drained: nothing may be placed there
    assert list(builder.build(0.0, {}).free_gpus) == [0.0, 2.0]
