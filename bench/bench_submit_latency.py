"""Submit to PROCESSING on an idle cluster with the local executor. Target: under 1 s.

    .venv/bin/python bench/bench_submit_latency.py            # 20 jobs, one after another
    .venv/bin/python bench/bench_submit_latency.py -n 50 --learners 2

The real `loadmaster server` (child process) on virtual nodes `2x4:8cpu:32gb`. Each job is submitted to an
idle cluster (the previous one was cancelled and has ended): a Python learner that sleeps. Two measures per job:
`server_s`, from the submission's commit to the PROCESSING transition, both as the server recorded them
(the learners have been started by then); `client_s`, from just before the POST to the first GET (polled
every 10 ms) that shows PROCESSING, which adds the HTTP round trips. Prints a table and writes
bench/results/submit_latency.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table, write_results
from platform_server import Server


def _one(server: Server, token: str, learners: int) -> tuple[float, float]:
    manifest = {"name": "latency", "learners": learners,
                "command": [sys.executable, "-c", "import time; time.sleep(30)"]}
    with server.client(token) as c:
        t0 = time.perf_counter()
        job = c.post("/api/v1/jobs", json=manifest).json()
        while True:
            shown = c.get(f"/api/v1/jobs/{job['id']}").json()
            if shown["status"] == "PROCESSING":
                client_s = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > 30:
                raise RuntimeError(f"{job['id']} did not start: {shown['history']}")
            time.sleep(0.01)
        started = next(h["at"] for h in shown["history"] if h["to_status"] == "PROCESSING")
        server_s = started - shown["submitted_at"]
        c.post(f"/api/v1/jobs/{job['id']}/cancel")
    server.wait_status(token, job["id"], "CANCELLED")
    return server_s, client_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20, help="jobs")
    ap.add_argument("--learners", type=int, default=1)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), "--nodes", "2x4:8cpu:32gb", "--grace", "1", db=args.db)
        try:
            token = server.tenant("bench", gpus=8)
            _one(server, token, args.learners)  # warm-up: the first launch imports what later ones reuse
            load = os.getloadavg()[0]
            samples = [_one(server, token, args.learners) for _ in range(args.n)]
        finally:
            server.stop()
    rows: list[dict[str, Any]] = []
    for name, index in (("server_s", 0), ("client_s", 1)):
        values = sorted(s[index] for s in samples)
        rows.append({"measure": name, "jobs": len(values), "learners": args.learners,
                     "p50_s": statistics.median(values), "p90_s": values[int(0.9 * (len(values) - 1))],
                     "max_s": values[-1], "mean_s": statistics.mean(values), "load_avg_1m": load})
    print_table(rows, ["measure", "jobs", "learners", "p50_s", "p90_s", "max_s", "mean_s", "load_avg_1m"])
    print(f"wrote {write_results('submit_latency', rows)}")


if __name__ == "__main__":
    main()
