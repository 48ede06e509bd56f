"""Philly cluster_job_log and cluster_machine_list loaders."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loadmaster.core.job import FinalStatus
from loadmaster.core.workload import Workload
from loadmaster.traces import TraceFormatError, philly
from loadmaster.traces.clusters import RACK_SIZE
from tests.helpers import counting


def _job(jobid: str = "j1", status: str = "Pass", submitted: str | None = "2017-10-01 00:00:00",
         attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if attempts is None:
        attempts = [_attempt("2017-10-01 00:01:00", "2017-10-01 01:01:00", [("m1", 4)])]
    return {"status": status, "vc": "vc1", "jobid": jobid, "submitted_time": submitted, "user": "u1",
            "attempts": attempts}


def _attempt(start: str | None, end: str | None, machines: list[tuple[str, int]]) -> dict[str, Any]:
    detail = [{"ip": ip, "gpus": [f"gpu{i}" for i in range(n)]} for ip, n in machines]
    return {"start_time": start, "end_time": end, "detail": detail}


def _write(tmp_path: Path, records: Any) -> Path:
    path = tmp_path / "log.json"
    # One record per line, so that line numbers in errors are easy to check.
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")
    return path


# ------------------------------------------------------------------------------------------ real data


def test_sample_log_keeps_every_job(philly_workload: Workload) -> None:
    w = philly_workload
    assert w.report.read == 4206
    assert w.report.skipped_total == 0
    assert len(w) == 4206
    statuses = Counter(j.final_status for j in w.jobs)
    assert statuses == {FinalStatus.PASS: 2534, FinalStatus.FAILED: 1672}
    assert len(w.tenants) == 11
    assert w.jobs[0].submit_time_s == 0.0
    assert sum(1 for j in w.jobs if j.attempts > 1) == 4206 - 3677
    assert any("79 jobs hold different GPU counts" in n for n in w.report.notes)


def test_sample_log_field_mapping(philly_workload: Workload) -> None:
    jobs = {j.job_id: j for j in philly_workload.jobs}
    first = jobs["application_1506638472019_14199"]  # the upstream README's example job
    assert (first.tenant, first.user, first.final_status) == ("ee9e8c", "ce2f4c", FinalStatus.PASS)
    assert first.failed_attempts_s == (74.0,)  # 01:12:09 -> 01:13:23
    assert first.duration_s == 2 * 86400 + 5 * 3600 + 39 * 60 + 42  # 10-07 01:13:30 -> 10-09 06:53:12
    assert (first.learners, first.gpus_per_learner) == (1, 8)
    uneven = jobs["application_1508364558011_20317"]  # 6+4+1+1 GPUs over four machines
    assert (uneven.learners, uneven.gpus_per_learner) == (12, 1)


def test_sample_log_loads_in_one_pass(philly_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast by construction (what a wall-clock bound checked, and a loaded machine broke): the text is parsed by
    one json.loads, each record is read once, and the search of the text for a record's line (an error's
    path) never runs."""
    calls: Counter[str] = Counter()

    records = len(json.loads(philly_log.read_text()))
    monkeypatch.setattr(philly.json, "loads", counting(calls, "loads", json.loads))
    monkeypatch.setattr(philly, "_parse_job", counting(calls, "parse", philly._parse_job))
    monkeypatch.setattr(philly._Context, "error", counting(calls, "error", philly._Context.error))
    workload = philly.load(philly_log)
    assert calls == {"loads": 1, "parse": records} and workload.report.read == records > 100


def test_machine_list_is_the_real_cluster(philly_machines: Path) -> None:
    cluster = philly.load_machine_list(philly_machines)
    assert len(cluster.nodes) == 552
    assert cluster.total_gpus == 2490
    assert Counter((n.gpus, n.gpu_type) for n in cluster.nodes) == {(2, "12gb"): 321, (8, "24gb"): 231}
    assert {n.cpus for n in cluster.nodes if n.gpus == 8} == {24.0}
    assert {n.mem_gb for n in cluster.nodes if n.gpus == 8} == {500.0}
    per_rack = Counter(n.rack for n in cluster.nodes)
    assert max(per_rack.values()) == RACK_SIZE
    assert len(per_rack) == 21 + 15  # ceil(321 / 16) + ceil(231 / 16)
    assert all(len({n.gpu_type for n in cluster.nodes if n.rack == r}) == 1 for r in per_rack)


# ------------------------------------------------------------------------------------- small fixtures


