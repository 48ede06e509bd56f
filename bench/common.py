"""Shared by the benchmarks: run a command as a child process and measure its wall time and peak memory."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = ROOT / "bench" / "results"
LOADMASTER = [sys.executable, "-m", "loadmaster.cli.main"]


@dataclass
class Measured:
    name: str
    wall_s: float
    peak_rss_mb: float
    returncode: int
    stdout: str
    cpu_s: float = 0.0  # the child's user + system CPU time: its cost when the machine is shared

    def json(self) -> Any:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError:
            return None


def measure(name: str, argv: list[str], env: dict[str, str] | None = None) -> Measured:
    """Wall time, CPU time and peak resident memory (ru_maxrss via wait4) of one child, whole process
    included."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env={**os.environ, **(env or {})},
                                cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        sys.stderr.write(f"{name} failed ({proc.returncode}):\n{stderr[-2000:]}\n")
    return Measured(name, wall, usage.ru_maxrss / 1024, proc.returncode, stdout, usage.ru_utime + usage.ru_stime)


def tree_cpu_s() -> float:
    """CPU seconds of this process and of its children waited for (an exited supervisor and what it forked)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def machine() -> dict[str, Any]:
    """The machine and how busy it was when the results were written (other work skews wall times)."""
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "load_average_1_5_15": list(os.getloadavg())}


def write_results(stem: str, rows: list[dict[str, Any]]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{stem}.json"
    path.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    return path


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    widths = [max([len(c), *(len(_fmt(r.get(c))) for r in rows)]) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths, strict=True)))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return "" if v is None else str(v)


def asdicts(items: list[Measured]) -> list[dict[str, Any]]:
    return [asdict(m) for m in items]
