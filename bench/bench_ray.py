"""The Ray executor on a real multi-node Ray cluster (a head and two worker raylets on this machine, 4 fake
GPUs each; tests/platform/ray_cluster.py):

- gang launch latency: RayExecutor.launch() of 2, 4 and 8 learners spread over the two workers, from the
  call (the Plan's start, once booked) until every learner runs (each shim has started its command);
- node loss: a worker's raylet is killed under a 2-learner job on the real server; time until Ray
  lists the node dead, until the attempt ended (Lost), and until the job's next attempt runs elsewhere;
- resize on Ray: an elastic 2-learner job scaled to 1 by the user: time from the request until the new
  attempt runs.

    .venv/bin/python bench/bench_ray.py [--reps 20] [--losses 3]

Ray's health check is set to about 2 s (ray_cluster.FAST_HEALTH_CHECK); with Ray's default (15 s) the
node-loss figures grow by the difference. Prints a table and writes bench/results/ray.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec

if str(ROOT) not in sys.path:  # the multi-node fixture is the tests' (tests/platform/ray_cluster.py)
    sys.path.insert(0, str(ROOT))
ray_cluster = importlib.import_module("tests.platform.ray_cluster")
RayCluster, Server = ray_cluster.RayCluster, ray_cluster.Server

LEARNER = str(ROOT / "tests" / "platform" / "control_learner.py")
SLEEPER = ("import time\nfrom loadmaster import runtime\nruntime.init()\n"
           "while not runtime.should_preempt():\n    time.sleep(0.05)\n")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def gang_launches(root: Path, learners: int, reps: int) -> list[float]:
    from loadmaster.platform.executors.ray import RayExecutor

    ex = RayExecutor(scratch_root=str(root / "scratch"))
    times = []
    for rep in range(reps):
        job = f"bench-{learners}-{rep}-{os.getpid()}"
        base = root / job
        gang = tuple(LearnerSpec(r, "w1" if r % 2 == 0 else "w2", (r // 2,), 0.1, 0.1) for r in range(learners))
        spec = AttemptSpec(job, 1, (sys.executable, "-c", SLEEPER), str(root), {}, gang, 29500,
                           str(base / "ckpt"), str(base / "results"), str(base / "logs"), str(base / "reports"))
        started = time.perf_counter()
        ex.launch(spec)
        times.append(time.perf_counter() - started)
        ex.stop(job, 1, 5.0)
        deadline = time.monotonic() + 60
        while not any(e.job_id == job for e in ex.poll().ended):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{job} did not stop")
            time.sleep(0.05)
        ex.release(job, 1)
    return times


def _wait(server: Any, token: str, job_id: str, pred: Any, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = server.job(token, job_id)
        if pred(job):
            return job
        time.sleep(0.05)
    raise RuntimeError(f"{job_id}: timed out ({server.job(token, job_id)['status']})")


def _running(attempt: int) -> Any:
    def check(job: dict[str, Any]) -> bool:
        return bool(job["attempts"] >= attempt and job["status"] == "PROCESSING"
                    and job["progress"]["run_started_at"] and (job["progress"]["last_step"] or 0) >= 1)
    return check


def node_losses(cluster: Any, root: Path, count: int) -> list[dict[str, float]]:
    import ray

    out = []
    server = Server(cluster, root / "loss-data")
    try:
        token = server.tenant("bench", 8)
        for _ in range(count):
            with server.http(token) as c:
                job_id = c.post("/api/v1/jobs", json={
                    "name": "lose", "learners": 2, "placement": {"strategy": "spread"},
                    "command": ["python", LEARNER, "train", "100000", "0.1"]}).json()["id"]
            job = _wait(server, token, job_id, _running(1))
            lost = job["allocation"]["learners"][1]["node"]
            # by node id: the label's earlier lives are listed dead already
            node_id = next(n["NodeID"] for n in ray.nodes()  # type: ignore[no-untyped-call]
                           if n["Alive"] and (n.get("Labels") or {}).get("loadmaster/node") == lost)
            killed = cluster.kill_worker(lost)
            noticed = None
            ended = None
            while True:
                if noticed is None and any(n["NodeID"] == node_id and not n["Alive"]
                                           for n in ray.nodes()):  # type: ignore[no-untyped-call]
                    noticed = time.time() - killed
                job = server.job(token, job_id)
                if ended is None and job["attempt_history"][0]["ended_at"]:
                    ended = job["attempt_history"][0]["ended_at"] - killed
                if _running(2)(job):
                    break
                if time.time() - killed > 120:
                    raise RuntimeError("the job did not run again")
                time.sleep(0.05)
            second = job["attempt_history"][1]
            out.append({"ray_marks_node_dead_s": noticed if noticed is not None else float("nan"),
                        "attempt_ended_s": ended or float("nan"),
                        "relaunched_s": second["started_at"] - killed,
                        "running_again_s": time.time() - killed,
                        "first_outcome_lost": float(job["attempt_history"][0]["outcome"] == "lost")})
            with server.http(token) as c:
                c.post(f"/api/v1/jobs/{job_id}/cancel")
            _wait(server, token, job_id, lambda j: j["status"] == "CANCELLED")
            cluster.add_worker(lost, 4)
            time.sleep(2)
    finally:
        server.stop()
    return out


def resizes(cluster: Any, root: Path, count: int) -> list[float]:
    out = []
    server = Server(cluster, root / "resize-data")
    try:
        token = server.tenant("bench", 8)
        for _ in range(count):
            with server.http(token) as c:
                job_id = c.post("/api/v1/jobs", json={
                    "name": "elastic", "learners": 2, "elastic": {"min_learners": 1, "max_learners": 2},
                    "placement": {"strategy": "spread"},
                    "command": ["python", LEARNER, "train", "100000", "0.1"]}).json()["id"]
            _wait(server, token, job_id, _running(1))
            with server.http(token) as c:
                asked = time.time()
                c.post(f"/api/v1/jobs/{job_id}/scale", json={"learners": 1}).raise_for_status()
            _wait(server, token, job_id, _running(2))
            out.append(time.time() - asked)
            with server.http(token) as c:
                c.post(f"/api/v1/jobs/{job_id}/cancel")
            _wait(server, token, job_id, lambda j: j["status"] == "CANCELLED")
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--losses", type=int, default=3)
    parser.add_argument("--resizes", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    cluster = RayCluster()
    saved = dict(os.environ)
    result: dict[str, Any] = {"cpus": os.cpu_count(), "health_check": "period 0.5 s, 3 misses"}
    try:
        cluster.start({"w1": 4, "w2": 4})
        os.environ.update(cluster.env)
        import ray

        ray.init(address=cluster.address, namespace="loadmaster", log_to_driver=False, configure_logging=False)
        launches = {}
        for n in (2, 4, 8):
            times = gang_launches(root, n, args.reps)
            launches[n] = {"n": len(times), "median_s": statistics.median(times), "p95_s": pct(times, 0.95)}
        result["gang_launch"] = launches
        losses = node_losses(cluster, root, args.losses)
        result["node_loss"] = {"runs": losses, **{k: statistics.median(r[k] for r in losses) for k in losses[0]}}
        sizes = resizes(cluster, root, args.resizes)
        result["resize"] = {"runs": sizes, "median_s": statistics.median(sizes)}
        ray.shutdown()
    finally:
        cluster.stop()
        os.environ.clear()
        os.environ.update(saved)
    print("gang launch (RayExecutor.launch: call -> every learner running), 2 workers")
    print(f"{'learners':>9} {'n':>4} {'median s':>9} {'p95 s':>7}")
    for n, row in result["gang_launch"].items():
        print(f"{n:>9} {row['n']:>4} {row['median_s']:>9.3f} {row['p95_s']:>7.3f}")
    loss = result["node_loss"]
    print(f"raylet killed -> Ray marks node dead {loss['ray_marks_node_dead_s']:.2f} s, attempt ended (lost) "
          f"{loss['attempt_ended_s']:.2f} s, relaunched {loss['relaunched_s']:.2f} s, running again "
          f"{loss['running_again_s']:.2f} s (median of {len(loss['runs'])})")
    print(f"resize 2 -> 1 learners (request -> new attempt running): median {result['resize']['median_s']:.2f} s "
          f"of {len(result['resize']['runs'])}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ray.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
