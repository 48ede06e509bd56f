"""Philly (Microsoft, Jeon et al. ATC'19): the `cluster_job_log` JSON and the `cluster_machine_list` CSV.

Job log mapping (docs/traces.md has the measured counts):
  jobid -> job_id, vc -> tenant, user -> user, status -> final_status, submitted_time -> submit_time_s
  last attempt end - start -> duration_s; each earlier attempt's end - start -> failed_attempts_s
  GPUs per machine in the last attempt that lists them (`detail`) -> learners x gpus_per_learner
load_history() also keeps every attempt's start, end and machines (for `trace analyze`).
"""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces.clusters import default_cpus, default_mem_gb, racks_by_sku
from loadmaster.traces.errors import TraceFormatError
from loadmaster.traces.history import Attempt, History, JobHistory, Placement, Times

STATUS = {"Pass": FinalStatus.PASS, "Failed": FinalStatus.FAILED, "Killed": FinalStatus.KILLED}
_EPOCH = datetime(1970, 1, 1)
_Times = tuple[float | None, float | None]  # (start, end) of an attempt in seconds; None = not logged

SKIP_NO_ATTEMPTS = "no scheduling attempt (never started)"
SKIP_RUNNING = "last attempt has no end_time (still running when the log was taken)"
SKIP_NO_START = "last attempt has no start_time (logging gap)"
SKIP_NO_DETAIL = "no attempt lists its machines and GPUs (empty detail)"
SKIP_NO_SUBMIT = "no submitted_time"
SKIP_NEGATIVE = "an attempt ends before it starts"


class _Job(NamedTuple):
    """A job read from the log, before submit times are shifted to start at 0."""

    job_id: str
    tenant: str
    user: str
    submit: float
    learners: int
    gpus_per_learner: int
    duration: float
    status: FinalStatus
    failed: tuple[float, ...]
    times: tuple[_Times, ...]  # every attempt's (start, end), in the log's own clock
    placements: tuple[tuple[Placement, ...], ...]  # every attempt's machines; () where detail is empty


class _Context:
    """What error messages and notes need while walking the records."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.report = LoadReport(source=path)
        self.uneven = 0
        self.untimed_failed = 0

    def error(self, index: int, record: Any, field: str | None, problem: str) -> TraceFormatError:
        """JSON has no per-record line numbers once parsed; find the record's jobid in the text instead
        (only on this error path, so loading stays one json.loads)."""
        job_id = record.get("jobid") if isinstance(record, dict) else None
        line = None
        if isinstance(job_id, str):
            m = re.search(r'"jobid"\s*:\s*' + re.escape(json.dumps(job_id)), self.text)
            if m is not None:
                line = self.text.count("\n", 0, m.start()) + 1
        who = f"record #{index}" + (f" (jobid {job_id})" if job_id else "")
        return TraceFormatError(self.path, line, field, f"{who}: {problem}")


def load(path: str | Path) -> Workload:
    """Read a Philly cluster_job_log (a JSON list of jobs). Skips are counted in the report."""
    parsed, report, t0 = _read(path)
    return Workload([_to_spec(j, t0) for j in parsed], report)


def load_history(path: str | Path) -> History:
    """The jobs of load(), plus every attempt's start, end and machines, on the same shifted clock."""
    parsed, report, t0 = _read(path)
    workload = Workload([_to_spec(j, t0) for j in parsed], report)
    by_id = {j.job_id: j for j in parsed}
    jobs = []
    for spec in workload.jobs:
        j = by_id[spec.job_id]
        attempts = tuple(
            Attempt(None if s is None else s - t0, None if e is None else e - t0, placement)
            for (s, e), placement in zip(j.times, j.placements, strict=True)
        )
        jobs.append(JobHistory.recorded(spec, attempts))
    return History(workload, jobs, Times.RECORDED, f"attempt start and end times as logged in {path}",
                   cluster_hint="philly", origin_s=t0)


def _read(path: str | Path) -> tuple[list[_Job], LoadReport, float]:
    """Parse the log: the jobs that can be replayed, the report, and the earliest submit time."""
    name = str(path)
    text = Path(path).read_text()
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON: {exc.msg} (column {exc.colno})"
        raise TraceFormatError(name, exc.lineno, None, problem) from None
    if not isinstance(records, list):
        raise TraceFormatError(name, 1, None, "expected a JSON list of jobs (Philly's cluster_job_log)")
    ctx = _Context(name, text)
    parsed: list[_Job] = []
    for index, record in enumerate(records):
        ctx.report.read += 1
        job = _parse_job(ctx, index, record)
        if job is not None:
            parsed.append(job)
    _add_notes(ctx)
    return parsed, ctx.report, min((j.submit for j in parsed), default=0.0)


