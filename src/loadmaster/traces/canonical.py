"""The canonical workload CSV: what `trace synth` writes, every loader can export, and users edit.

Contract columns (../shared/DESIGN.md), in this order:
  job_id, tenant, user, submit_time_s, learners, gpus_per_learner, cpus_per_learner,
  mem_gb_per_learner, duration_s, model, priority, final_status, attempts
Optional columns loadmaster adds so that a round trip loses nothing:
  failed_attempts_s  runtimes of the failed attempts before the last one, ';'-separated
  min_learners, max_learners  elastic bounds (empty = not elastic)
  type_speed  relative speed per GPU type, e.g. 'v100=1;p100=0.61;k80=0.28'
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces.errors import TraceFormatError

if TYPE_CHECKING:
    from _csv import Reader

CONTRACT_COLUMNS = (
    "job_id",
    "tenant",
    "user",
    "submit_time_s",
    "learners",
    "gpus_per_learner",
    "cpus_per_learner",
    "mem_gb_per_learner",
    "duration_s",
    "model",
    "priority",
    "final_status",
    "attempts",
)
EXTRA_COLUMNS = ("failed_attempts_s", "min_learners", "max_learners", "type_speed")
COLUMNS = CONTRACT_COLUMNS + EXTRA_COLUMNS
REQUIRED = ("job_id", "submit_time_s", "learners", "gpus_per_learner", "duration_s")


def _fmt(x: float) -> str:
    """Shortest text that reads back as the same float (so a CSV round trip is exact)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def job_to_row(job: JobSpec) -> dict[str, str]:
    return {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "user": job.user,
        "submit_time_s": _fmt(job.submit_time_s),
        "learners": str(job.learners),
        "gpus_per_learner": str(job.gpus_per_learner),
        "cpus_per_learner": _fmt(job.cpus_per_learner),
        "mem_gb_per_learner": _fmt(job.mem_gb_per_learner),
        "duration_s": _fmt(job.duration_s),
        "model": job.model,
        "priority": str(job.priority),
        "final_status": job.final_status.value,
        "attempts": str(job.attempts),
        "failed_attempts_s": ";".join(_fmt(a) for a in job.failed_attempts_s),
        "min_learners": "" if job.min_learners is None else str(job.min_learners),
        "max_learners": "" if job.max_learners is None else str(job.max_learners),
        "type_speed": ""
        if job.type_speed is None
        else ";".join(f"{t}={_fmt(s)}" for t, s in job.type_speed),
    }


def write_csv(jobs: Iterable[JobSpec], path: str | Path) -> int:
    """Write jobs as canonical CSV; returns how many were written."""
    n = 0
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for job in jobs:
            writer.writerow(job_to_row(job))
            n += 1
    return n


