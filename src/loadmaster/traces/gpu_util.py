"""Per-GPU compute utilisation of each job, from Philly's `cluster_gpu_util` log (the paper's figures 5-6
and table 3): nvidia-smi's utilisation of every GPU, once a minute, joined to the jobs that held it.

The log is `time,machineId,gpu0_util,...,gpuN_util` (times like '2017-10-03 00:08:00 PDT', 'NA' for a
GPU that reported nothing). It is large (the full trace's is most of its 6.6 GB), so it is streamed once
and only histograms are kept: for each (final status, job GPUs), how many GPU-minutes ran at each whole
percent. Memory stays that of the job index, whatever the log's length.

Only the cells of GPUs a job held are parsed (a malformed cell elsewhere goes unnoticed).
Inferred: the time zone suffix is dropped and the times read on the job log's clock, as the trace's
authors' own analysis does; a sample counts for the attempts holding that GPU at that minute (attempt
start inclusive, end exclusive). Attempts without recorded machines hold no particular GPU and get none.
"""

from __future__ import annotations

import bisect
import csv
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from loadmaster.traces.errors import TraceFormatError
from loadmaster.traces.history import History
from loadmaster.traces.stats import CDF_POINTS, size_bucket

_GPU_COLUMN = re.compile(r"gpu(\d+)_util$")
_GPU_NAME = re.compile(r"gpu(\d+)$")
_EPOCH = datetime(1970, 1, 1)
Key = tuple[str, int]  # (final status, GPUs of the job)


@dataclass
class _Machine:
    """When the set of (GPU index, job key) held on one server changes, and the set after each change."""

    bounds: list[float] = field(default_factory=list)
    active: list[tuple[tuple[int, Key], ...]] = field(default_factory=list)


def per_job_utilization(history: History, path: str | Path) -> dict[str, Any]:
    """GPU-minute histograms by final status and job size, and the mean per GPU count."""
    if history.origin_s is None or not any(j.last_placement for j in history.jobs):
        return {"available": False, "why": "needs a job log that records which GPUs each attempt held and "
                                           "when (Philly's cluster_job_log)"}
    machines = _index(history)
    hist: dict[Key, np.ndarray] = defaultdict(lambda: np.zeros(101, dtype=np.int64))
    name = str(path)
    seconds: dict[str, float] = {}  # rows of one minute share their time stamp: parse each once
    rows = matched = 0
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        columns = _header(name, header)
        # Only the cells a job held are parsed: most of a cluster-wide log is idle GPUs and other servers.
        for row in reader:
            if len(row) < 2:
                continue
            rows += 1
            m = machines.get(row[1].strip())
            if m is None:
                continue
            stamp = row[0].strip()
            t = seconds.get(stamp)
            if t is None:
                t = seconds[stamp] = _time(name, reader.line_num, stamp)
            k = bisect.bisect_right(m.bounds, t) - 1
            if k < 0:
                continue
            for gpu, key in m.active[k]:
                column = columns.get(gpu)
                if column is None or column >= len(row):
                    continue
                value = _value(name, reader.line_num, header[column], row[column].strip())
                if value is not None:
                    hist[key][min(100, max(0, round(value)))] += 1
                    matched += 1
    return _summary(hist, rows, matched, str(path))


def _index(history: History) -> dict[str, _Machine]:
    """Per server, the elementary intervals between attempt starts and ends, and who held which GPU."""
    origin = history.origin_s or 0.0
    events: dict[str, list[tuple[float, int, int, Key]]] = defaultdict(list)  # (time, +1/-1, gpu, key)
    for job in history.jobs:
        key = (job.spec.final_status.value, job.spec.gpus)
        for a in job.attempts:
            if a.start_s is None or a.end_s is None or a.end_s <= a.start_s:
                continue
            for p in a.placement:
                for name in p.gpus:
                    match = _GPU_NAME.match(name)
                    if match:
                        gpu = int(match.group(1))
                        events[p.machine] += [(a.start_s + origin, 1, gpu, key), (a.end_s + origin, -1, gpu, key)]
    out = {}
    for machine, evs in events.items():
        evs.sort(key=lambda e: (e[0], e[1]))  # an end and a start at one instant: the end first
        m = _Machine()
        held: dict[tuple[int, Key], int] = defaultdict(int)
        for t, delta, gpu, key in evs:
            held[(gpu, key)] += delta
            snapshot = tuple(sorted(k for k, n in held.items() if n > 0))
            if m.bounds and m.bounds[-1] == t:
                m.active[-1] = snapshot
            else:
                m.bounds.append(t)
                m.active.append(snapshot)
        out[machine] = m
    return out