def _to_spec(j: _Job, t0: float) -> JobSpec:
    return JobSpec(
        job_id=j.job_id,
        tenant=j.tenant,
        user=j.user,
        submit_time_s=j.submit - t0,
        learners=j.learners,
        gpus_per_learner=j.gpus_per_learner,
        duration_s=j.duration,
        final_status=j.status,
        failed_attempts_s=j.failed,
    )


def _add_notes(ctx: _Context) -> None:
    if ctx.uneven:
        ctx.report.notes.append(
            f"{ctx.uneven} jobs hold different GPU counts on different machines (e.g. 6+4+1+1): each is "
            "modelled as that many 1-GPU learners"
        )
    if ctx.untimed_failed:
        ctx.report.notes.append(
            f"{ctx.untimed_failed} earlier attempts lack start_time or end_time: counted as failed "
            "attempts that ran 0 s"
        )


def _parse_job(ctx: _Context, index: int, record: Any) -> _Job | None:
    if not isinstance(record, dict):
        raise ctx.error(index, record, None, f"expected a JSON object, got {type(record).__name__}")
    for key in ("jobid", "status", "vc", "submitted_time", "attempts"):
        if key not in record:
            raise ctx.error(index, record, key, "missing; every job of a cluster_job_log has it")
    status = STATUS.get(record["status"]) if isinstance(record["status"], str) else None
    if status is None:
        raise ctx.error(index, record, "status", f"{record['status']!r} is not one of {', '.join(STATUS)}")
    attempts = record["attempts"]
    if not isinstance(attempts, list):
        raise ctx.error(index, record, "attempts", "expected a list of attempts")
    submit = _time(ctx, index, record, "submitted_time", record["submitted_time"])
    times = [_attempt_times(ctx, index, record, a) for a in attempts]
    skip = _skip_reason(submit, times)
    shape = None
    placements: tuple[tuple[Placement, ...], ...] = ()
    if skip is None:
        placements = tuple(_placement(ctx, index, record, a.get("detail")) for a in attempts)
        shape = _shape(ctx, placements)
        skip = SKIP_NO_DETAIL if shape is None else None
    if skip is not None:
        ctx.report.skip(skip)
        return None
    assert submit is not None and shape is not None  # _skip_reason checked them
    start, end = times[-1]
    assert start is not None and end is not None
    return _Job(
        job_id=str(record["jobid"]),
        tenant=str(record["vc"]),
        user=str(record.get("user") or ""),
        submit=submit,
        learners=shape[0],
        gpus_per_learner=shape[1],
        duration=end - start,
        status=status,
        failed=tuple(_failed_runtime(ctx, s, e) for s, e in times[:-1]),
        times=tuple(times),
        placements=placements,
    )


def _skip_reason(submit: float | None, times: list[_Times]) -> str | None:
    """Why a job cannot become a JobSpec, or None. The reasons are those the Philly README documents."""
    if submit is None:
        return SKIP_NO_SUBMIT
    if not times:
        return SKIP_NO_ATTEMPTS
    start, end = times[-1]
    if end is None:
        return SKIP_RUNNING
    if start is None:
        return SKIP_NO_START
    if any(s is not None and e is not None and e < s for s, e in times):
        return SKIP_NEGATIVE
    return None


def _failed_runtime(ctx: _Context, start: float | None, end: float | None) -> float:
    if start is None or end is None:
        ctx.untimed_failed += 1
        return 0.0
    return end - start


def _attempt_times(ctx: _Context, index: int, record: Any, attempt: Any) -> _Times:
    if not isinstance(attempt, dict):
        raise ctx.error(index, record, "attempts", "each attempt must be a JSON object")
    return (
        _time(ctx, index, record, "start_time", attempt.get("start_time")),
        _time(ctx, index, record, "end_time", attempt.get("end_time")),
    )


