"""Launch latency of the local executor, in-process: tiny gangs (`true`, one learner) launched by 8 threads as
the control loop's launcher does, each thread one launch after another.

    .venv/bin/python bench/bench_launch_latency.py [--launches 400] [--threads 8]

Per launch: the wall time of LocalExecutor.launch() (the shim forked by the supervisor until its learner runs),
and whether the attempt's end is already there when launch() returns (poll() reports it at once: the control
loop then confirms the launch and records the end in one round, not two), and how long after launch() returned
an end not yet there took to appear. Also the CPU of this process and everything below it per launch (the
supervisor, its shims and their learners, collected once the supervisor has exited). Prints a table and writes
bench/results/launch_latency.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import print_table, tree_cpu_s, write_results
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.platform.executors.local import LocalExecutor


def _spec(root: Path, i: int) -> AttemptSpec:
    job = root / f"j{i}"
    return AttemptSpec(
        job_id=f"j{i}", attempt=1, command=("true",), workdir=str(root), env={},
        learners=(LearnerSpec(0, "n0", (i % 8,), 0.1, 0.1),), master_port=20000 + i % 1000,
        checkpoint_dir=str(job / "checkpoints"), results_dir=str(job / "results"),
        log_dir=str(job / "attempt-1" / "logs"), report_dir=str(job / "attempt-1" / "reports"))


def _pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "mean": 0.0}
    ordered = sorted(values)
    return {"p50": round(ordered[len(ordered) // 2], 2), "p90": round(ordered[int(0.9 * len(ordered))], 2),
            "mean": round(statistics.fmean(ordered), 2)}


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    executor = LocalExecutor()
    lock = threading.Lock()
    launch_ms: list[float] = []
    later_ms: list[float] = []
    carried = 0
    counter = iter(range(args.launches))

    def ended(job: str) -> bool:
        with lock:
            found = any(e.job_id == job for e in executor.poll().ended)
            if found:
                executor.release(job, 1)
            return found

    def worker() -> None:
        nonlocal carried
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            spec = _spec(root, i)
            started = time.perf_counter()
            executor.launch(spec)
            returned = time.perf_counter()
            with lock:
                launch_ms.append(1000 * (returned - started))
            if ended(spec.job_id):
                with lock:
                    carried += 1
                continue
            while not ended(spec.job_id):
                time.sleep(0.0005)
            with lock:
                later_ms.append(1000 * (time.perf_counter() - returned))

    cpu = tree_cpu_s()
    wall = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    supervisor = executor.supervisor.pid
    executor.close()
    if supervisor is not None:  # its CPU (and its shims') is ours once it has exited and we collected it
        with_deadline = time.monotonic() + 10
        while time.monotonic() < with_deadline:
            try:
                if os.waitpid(supervisor, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
    cpu = tree_cpu_s() - cpu
    row = {"launches": args.launches, "threads": args.threads, "ends_with_launch": carried,
           "launch_ms": _pcts(launch_ms), "end_after_launch_ms": _pcts(later_ms),
           "cpu_ms_per_launch": round(1000 * cpu / args.launches, 2),
           "launches_per_s": round(args.launches / wall, 1), "load_before": os.getloadavg()[0]}
    print_table([row], list(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=400)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lm-bench-launch-") as tmp:
        row = run(args, Path(tmp))
    print(f"wrote {write_results('launch_latency', [row])}")


if __name__ == "__main__":
    main()
