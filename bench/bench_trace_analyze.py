"""`trace analyze` cost: the Philly sample, and a Philly log of the full trace's size.

    .venv/bin/python bench/bench_trace_analyze.py

Rows:
- `sample ...`: `loadmaster trace analyze` on the 4,206-job Philly sample as a child process (interpreter
  start-up, imports, loading, rebuilding the occupancy, the split, the report), with --json and with --html.
  Target: well under a few seconds (3 s).
- `stages`: the same work in this process, stage by stage (best of 3), to say where the time goes.
- `x28 ...`: the sample repeated 28 times one after the other (117,768 jobs, the full trace's 117,325),
  each copy shifted past the end of the one before so that no GPU is held twice: what the full Philly log
  costs. Target: 60 s and 2 GB.

Prints a table and writes bench/results/trace_analyze.json. Needs ../shared/traces.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from common import LOADMASTER, SHARED, measure, print_table, write_results

from loadmaster.traces import load_cluster
from loadmaster.traces.analysis import analyze
from loadmaster.traces.formats import load_history
from loadmaster.traces.occupancy import rebuild
from loadmaster.traces.queueing import demand_shares, split_delays
from loadmaster.traces.report import render

PHILLY = SHARED / "philly" / "philly_sample_cluster_job_log.json"
COPIES = 28
FMT = "%Y-%m-%d %H:%M:%S"


def _best(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def stages() -> dict[str, Any]:
    cluster = load_cluster("philly")
    t_load, history = _best(lambda: load_history(str(PHILLY)))
    t_occ, occ = _best(lambda: rebuild(history, cluster))
    shares = demand_shares(history.jobs, occ.capacity)
    t_split, _ = _best(lambda: split_delays(history.jobs, occ, shares))
    t_all, result = _best(lambda: analyze(history, cluster))
    t_html, _ = _best(lambda: render(result))
    return {"scenario": "stages (in process)", "load_s": t_load, "occupancy_s": t_occ, "split_s": t_split,
            "analyze_s": t_all, "render_s": t_html, "jobs": len(history.jobs)}


def _shift(value: str | None, by: timedelta) -> str | None:
    if value in (None, "None"):
        return value
    return (datetime.strptime(value, FMT) + by).strftime(FMT)


def scaled_log(path: Path) -> int:
    """The sample COPIES times, each copy after the previous one's last end (no GPU held twice)."""
    records = json.loads(PHILLY.read_text())
    stamps = [datetime.strptime(t, FMT) for r in records for t in
              [r["submitted_time"], *(a[k] for a in r["attempts"] for k in ("start_time", "end_time"))]
              if t not in (None, "None")]
    span = max(stamps) - min(stamps) + timedelta(hours=1)
    out = []
    for c in range(COPIES):
        by = span * c
        for r in records:
            attempts = [{**a, "start_time": _shift(a["start_time"], by), "end_time": _shift(a["end_time"], by)}
                        for a in r["attempts"]]
            out.append({**r, "jobid": f"{r['jobid']}-{c}", "submitted_time": _shift(r["submitted_time"], by),
                        "attempts": attempts})
    path.write_text(json.dumps(out))
    return len(out)


def main() -> None:
    if not PHILLY.exists():
        sys.exit(f"bench needs the real traces in {SHARED}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        runs = [("sample --json", [str(PHILLY), "--json"], 3.0),
                ("sample --html", [str(PHILLY), "--html", str(tmp / "r.html")], 3.0)]
        big = tmp / "philly_x28.json"
        n = scaled_log(big)
        runs.append((f"x{COPIES} ({n:,} jobs) --json --html", [str(big), "--json", "--html", str(tmp / "big.html")],
                     60.0))
        for name, args, target in runs:
            m = measure(name, [*LOADMASTER, "trace", "analyze", *args])
            result = m.json() or {}
            rows.append({"scenario": name, "wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_mb": m.peak_rss_mb,
                         "jobs": result.get("jobs"), "ok": m.returncode == 0, "target_s": target,
                         "meets_time": m.returncode == 0 and m.wall_s <= target})
            print(f"{name}: wall {m.wall_s:.2f} s, cpu {m.cpu_s:.2f} s, {m.peak_rss_mb:.0f} MB", flush=True)
    rows.append(stages())
    print()
    print_table(rows[:-1], ["scenario", "wall_s", "cpu_s", "peak_rss_mb", "jobs", "target_s", "meets_time"])
    print()
    print_table(rows[-1:], ["scenario", "load_s", "occupancy_s", "split_s", "analyze_s", "render_s", "jobs"])
    print(f"wrote {write_results('trace_analyze', rows)}")


if __name__ == "__main__":
    main()
