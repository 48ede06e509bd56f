"""Gavel (Narayanan et al., OSDI'20) job traces: tab-separated, one job per line, no header.

Two layouts exist:
  'gavel'    10 fields: job_type, command, working_directory, num_steps_arg, needs_data_dir,
             total_steps, scale_factor, priority_weight, SLO, arrival_time  (generated traces)
  'gavel-vc' 7 fields:  job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time,
             scale_factor  (the per-virtual-cluster Philly-derived traces of traces/seed=0/)
A trace holds steps, not seconds: duration_s = total_steps / isolated throughput (steps/s) on the
fastest GPU type for (job_type, scale_factor), from Gavel's simulation_throughputs.json.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from loadmaster.core.job import JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces import samples
from loadmaster.traces.errors import TraceFormatError

FIELDS = {
    "gavel": (
        "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
        "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time",
    ),
    "gavel-vc": (
        "job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
        "scale_factor",
    ),
}
VARIANT_BY_WIDTH = {len(v): k for k, v in FIELDS.items()}
THROUGHPUTS_NAME = "simulation_throughputs.json"
_KEY_RE = re.compile(r"\(\s*'(?P<type>.+)'\s*,\s*(?P<scale>\d+)\s*\)")
# Entries like 'v100_unconsolidated' are the same GPU with the job spread over servers: a placement
# effect that the simulator's locality model covers, not a GPU type.
_PLACEMENT_SUFFIX = "_unconsolidated"


class _Throughput(NamedTuple):
    """What a (job_type, scale_factor) needs, computed once per pair rather than once per job."""

    best: float  # steps/s of the whole job on its fastest GPU type
    speeds: tuple[tuple[str, float], ...]  # (GPU type, throughput / best), sorted by type
    extrapolated_from: int | None  # the measured scale factor this was scaled from, if not measured


@dataclass
class Throughputs:
    """Isolated throughputs: (job_type, scale_factor) -> GPU type -> steps/s."""

    source: str
    table: dict[tuple[str, int], dict[str, float]]
    _cache: dict[tuple[str, int], _Throughput | None] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, path: str | Path) -> Throughputs:
        """Read Gavel's throughputs JSON; only the isolated ('null') entries, colocated pairs are ignored."""
        try:
            raw = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise TraceFormatError(str(path), exc.lineno, None, f"not valid JSON: {exc.msg}") from None
        table: dict[tuple[str, int], dict[str, float]] = {}
        for gpu_type, entries in raw.items():
            if gpu_type.endswith(_PLACEMENT_SUFFIX) or not isinstance(entries, dict):
                continue
            for key, value in entries.items():
                parsed = _parse_key(key)
                isolated = value.get("null") if isinstance(value, dict) else None
                if parsed is not None and isinstance(isolated, (int, float)):
                    table.setdefault(parsed, {})[gpu_type] = float(isolated)
        return cls(str(path), table)

    def lookup(self, job_type: str, scale: int) -> _Throughput | None:
        """Measured throughput, else one scaled linearly from the largest measured smaller scale factor
        of the same job type (Gavel's table stops at 8 GPUs; the Philly-derived traces ask for up to 64).
        None when the job type is not in the table at all."""
        key = (job_type, scale)
        if key not in self._cache:
            self._cache[key] = self._find(job_type, scale)
        return self._cache[key]

    def _find(self, job_type: str, scale: int) -> _Throughput | None:
        if (job_type, scale) in self.table:
            return _summarise(self.table[(job_type, scale)], None)
        smaller = [s for t, s in self.table if t == job_type and s < scale]
        if not smaller:
            return None
        base = max(smaller)
        return _summarise({g: v * scale / base for g, v in self.table[(job_type, base)].items()}, base)

    def known_type(self, job_type: str) -> bool:
        return any(t == job_type for t, _ in self.table)


def _summarise(per_type: dict[str, float], extrapolated_from: int | None) -> _Throughput:
    best = max(per_type.values(), default=0.0)
    # 4 decimals: finer than the measurements, and the canonical CSV (6 significant digits) then
    # round-trips exactly.
    speeds = tuple(sorted((g, round(v / best, 4) if best > 0 else 0.0) for g, v in per_type.items()))
    return _Throughput(best, speeds, extrapolated_from)


def _parse_key(key: str) -> tuple[str, int] | None:
    m = _KEY_RE.fullmatch(key.strip())
    return None if m is None else (m["type"], int(m["scale"]))


def find_throughputs(trace: Path) -> Path:
    """simulation_throughputs.json beside the trace, or in its parent folder (for seed=0/ folders), or
    the bundled isolated-only copy."""
    folder = trace if trace.is_dir() else trace.parent
    for candidate in (folder / THROUGHPUTS_NAME, folder.parent / THROUGHPUTS_NAME):
        if candidate.is_file():
            return candidate
    return samples.data_path("gavel", "gavel_throughputs_isolated.json")


# ------------------------------------------------------------------------------------------- loading


class _Row(NamedTuple):
    job_id: str
    tenant: str
    arrival: float
    scale: int
    total_steps: int
    job_type: str
    priority: int
    source: str  # file and line, for errors found after parsing (throughput lookup)
    line: int


@dataclass
class _Stats:
    """Counts behind the report notes."""

    extrapolated: int = 0
    zero_speed: int = 0


