"""Code packages and accounting, the two new costs on the user's path:

- packing a working directory (client), checking it (server) and unpacking it for an attempt, for a
  directory of N small source files and one of a few large ones;
- GET /api/v1/usage (and /usage/timeline) over a store of N attempts: the answer reads every attempt that
  overlaps the window, so it grows with the history.

    .venv/bin/python bench/bench_accounting.py                 # 1,000 / 10,000 / 100,000 attempts
    .venv/bin/python bench/bench_accounting.py --attempts 10000
    .venv/bin/python bench/bench_accounting.py --attempts          # the packages only

Real SQLite file, real attempts rows (written as the control loop writes them, in bulk), the usage code the
API runs (platform/usage.py). Prints two tables and writes bench/results/accounting.json.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table, write_results
from loadmaster.platform import code, usage
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job
from loadmaster.platform.store.models import Attempt
from loadmaster.platform.store.tenants import create_tenant


def _tree(root: Path, files: int, size: int) -> None:
    rng = random.Random(0)
    for i in range(files):
        path = root / f"pkg{i % 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(rng.choice(b"abcdefghij \n") for _ in range(size)))


def bench_packages() -> list[dict[str, Any]]:
    rows = []
    for files, size in ((1000, 2000), (20, 2_000_000)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "src"
            _tree(root, files, size)
            t = time.perf_counter()
            package = code.pack(root, 1 << 30)
            packed = time.perf_counter() - t
            t = time.perf_counter()
            code.check_archive(package.archive, 1 << 30)
            checked = time.perf_counter() - t
            archive = Path(tmp) / "a.tar.gz"
            archive.write_bytes(package.archive)
            t = time.perf_counter()
            code.unpack(archive, Path(tmp) / "attempt-1" / "code")
            unpacked = time.perf_counter() - t
        rows.append({"files": files, "mb": round(files * size / 1e6, 1),
                     "archive_mb": round(len(package.archive) / 1e6, 2), "pack_ms": round(packed * 1000, 1),
                     "check_ms": round(checked * 1000, 1), "unpack_ms": round(unpacked * 1000, 1)})
    return rows


def bench_usage(counts: list[int]) -> list[dict[str, Any]]:
    rows = []
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store.open(f"sqlite:///{tmp}/lm.db")
            now = time.time()
            with store.session() as s:
                tenant, _ = create_tenant(s, "t", 8, None, now)
                tenant_id = tenant.id
            rng = random.Random(1)
            manifest = parse_manifest({"name": "j", "command": "true", "resources": {"gpus": 2}})
            for start in range(0, n, 5000):
                with store.session() as s:
                    jobs = [add_job(s, tenant_id, manifest, now - 30 * 86400 + i)
                            for i in range(start, min(n, start + 5000))]
                    s.flush()  # the jobs before their attempts (no ORM relationship orders them)
                    for job in jobs:
                        began = now - rng.uniform(0, 30 * 86400)
                        outcome = rng.choice(["succeeded", "failed", "stopped"])
                        s.add(Attempt(job_id=job.id, number=1, started_at=began,
                                      ended_at=began + rng.uniform(60, 7200), outcome=outcome, log_dir="",
                                      allocation={"learners": [{"rank": 0, "node": "n0", "gpu_ids": [0, 1]}],
                                                  "master_port": 1}))
            for by in (usage.UsageBy.DAY, usage.UsageBy.JOB):
                t = time.perf_counter()
                with store.session() as s:
                    holds = list(usage.held(s, now - 30 * 86400, now, None))
                table, _ = usage.summarise(holds, by)
                took = time.perf_counter() - t
                rows.append({"attempts": n, "by": str(by), "rows": len(table), "ms": round(took * 1000, 1)})
            t = time.perf_counter()
            with store.session() as s:
                usage.timeline(list(usage.held(s, now - 30 * 86400, now, None)), now - 30 * 86400, now, 3600)
            rows.append({"attempts": n, "by": "timeline (720 points)", "rows": 720,
                         "ms": round((time.perf_counter() - t) * 1000, 1)})
            store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--attempts", type=int, nargs="*", default=[1000, 10_000, 100_000])
    args = parser.parse_args()
    packages = bench_packages()
    print_table(packages, ["files", "mb", "archive_mb", "pack_ms", "check_ms", "unpack_ms"])
    accounting = bench_usage(args.attempts)
    if accounting:
        print_table(accounting, ["attempts", "by", "rows", "ms"])
    out = write_results("accounting", [{"kind": "package", **r} for r in packages] +
                        [{"kind": "usage", **r} for r in accounting])
    print(f"wrote {out} (cores: {os.cpu_count()})")


if __name__ == "__main__":
    main()
