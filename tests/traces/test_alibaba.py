"""Alibaba gpu-v2023 pod list and node list loaders."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from loadmaster.core.job import FinalStatus
from loadmaster.core.workload import Workload
from loadmaster.traces import TraceFormatError, alibaba
from loadmaster.traces.clusters import RACK_SIZE
from tests.helpers import counting

HEADER = ",".join(alibaba.POD_COLUMNS)


def _pods(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return path


# ------------------------------------------------------------------------------------------ real data


def test_pod_list_counts(alibaba_workload: Workload) -> None:
    w = alibaba_workload
    assert w.report.read == 8152
    assert w.report.skipped == {alibaba.SKIP_PENDING: 897}
    assert len(w) == 8152 - 897
    statuses = Counter(j.final_status for j in w.jobs)
    assert statuses == {FinalStatus.PASS: 192 + 5193, FinalStatus.FAILED: 1870}
    assert w.tenants == ["BE", "Burstable", "Guaranteed", "LS"]
    assert Counter(j.gpus for j in w.jobs)[0] == 1052  # CPU-only pods, kept
    notes = "\n".join(w.report.notes)
    assert "2573 pods ask for a fraction of one GPU" in notes
    assert "5193 pods were Running" in notes and "34 of them end exactly at the trace end" in notes


def test_pod_fields(alibaba_workload: Workload) -> None:
    first = next(j for j in alibaba_workload.jobs if j.job_id == "openb-pod-0000")
    assert (first.tenant, first.submit_time_s, first.duration_s) == ("LS", 0.0, 12537496.0)
    assert (first.learners, first.gpus_per_learner, first.cpus_per_learner, first.mem_gb_per_learner) == (
        1, 1, 12.0, 16.0,
    )


def test_pod_list_loads_in_one_pass(alibaba_pods: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast by construction (what a wall-clock bound checked, and a loaded machine broke): the file is read
    once, row by row, and each row parsed once."""
    calls: Counter[str] = Counter()

    with alibaba_pods.open() as f:
        rows = sum(1 for _ in f) - 1  # the header
    monkeypatch.setattr(alibaba, "_records", counting(calls, "records", alibaba._records))
    monkeypatch.setattr(alibaba, "_parse_pod", counting(calls, "parse", alibaba._parse_pod))
    workload = alibaba.load(alibaba_pods)
    assert calls == {"records": 1, "parse": rows} and workload.report.read == rows > 100


def test_node_list(alibaba_nodes: Path) -> None:
    cluster = alibaba.load_node_list(alibaba_nodes)
    assert len(cluster.nodes) == 1213 and cluster.total_gpus == 6212
    g2 = next(n for n in cluster.nodes if n.gpu_type == "G2")
    assert (g2.gpus, g2.cpus, g2.mem_gb) == (8, 96.0, 384.0)
    racks = Counter(n.rack for n in cluster.nodes)
    assert max(racks.values()) <= RACK_SIZE
    # rack members are consecutive node indices, so index-order placers keep locality
    seen: list[str] = []
    for n in cluster.nodes:
        if not seen or seen[-1] != n.rack:
            assert n.rack not in seen
            seen.append(n.rack)


# ------------------------------------------------------------------------------------- small fixtures


def test_phases_and_sharing(tmp_path: Path) -> None:
    w = alibaba.load(_pods(
        tmp_path,
        "p0,4000,2048,1,500,,BE,Succeeded,10,110,20",
        "p1,8000,4096,2,1000,,LS,Failed,15,75,15",
        "p2,1000,1024,1,1000,,LS,Pending,30,40,",
        "p3,1500,1536,0,0,V100M16,LS,Running,40,100,50",
    ))
    jobs = {j.job_id: j for j in w.jobs}
    assert set(jobs) == {"p0", "p1", "p3"}
    assert (jobs["p0"].submit_time_s, jobs["p0"].duration_s, jobs["p0"].gpus) == (0.0, 90.0, 1)
    assert jobs["p1"].final_status is FinalStatus.FAILED and jobs["p1"].gpus_per_learner == 2
    assert jobs["p3"].final_status is FinalStatus.PASS and jobs["p3"].mem_gb_per_learner == 1.5
    assert w.report.skipped == {alibaba.SKIP_PENDING: 1}
    notes = "\n".join(w.report.notes)
    assert "1 pods ask for a fraction" in notes and "1 pods restrict GPU types" in notes


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("p1,lots,2048,1,1000,,BE,Succeeded,10,110,20", "cpu_milli"),
        ("p1,4000,2048,1,1000,,BE,Sleeping,10,110,20", "pod_phase"),
        ("p1,4000,2048,1,1000,,BE,Succeeded,-5,110,20", "creation_time"),
        ("p1,4000,2048,1,1000,,BE,Succeeded,10,110", None),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path: Path, row: str, field: str | None) -> None:
    with pytest.raises(TraceFormatError) as err:
        alibaba.load(_pods(tmp_path, "p0,4000,2048,1,1000,,BE,Succeeded,10,110,20", row))
    assert (err.value.line, err.value.field) == (3, field)


def test_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER.replace(",qos", "") + "\n")
    with pytest.raises(TraceFormatError) as err:
        alibaba.load(path)
    assert (err.value.line, err.value.field) == (1, "qos")