def _header(path: str, header: list[str]) -> dict[int, int]:
    """GPU index -> column. Philly's header: time, machineId, gpu0_util ... gpu7_util."""
    if len(header) < 3 or header[0].lower() != "time" or header[1].lower() != "machineid":
        raise TraceFormatError(path, 1, "time", "expected the header 'time,machineId,gpu0_util,...' of Philly's "
                                                "cluster_gpu_util")
    gpus = {int(m.group(1)): i for i, c in enumerate(header) if (m := _GPU_COLUMN.match(c))}
    if not gpus:
        raise TraceFormatError(path, 1, None, "no gpuN_util columns in the header")
    return gpus


def _time(path: str, line: int, stamp: str) -> float:
    parts = stamp.split()
    if len(parts) == 3 and parts[2].isalpha():  # '... PDT': dropped, read on the job log's clock
        parts = parts[:2]
    try:
        moment = datetime.strptime(" ".join(parts), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise TraceFormatError(path, line, "time", f"expected 'YYYY-MM-DD HH:MM:SS [TZ]', got {stamp!r}") from None
    return (moment - _EPOCH).total_seconds()


def _value(path: str, line: int, column: str, cell: str) -> float | None:
    if cell in ("", "NA"):
        return None  # the GPU reported nothing that minute (offline)
    try:
        return float(cell)
    except ValueError:
        raise TraceFormatError(path, line, column, f"expected a utilisation in percent or NA, got {cell!r}") from None


def _summary(hist: dict[Key, np.ndarray], rows: int, matched: int, source: str) -> dict[str, Any]:
    by_status: dict[str, dict[str, np.ndarray]] = defaultdict(lambda: defaultdict(lambda: np.zeros(101, np.int64)))
    by_gpus: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(101, np.int64))
    for (status, gpus), counts in hist.items():
        by_status[status][size_bucket(gpus)] += counts
        by_gpus[gpus] += counts
    return {
        "available": True,
        "source": source,
        "definition": "nvidia-smi utilisation of each GPU a job held, one sample a minute (GPU-minutes), "
                      "by the job's final status and size",
        "log_rows": rows,
        "gpu_minutes": matched,
        "by_status": {s: {b: histogram_cdf(c) for b, c in sorted(v.items())} for s, v in sorted(by_status.items())},
        "mean_by_gpus": {str(g): _mean(c) for g, c in sorted(by_gpus.items())},
    }


def _mean(counts: np.ndarray) -> float:
    n = counts.sum()
    return float((counts * np.arange(counts.size)).sum() / n) if n else 0.0


def histogram_cdf(counts: np.ndarray) -> dict[str, Any]:
    """cdf() for values kept as counts per whole percent: the same keys, curve at every percentile."""
    n = int(counts.sum())
    if n == 0:
        return {"n": 0}
    cumulative = np.cumsum(counts) / n
    fractions = np.linspace(0.0, 1.0, CDF_POINTS)
    # The value at fraction f is the first percent whose cumulative share reaches f (f = 0: the smallest).
    values = np.minimum(np.searchsorted(cumulative, np.maximum(fractions, 1e-12), side="left"), counts.size - 1)

    def q(f: float) -> float:
        return float(min(int(np.searchsorted(cumulative, f, side="left")), counts.size - 1))

    return {"n": n, "mean": _mean(counts), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "p95": q(0.95),
            "p99": q(0.99), "max": float(np.nonzero(counts)[0].max()),
            "curve": [[float(v), float(f)] for v, f in zip(values, fractions, strict=True)]}