def _time(ctx: _Context, index: int, record: Any, field: str, value: Any) -> float | None:
    """Philly times are 'YYYY-MM-DD HH:MM:SS' wall-clock strings; None means not recorded."""
    if value is None or value == "None":
        return None
    if not isinstance(value, str):
        raise ctx.error(index, record, field, f"expected a 'YYYY-MM-DD HH:MM:SS' string, got {value!r}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ctx.error(index, record, field, f"expected 'YYYY-MM-DD HH:MM:SS', got {value!r}") from None
    if moment.tzinfo is not None:  # Philly writes naive times; other logs may carry an offset
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return (moment - _EPOCH).total_seconds()


def _placement(ctx: _Context, index: int, record: Any, detail: Any) -> tuple[Placement, ...]:
    """An attempt's `detail` as one Placement per machine. A machine may appear in several entries
    (one per GPU): its GPUs are gathered, in the order listed."""
    if not detail:
        return ()
    if not isinstance(detail, list):
        raise ctx.error(index, record, "detail", "expected a list of {ip, gpus} objects")
    per_machine: dict[str, list[str]] = {}
    for entry in detail:
        if not isinstance(entry, dict) or not isinstance(entry.get("gpus"), list):
            raise ctx.error(index, record, "detail", "each entry needs 'ip' and a 'gpus' list")
        per_machine.setdefault(str(entry.get("ip")), []).extend(str(g) for g in entry["gpus"])
    return tuple(Placement(ip, tuple(gpus)) for ip, gpus in per_machine.items() if gpus)


def _shape(ctx: _Context, placements: tuple[tuple[Placement, ...], ...]) -> tuple[int, int] | None:
    """(learners, gpus_per_learner) from the last attempt that lists machines.

    One learner per machine when every machine holds the same number of GPUs (the usual data-parallel
    layout); otherwise one learner per GPU, so the gang still asks for exactly the GPUs it held.
    """
    last = next((p for p in reversed(placements) if p), None)
    if last is None:
        return None
    counts = {len(p.gpus) for p in last}
    if len(counts) == 1:
        return len(last), counts.pop()
    ctx.uneven += 1
    return sum(len(p.gpus) for p in last), 1


# --------------------------------------------------------------------------------------- machine list


def load_machine_list(path: str | Path) -> Cluster:
    """Read Philly's cluster_machine_list CSV (`machineId, number of GPUs, single GPU mem`).

    GPU type = the GPU memory ('12gb', '24gb'); CPUs and memory follow the per-GPU defaults of
    loadmaster.traces.clusters. Racks: machines of one SKU (GPU count and memory) sorted by numeric id,
    16 to a rack (see docs/clusters.md for why).
    """
    name = str(path)
    machines = []
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = [c.strip().lower() for c in next(rows, [])]
        if not header or header[0] != "machineid":
            raise TraceFormatError(name, 1, "machineId",
                                   "expected the header 'machineId, number of GPUs, single GPU mem'")
        for row in rows:
            if any(c.strip() for c in row):
                machines.append(_machine(name, rows.line_num, row))
    if not machines:
        raise TraceFormatError(name, None, None, "the machine list has no machines")
    machines.sort(key=lambda m: (m[1], m[2], _numeric_id(m[0])))
    racks = racks_by_sku((m[0], f"{m[1]}x{m[2]}") for m in machines)
    nodes = tuple(
        Node(mid, gpus, default_cpus(gpus), default_mem_gb(gpus), mem, racks[mid])
        for mid, gpus, mem in machines
    )
    return Cluster(nodes, name="philly")


def _machine(path: str, line: int, row: list[str]) -> tuple[str, int, str]:
    if len(row) != 3:
        raise TraceFormatError(path, line, None, f"expected 3 comma-separated fields, got {len(row)}")
    mid, gpus_text, mem_text = (c.strip() for c in row)
    try:
        gpus = int(gpus_text)
    except ValueError:
        problem = f"expected a whole number, got {gpus_text!r}"
        raise TraceFormatError(path, line, "number of GPUs", problem) from None
    if not re.fullmatch(r"\d+(\.\d+)?\s*[GgMm][Bb]", mem_text):
        raise TraceFormatError(path, line, "single GPU mem", f"expected a size like '12GB', got {mem_text!r}")
    return mid, gpus, mem_text.replace(" ", "").lower()


def _numeric_id(machine_id: str) -> tuple[int, str]:
    """'m102' -> (102, 'm102'): consecutive ids are neighbours, which a text sort would scatter."""
    digits = re.sub(r"\D", "", machine_id)
    return (int(digits) if digits else -1, machine_id)
