"""jobs.csv and summary.json against the plain way of making them: the record's properties, delay_classes()
and csv.writer row by row (metrics.py makes both in one pass, for speed)."""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path

import pytest

from loadmaster.core.job import JobStatus
from loadmaster.sim.metrics import JOB_COLUMNS, delay_classes, summarize, write_jobs_csv
from loadmaster.sim.records import JobRecord
from tests.helpers import cluster, job
from tests.sim.test_simulator import run


def _plain_csv(records: list[JobRecord]) -> str:
    def num(x: float | None) -> str:
        return "" if x is None else f"{x:.6g}"

    out = io.StringIO(newline="")
    w = csv.writer(out)
    w.writerow(JOB_COLUMNS)
    for r in records:
        s, d = r.spec, delay_classes(r)
        w.writerow([s.job_id, s.tenant, s.user, s.model, num(s.submit_time_s), s.learners, s.gpus, num(s.duration_s),
                    r.status.value, num(r.first_start_s), num(r.finish_s), num(r.jct_s), num(r.queue_delay_s),
                    num(r.total_wait_s), num(d["fair_share"]), num(d["fragmentation"]), num(d["capacity"]),
                    r.last_wait_reason, r.attempts_run, r.preemptions, r.resizes, num(r.gpu_s / 3600),
                    num(r.gpu_s_failed / 3600), num(r.rho), ";".join(r.failure_categories), r.reject_reason])
    return out.getvalue()


def _records() -> list[JobRecord]:
    # Commas, quotes and line breaks in the trace's text (quoted by csv.writer), failures, a rejection, waits.
    res = run(cluster(2, 4), job("a,b", gpus=4, duration=100), job('q"uote', gpus=4, duration=50),
              job("plain", gpus=2, duration=10, failed_attempts_s=(5.0,)), job("big", gpus=64),
              job("line\nbreak", gpus=1, duration=30), job("carriage\rreturn", gpus=1, duration=20))
    assert any(r.wait_s for r in res.records) and any(r.reject_reason for r in res.records)
    return res.records


def test_jobs_csv_is_what_csv_writer_writes(tmp_path: Path) -> None:
    records = _records()
    # A record still queued and one never started (no times, no rho).
    records.append(JobRecord(job("never,started", gpus=1)))
    write_jobs_csv(records, tmp_path / "jobs.csv")
    assert (tmp_path / "jobs.csv").read_bytes() == _plain_csv(records).encode()


def test_summary_adds_up_as_the_plain_sums() -> None:
    result = run(cluster(2, 4), *(job(f"j{i}", gpus=1 + i % 4, duration=10.0 + i, submit=0.1 * i) for i in range(40)),
                 job("big", gpus=64))
    s = summarize(result, 1.0)
    records = result.records
    finished = [r for r in records if r.finished and r.first_start_s is not None]
    classes = Counter[str]()
    for r in records:
        classes.update(delay_classes(r))
    assert sum(classes.values()) > 0
    assert s["avg_total_wait_s"] == sum(classes.values()) / len(records)
    assert s["fragmentation_delay_s"] == classes["fragmentation"] / len(records)
    assert s["gpu_hours"] == sum(r.gpu_s for r in records) / 3600
    assert s["completed"] == sum(1 for r in records if r.status is JobStatus.COMPLETED)
    assert s["rejected"] == 1 and s["unfinished"] == 0
    assert s["max_rho"] == max(r.rho for r in finished if r.rho is not None)
    reasons = Counter[str]()
    for r in records:
        reasons.update(r.wait_s)
    assert s["wait_by_reason_s"] == dict(sorted(reasons.items()))


def test_rows_stay_in_order_across_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain rows are written a batch at a time; a row that needs quoting writes the batch before it."""
    from loadmaster.sim import metrics

    records = _records() * 3
    records.append(JobRecord(job("never,started", gpus=1)))
    for size in (1, 2, 3, 1000):
        monkeypatch.setattr(metrics, "_BATCH", size)
        write_jobs_csv(records, tmp_path / "jobs.csv")
        assert (tmp_path / "jobs.csv").read_bytes() == _plain_csv(records).encode()


def test_zero_delays_are_written_as_the_float_format_writes_them(tmp_path: Path) -> None:
    """A zero queueing delay and an empty wait are literal "0"s of the row's template: the same text as "%.6g"
    of the difference and the sums, including a first start at -0.0 of a job submitted at 0 ("-0")."""
    records = []
    for submit, first, wait in ((5.0, 5.0, {}), (5, 5, {}), (0.0, 0.0, {}), (0, -0.0, {}), (-0.0, -0.0, {}),
                                (2.5, 7.0, {"capacity": 0.0}), (3.0, 3.0, {"fragmentation": 1.5})):
        r = JobRecord(job(f"j{len(records)}", submit=submit), status=JobStatus.COMPLETED, first_start_s=first,
                      finish_s=first + 10, attempts_run=1, wait_s=dict(wait), ideal_s=10.0)
        records.append(r)
    write_jobs_csv(records, tmp_path / "jobs.csv")
    written = (tmp_path / "jobs.csv").read_bytes()
    assert written == _plain_csv(records).encode()
    assert b",-0," in written and b",0,0,0,0,0," in written