def load(path: str | Path, variant: str | None = None, throughputs: str | Path | None = None) -> Workload:
    """Load a Gavel trace file, or a folder of per-VC `*.trace` files as one workload (tenant = file stem).

    variant: 'gavel' (10 fields) or 'gavel-vc' (7 fields); None = decided by each file's field count.
    throughputs: a simulation_throughputs.json; None = found with find_throughputs().
    """
    p = Path(path)
    files = sorted(p.glob("*.trace")) if p.is_dir() else [p]
    if not files:
        raise TraceFormatError(str(p), None, None, "the folder holds no *.trace files")
    table = Throughputs.read(throughputs if throughputs is not None else find_throughputs(p))
    report = LoadReport(source=str(p))
    rows: list[_Row] = []
    for f in files:
        tenant = f.stem if p.is_dir() else None
        rows.extend(_read_file(f, variant, tenant, report))
    stats = _Stats()
    t0 = min((r.arrival for r in rows), default=0.0)
    jobs = [_to_spec(r, t0, table, stats) for r in rows]
    _add_notes(report, table, stats)
    return Workload(jobs, report)


def _read_file(path: Path, variant: str | None, tenant: str | None, report: LoadReport) -> list[_Row]:
    name = str(path)
    rows = []
    for number, line in enumerate(path.read_text().split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        report.read += 1
        parts = line.split("\t")
        kind = variant or VARIANT_BY_WIDTH.get(len(parts))
        if kind is None or len(parts) != len(FIELDS[kind]):
            raise TraceFormatError(name, number, None, _width_problem(len(parts), variant))
        rows.append(_parse_row(name, number, dict(zip(FIELDS[kind], parts, strict=True)), kind, tenant, path))
    return rows


def _width_problem(width: int, variant: str | None) -> str:
    expected = [variant] if variant else list(FIELDS)
    layouts = "; ".join(f"'{v}' has {len(FIELDS[v])}: {', '.join(FIELDS[v])}" for v in expected)
    hint = ""
    if variant and width in VARIANT_BY_WIDTH:
        hint = f" (this looks like the other layout: pass --format {VARIANT_BY_WIDTH[width]})"
    return f"found {width} tab-separated fields; {layouts}{hint}"


def _parse_row(
    name: str, number: int, f: dict[str, str], kind: str, tenant: str | None, path: Path
) -> _Row:
    scale = _whole(name, number, "scale_factor", f["scale_factor"])
    if scale < 1:
        raise TraceFormatError(name, number, "scale_factor", f"must be >= 1 GPU, got {scale}")
    steps = _whole(name, number, "total_steps", f["total_steps"])
    if steps < 0:
        raise TraceFormatError(name, number, "total_steps", f"must be >= 0, got {steps}")
    arrival = _number(name, number, "arrival_time", f["arrival_time"])
    if arrival < 0:
        raise TraceFormatError(name, number, "arrival_time", f"must be >= 0, got {arrival}")
    # Gavel reads the weight with int() (so a fraction is an error there too); 7-field traces have none
    # and Gavel gives them its default weight, 1.
    priority = _whole(name, number, "priority_weight", f.get("priority_weight", "1"))
    # A 7-field file is one virtual cluster; a 10-field file has none, unless it sits in a folder.
    owner = tenant or (path.stem if kind == "gavel-vc" else "default")
    job_id = f"{owner}-{number - 1}" if (tenant or kind == "gavel-vc") else str(number - 1)
    job_type = f["job_type"].strip()
    if not job_type:
        raise TraceFormatError(name, number, "job_type", "is empty")
    return _Row(job_id, owner, arrival, scale, steps, job_type, priority, name, number)


def _number(name: str, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceFormatError(name, line, field, f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise TraceFormatError(name, line, field, f"expected a finite number, got {text!r}")
    return value


def _whole(name: str, line: int, field: str, text: str) -> int:
    try:
        return int(text)  # the common case, and cheaper than float() plus checks
    except ValueError:
        pass
    value = _number(name, line, field, text)
    if not value.is_integer():
        raise TraceFormatError(name, line, field, f"expected a whole number, got {text!r}")
    return int(value)


def _to_spec(r: _Row, t0: float, table: Throughputs, stats: _Stats) -> JobSpec:
    found = table.lookup(r.job_type, r.scale)
    if found is None:
        raise _missing(r, table)
    if found.best <= 0:
        raise TraceFormatError(r.source, r.line, "job_type",
                               f"{r.job_type!r} at scale {r.scale} has throughput 0 on every GPU type "
                               f"in {table.source}")
    stats.extrapolated += found.extrapolated_from is not None
    stats.zero_speed += any(v <= 0 for _, v in found.speeds)
    return JobSpec(
        job_id=r.job_id,
        tenant=r.tenant,
        submit_time_s=r.arrival - t0,
        learners=r.scale,
        gpus_per_learner=1,
        # Whole seconds: trace clocks tick in seconds, and the canonical CSV round-trips them exactly.
        duration_s=float(round(r.total_steps / found.best)),
        model=r.job_type,
        priority=r.priority,
        type_speed=found.speeds,
    )


def _missing(r: _Row, table: Throughputs) -> TraceFormatError:
    if not table.known_type(r.job_type):
        known = ", ".join(sorted({t for t, _ in table.table}))
        return TraceFormatError(r.source, r.line, "job_type",
                                f"{r.job_type!r} is not in {table.source}; known job types: {known}")
    return TraceFormatError(r.source, r.line, "scale_factor",
                            f"({r.job_type!r}, {r.scale}) is not in {table.source} and no smaller scale "
                            "factor of that job type is measured")


def _add_notes(report: LoadReport, table: Throughputs, stats: _Stats) -> None:
    report.notes.append(f"duration = total_steps / isolated throughput on the fastest GPU ({table.source})")
    if stats.extrapolated:
        report.notes.append(
            f"{stats.extrapolated} jobs use a (job_type, scale_factor) the throughput table does not "
            "measure: throughput scaled linearly from the largest measured smaller scale factor (optimistic)"
        )
    if stats.zero_speed:
        report.notes.append(
            f"{stats.zero_speed} jobs have speed 0 on some GPU type (they cannot run there: out of memory)"
        )