def test_attempts_and_shape(tmp_path: Path) -> None:
    attempts = [
        _attempt("2017-10-01 00:01:00", "2017-10-01 00:02:00", []),
        _attempt("2017-10-01 00:03:00", "2017-10-01 00:03:30", [("m1", 8)]),
        _attempt("2017-10-01 00:05:00", "2017-10-01 00:15:00", [("m2", 4), ("m3", 4)]),
    ]
    w = philly.load(_write(tmp_path, [_job(attempts=attempts, status="Killed")]))
    (job,) = w.jobs
    assert job.failed_attempts_s == (60.0, 30.0)
    assert job.duration_s == 600.0
    assert (job.learners, job.gpus_per_learner) == (2, 4)
    assert job.final_status is FinalStatus.KILLED


def test_gpus_listed_one_entry_per_gpu_are_added_per_machine(tmp_path: Path) -> None:
    machines = [("m1", 1), ("m2", 1), ("m1", 1), ("m2", 1)]
    attempt = _attempt("2017-10-01 00:01:00", "2017-10-01 00:02:00", machines)
    (job,) = philly.load(_write(tmp_path, [_job(attempts=[attempt])])).jobs
    assert (job.learners, job.gpus_per_learner) == (2, 2)


def test_unloadable_jobs_are_counted_not_dropped(tmp_path: Path) -> None:
    records = [
        _job("ok"),
        _job("never", attempts=[]),
        _job("running", attempts=[_attempt("2017-10-01 00:01:00", None, [("m1", 1)])]),
        _job("blind", attempts=[_attempt("2017-10-01 00:01:00", "2017-10-01 00:02:00", [])]),
        _job("nosubmit", submitted=None),
        _job("backwards", attempts=[_attempt("2017-10-01 00:05:00", "2017-10-01 00:02:00", [("m1", 1)])]),
    ]
    w = philly.load(_write(tmp_path, records))
    assert [j.job_id for j in w.jobs] == ["ok"]
    assert w.report.read == 6
    assert w.report.skipped == {
        philly.SKIP_NO_ATTEMPTS: 1, philly.SKIP_RUNNING: 1, philly.SKIP_NO_DETAIL: 1,
        philly.SKIP_NO_SUBMIT: 1, philly.SKIP_NEGATIVE: 1,
    }


def test_submit_times_start_at_zero(tmp_path: Path) -> None:
    records = [_job("a", submitted="2017-10-01 00:00:10"), _job("b", submitted="2017-10-01 00:00:00")]
    w = philly.load(_write(tmp_path, records))
    assert [(j.job_id, j.submit_time_s) for j in w.jobs] == [("b", 0.0), ("a", 10.0)]


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text('[\n{"jobid": "a"},\n{"jobid": "b" "status": 1}\n]\n')
    with pytest.raises(TraceFormatError) as err:
        philly.load(path)
    assert err.value.line == 3


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status": "Exploded"}, "status"),
        ({"submitted_time": "yesterday"}, "submitted_time"),
        ({"attempts": "none"}, "attempts"),
    ],
)
def test_bad_values_name_line_and_field(tmp_path: Path, change: dict[str, Any], field: str) -> None:
    bad = _job("bad") | change
    with pytest.raises(TraceFormatError) as err:
        philly.load(_write(tmp_path, [_job("ok"), bad]))
    assert err.value.field == field
    assert err.value.line == 3  # '[' on line 1, the good job on line 2
    assert "jobid bad" in str(err.value)


def test_missing_key_is_named(tmp_path: Path) -> None:
    bad = _job("bad")
    del bad["vc"]
    with pytest.raises(TraceFormatError, match="vc"):
        philly.load(_write(tmp_path, [bad]))


def test_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text(json.dumps(_job()))
    with pytest.raises(TraceFormatError, match="JSON list"):
        philly.load(path)


def test_machine_list_racks_by_sku_and_numeric_id(tmp_path: Path) -> None:
    rows = [f"m{i},8, 24GB" for i in range(20)] + ["m100,2, 12GB", "m9x,2, 12GB"]
    path = tmp_path / "machines"
    path.write_text("machineId, number of GPUs, single GPU mem\n" + "\n".join(rows) + "\n")
    cluster = philly.load_machine_list(path)
    by_name = {n.name: n for n in cluster.nodes}
    assert by_name["m2"].rack == by_name["m15"].rack != by_name["m16"].rack  # numeric, not text, order
    assert by_name["m100"].rack != by_name["m0"].rack  # SKUs never share a rack
    assert by_name["m100"].cpus == 6.0


def test_machine_list_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "machines"
    path.write_text("machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,two, 12GB\n")
    with pytest.raises(TraceFormatError) as err:
        philly.load_machine_list(path)
    assert (err.value.line, err.value.field) == (3, "number of GPUs")