def _number(path: str, line: int, field: str, text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise TraceFormatError(path, line, field, f"expected {what}, got {text!r}") from None
    return value


def _row_to_job(path: str, line: int, row: dict[str, str]) -> JobSpec:
    def get(name: str, default: str = "") -> str:
        value = row.get(name)
        return default if value is None or value.strip() == "" else value.strip()

    for name in REQUIRED:
        if get(name) == "":
            raise TraceFormatError(path, line, name, "is empty; every job needs it")
    learners = int(_number(path, line, "learners", get("learners"), int))
    duration = float(_number(path, line, "duration_s", get("duration_s"), float))
    status_text = get("final_status", "Pass")
    try:
        status = FinalStatus(status_text)
    except ValueError:
        allowed = ", ".join(s.value for s in FinalStatus)
        raise TraceFormatError(path, line, "final_status", f"{status_text!r} is not one of {allowed}") from None
    attempts = int(_number(path, line, "attempts", get("attempts", "1"), int))
    failed_text = get("failed_attempts_s")
    if failed_text:
        failed = tuple(
            float(_number(path, line, "failed_attempts_s", t, float)) for t in failed_text.split(";")
        )
        if len(failed) != attempts - 1:
            raise TraceFormatError(
                path, line, "failed_attempts_s",
                f"lists {len(failed)} runtimes but attempts={attempts} implies {attempts - 1}",
            )
    else:
        # Attempts without recorded runtimes: assume each failed attempt ran as long as the last one.
        failed = (duration,) * max(0, attempts - 1)
    type_speed = None
    speed_text = get("type_speed")
    if speed_text:
        pairs = []
        for part in speed_text.split(";"):
            name, sep, value = part.partition("=")
            if not sep:
                raise TraceFormatError(path, line, "type_speed", f"expected TYPE=SPEED, got {part!r}")
            pairs.append((name.strip(), float(_number(path, line, "type_speed", value, float))))
        type_speed = tuple(pairs)
    min_l = get("min_learners")
    max_l = get("max_learners")
    try:
        return JobSpec(
            job_id=get("job_id"),
            tenant=get("tenant", "default"),
            user=get("user"),
            submit_time_s=float(_number(path, line, "submit_time_s", get("submit_time_s"), float)),
            learners=learners,
            gpus_per_learner=int(_number(path, line, "gpus_per_learner", get("gpus_per_learner"), int)),
            cpus_per_learner=float(_number(path, line, "cpus_per_learner", get("cpus_per_learner", "0"), float)),
            mem_gb_per_learner=float(
                _number(path, line, "mem_gb_per_learner", get("mem_gb_per_learner", "0"), float)
            ),
            duration_s=duration,
            model=get("model"),
            priority=int(_number(path, line, "priority", get("priority", "0"), int)),
            final_status=status,
            failed_attempts_s=failed,
            min_learners=int(_number(path, line, "min_learners", min_l, int)) if min_l else None,
            max_learners=int(_number(path, line, "max_learners", max_l, int)) if max_l else None,
            type_speed=type_speed,
        )
    except ValueError as exc:
        if isinstance(exc, TraceFormatError):
            raise
        raise TraceFormatError(path, line, None, str(exc)) from None


def _fast_reader(idx: dict[str, int]) -> Callable[[list[str]], JobSpec]:
    """A reader of the common case, a well-formed row, for one header: the columns are looked up once, not
    per row and field. Any surprise raises ValueError (or KeyError) and the caller re-reads the row with
    _row_to_job, which names the field."""
    width = len(idx)
    # An optional column the header lacks reads as the empty string: a spare last field of every row.
    missing = -1
    opt = {c: idx.get(c, missing) for c in ("tenant", "user", "cpus_per_learner", "mem_gb_per_learner", "model",
                                            "priority", "final_status", "attempts", "failed_attempts_s",
                                            "type_speed", "min_learners", "max_learners")}
    tenant, user, cpus, mem, model, prio, status, attempts_i, failed_i, speed_i, min_i, max_i = opt.values()
    job_id, submit, learners, gpl, dur = (idx[c] for c in REQUIRED)
    # A status as the file spells it (empty: Pass); a padded one is the careful reader's (KeyError).
    statuses = {"": FinalStatus.PASS, **{s.value: s for s in FinalStatus}}

    def read(row: list[str]) -> JobSpec:
        if len(row) != width:
            raise ValueError("irregular row")
        row.append("")  # index -1: the empty field of a column the header lacks (the row is the reader's own)
        duration = float(row[dur])
        attempts = int(row[attempts_i] or "1")
        failed_text = row[failed_i]
        failed = tuple(map(float, failed_text.split(";"))) if failed_text else (duration,) * (attempts - 1)
        if len(failed) != attempts - 1 or row[speed_i] or row[min_i] or row[max_i]:
            raise ValueError("not the common case")
        # JobSpec's fields in their order, positionally (117,000 rows: keywords cost a tenth of the load):
        # job_id, tenant, submit_time_s, learners, gpus_per_learner, duration_s, user, cpus_per_learner,
        # mem_gb_per_learner, model, priority, final_status, failed_attempts_s.
        return JobSpec(row[job_id].strip(), (row[tenant] or "default").strip(), float(row[submit]),
                       int(row[learners]), int(row[gpl]), duration, row[user].strip(), float(row[cpus] or "0"),
                       float(row[mem] or "0"), row[model].strip(), int(row[prio] or "0"), statuses[row[status]],
                       failed)

    return read


def read_csv(path: str | Path) -> Workload:
    """Read a canonical CSV. A malformed row raises TraceFormatError naming line and field."""
    name = str(path)
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise TraceFormatError(name, 1, missing[0], f"header lacks required column(s) {missing}; "
                                   f"the canonical columns are {', '.join(CONTRACT_COLUMNS)}")
        fast_row = _fast_reader({h: i for i, h in enumerate(header)})
        try:
            # The common case, every row one the fast reader takes: the loop over the rows runs in C (blank
            # lines skipped), a tenth of a 117,000-job load less than a loop of Python.
            jobs = list(map(fast_row, filter(None, reader)))
        except (ValueError, KeyError):
            # Some row is not: read them all again, one at a time, to name what is wrong or read the row
            # carefully.
            f.seek(0)
            reader = csv.reader(f)
            next(reader)
            jobs = _read_rows(name, header, reader, fast_row)
    return Workload(jobs, LoadReport(source=name, read=len(jobs)))


def _read_rows(name: str, header: list[str], reader: Reader, fast_row: Callable[[list[str]], JobSpec]
               ) -> list[JobSpec]:
    """Each row by the fast reader where it can, else by the careful one, which names the line and field of a
    malformed row."""
    jobs = []
    for row in reader:
        if not row:
            continue
        width = len(row)  # before fast_row(), which appends to the row
        try:
            jobs.append(fast_row(row))
        except (ValueError, KeyError):
            if width != len(header):
                raise TraceFormatError(name, reader.line_num, None,
                                       f"has {width} fields, the header has {len(header)}") from None
            jobs.append(_row_to_job(name, reader.line_num, dict(zip(header, row, strict=False))))
    return jobs
