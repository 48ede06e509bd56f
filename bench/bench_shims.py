"""CPU and wall time to start one learner's shim: forked by the node's supervisor (executors/supervisor.py,
what the local executor does) against a fresh `python -m ...shim` (spawn.spawn_shim, its fallback).

    .venv/bin/python bench/bench_shims.py --launches 200

Each launch is real: a shim that takes its rank's lock, runs `true` as the learner in a session of its own,
writes the pid and exit files. The launches run one after another (start, wait for the pid file, wait for
the shim's end); CPU is this process and every process below it (the supervisor and the shims it forked
included, collected once the supervisor has exited), per launch. Prints a table and writes
bench/results/shims.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import print_table, tree_cpu_s, write_results
from loadmaster.platform.executors.forked import ShimSupervisor
from loadmaster.platform.executors.shim import ShimRequest
from loadmaster.platform.executors.spawn import ShimProcess, await_started, shim_needs, spawn_shim


def _request(root: Path, i: int) -> ShimRequest:
    d = root / f"l{i}"
    d.mkdir()
    return ShimRequest(argv=("true",), workdir=str(d), env=shim_needs(), log=str(d / "log"), exit=str(d / "exit"),
                       pid=str(d / "pid"), lock=str(d / "lock"), fence=str(d / "fence"), clean=True)


def measure(name: str, launches: int, start: Callable[[ShimRequest], ShimProcess],
            done: Callable[[], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lm-bench-shims-") as tmp:
        cpu, wall = tree_cpu_s(), time.perf_counter()
        started_s = 0.0
        for i in range(launches):
            request = _request(Path(tmp), i)
            t = time.perf_counter()
            shim = start(request)
            record = await_started(shim, request, time.monotonic() + 30)
            started_s += time.perf_counter() - t
            assert not isinstance(record, str), record
            shim.wait(30)
            assert Path(request.exit).read_text().strip() == "0"
        done()
        wall = time.perf_counter() - wall
        cpu = tree_cpu_s() - cpu
    return {"shims": name, "launches": launches, "cpu_ms_per_launch": 1000 * cpu / launches,
            "wall_ms_per_launch": 1000 * wall / launches, "to_started_ms": 1000 * started_s / launches,
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--forked-only", action="store_true", help="leave out the fresh `python -m` shims")
    args = parser.parse_args()
    supervisor = ShimSupervisor()

    def forked(request: ShimRequest) -> ShimProcess:
        shim = supervisor.spawn(request)
        assert shim is not None, "the supervisor did not fork the shim"
        return shim

    def supervisor_gone() -> None:
        pid = supervisor.pid
        supervisor.close()
        if pid is not None:
            os.waitpid(pid, 0)  # its CPU, and its shims', count once it is collected

    rows = [measure("forked by the supervisor", args.launches, forked, supervisor_gone)]
    if not args.forked_only:
        rows.append(measure("python -m shim (before)", args.launches, spawn_shim, lambda: None))
    print_table(rows, ["shims", "launches", "cpu_ms_per_launch", "wall_ms_per_launch", "to_started_ms", "load"])
    print(f"wrote {write_results('shims', rows)}")


if __name__ == "__main__":
    main()
