"""What confining a learner costs at launch: the local executor starting one learner (`/bin/true`) unconfined
and in its bubblewrap sandbox, as the server's user and (as root) as another user.

    .venv/bin/python bench/bench_sandbox.py              # 20 launches per row
    .venv/bin/python bench/bench_sandbox.py --repeat 50

Measured per launch: `launch_s`, from launch() until the shim says the command runs (what the control loop
waits for), and `end_s`, from launch() until poll() reports the attempt ended (a learner that exits at once:
the whole start-up and tear-down of the sandbox). Prints a table (median and p95) and writes
bench/results/sandbox.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import print_table, write_results
from loadmaster.platform.executors.base import AttemptSpec, LearnerSpec
from loadmaster.platform.executors.local import LocalExecutor
from loadmaster.platform.executors.sandbox import find_bwrap


def _spec(root: Path, run_as: tuple[int, int] | None) -> AttemptSpec:
    job = root / "jobs" / f"j-{uuid.uuid4().hex[:12]}"
    for own in ("work", "checkpoints", "results"):
        (job / own).mkdir(parents=True)
        if run_as is not None:
            os.chown(job / own, *run_as)
    return AttemptSpec(job_id=job.name, attempt=1, command=("/bin/true",), workdir=str(job / "work"), env={},
                       learners=(LearnerSpec(0, "n0", (), 1.0, 1.0),), master_port=29500,
                       checkpoint_dir=str(job / "checkpoints"), results_dir=str(job / "results"),
                       log_dir=str(job / "attempt-1" / "logs"), report_dir=str(job / "attempt-1" / "reports"),
                       run_as=run_as)


def _measure(ex: LocalExecutor, root: Path, run_as: tuple[int, int] | None, repeat: int) -> dict[str, Any]:
    launches, ends = [], []
    for _ in range(repeat):
        spec = _spec(root, run_as)
        started = time.perf_counter()
        ex.launch(spec)
        launches.append(time.perf_counter() - started)
        while not ex.poll().ended:
            time.sleep(0.001)
        ends.append(time.perf_counter() - started)
        ended = ex.poll().ended[0]
        assert ended.succeeded, ended
        ex.release(spec.job_id, spec.attempt)

    def p95(xs: list[float]) -> float:
        return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]

    return {"launch_median_s": statistics.median(launches), "launch_p95_s": p95(launches),
            "end_median_s": statistics.median(ends), "end_p95_s": p95(ends)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    bwrap = find_bwrap()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lm-bench-sandbox-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        cases: list[tuple[str, str | None, tuple[int, int] | None]] = [("unconfined", None, None)]
        if bwrap is not None:
            cases.append(("bubblewrap", bwrap, None))
        if os.geteuid() == 0:
            cases.append(("another user, unconfined", None, (65534, 65534)))
            if bwrap is not None:
                cases.append(("another user, bubblewrap", bwrap, (65534, 65534)))
        for name, sandbox, run_as in cases:
            ex = LocalExecutor(sandbox=sandbox)
            try:
                rows.append({"case": name, "launches": args.repeat, **_measure(ex, root, run_as, args.repeat)})
            finally:
                ex.close()
    print_table(rows, ["case", "launches", "launch_median_s", "launch_p95_s", "end_median_s", "end_p95_s"])
    print(f"wrote {write_results('sandbox', rows)}")


if __name__ == "__main__":
    main()
