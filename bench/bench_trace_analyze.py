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
- `sample --gpu-util`: the sample joined to a synthetic cluster_gpu_util log (random utilisations, one row
  a minute for each of the 552 machines over two days): `gpu_util_rows_per_s` is the rows read per second
  beyond the run without it. Philly's full log has ~109 M rows (552 machines x 137 days x 1,440 minutes).

Prints a table and writes bench/results/trace_analyze.json. Needs ../shared/traces.
"""

from __future__ import annotations

import json
import random
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


def util_log(path: Path, days: int = 2) -> int:
    """A cluster_gpu_util-shaped log for every machine of the Philly list, `days` days from the sample's
    busiest stretch (the middle of its submissions), random utilisations (seeded)."""
    rng = random.Random(0)
    machines = [line.split(",")[0] for line in (SHARED / "philly" / "cluster_machine_list").read_text().splitlines()[1:]
                if line.strip()]
    records = json.loads(PHILLY.read_text())
    submits = sorted(datetime.strptime(r["submitted_time"], FMT) for r in records)
    start = submits[len(submits) // 2].replace(second=0)
    header = "time,machineId," + ",".join(f"gpu{i}_util" for i in range(8)) + ","
    rows = 0
    with open(path, "w") as f:
        f.write(header + "\n")
        for minute in range(days * 1440):
            t = (start + timedelta(minutes=minute)).strftime(FMT) + " PDT"
            for m in machines:
                f.write(f"{t},{m}," + ",".join(f"{rng.uniform(0, 100):.1f}" for _ in range(8)) + ",\n")
                rows += 1
    return rows


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
        util = tmp / "cluster_gpu_util"
        util_rows = util_log(util)
        runs.append((f"sample --gpu-util ({util_rows:,} rows)", [str(PHILLY), "--json", "--gpu-util", str(util)], 60.0))
        for name, args, target in runs:
            m = measure(name, [*LOADMASTER, "trace", "analyze", *args])
            result = m.json() or {}
            rows.append({"scenario": name, "wall_s": m.wall_s, "cpu_s": m.cpu_s, "peak_rss_mb": m.peak_rss_mb,
                         "jobs": result.get("jobs"), "ok": m.returncode == 0, "target_s": target,
                         "meets_time": m.returncode == 0 and m.wall_s <= target})
            print(f"{name}: wall {m.wall_s:.2f} s, cpu {m.cpu_s:.2f} s, {m.peak_rss_mb:.0f} MB", flush=True)
    base, joined = rows[0]["wall_s"], rows[-1]["wall_s"]
    rows[-1]["gpu_util_rows_per_s"] = util_rows / max(joined - base, 1e-9)
    rows.append(stages())
    print()
    print_table(rows[:-1], ["scenario", "wall_s", "cpu_s", "peak_rss_mb", "jobs", "target_s", "meets_time",
                            "gpu_util_rows_per_s"])
    print()
    print_table(rows[-1:], ["scenario", "load_s", "occupancy_s", "split_s", "analyze_s", "render_s", "jobs"])
    print(f"wrote {write_results('trace_analyze', rows)}")


if __name__ == "__main__":
    main()
