"""Gavel trace loaders (10-field generated traces, 7-field per-VC traces) and throughput lookup."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from loadmaster.core.workload import Workload
from loadmaster.traces import TraceFormatError, gavel, samples

TRANSFORMER = "Transformer (batch size 128)"


def _line10(job_type: str = TRANSFORMER, steps: str = "1000", scale: str = "1", arrival: str = "0",
            priority: str = "1") -> str:
    return "\t".join([job_type, "python3 train.py", "translation", "-step", "1", steps, scale, priority,
                      "-1.000000", arrival])


def _line7(job_type: str = TRANSFORMER, steps: str = "1000", arrival: str = "0.0", scale: str = "1") -> str:
    return "\t".join([job_type, "cd %s && python3 train.py", "-step", "1", steps, arrival, scale])


def _throughputs(tmp_path: Path, entries: dict[str, dict[str, float]]) -> Path:
    """A simulation_throughputs.json: gpu_type -> {"('TYPE', SCALE)": steps/s}."""
    raw = {g: {k: {"null": v, "('other', 1)": [0.1, 0.1]} for k, v in e.items()} for g, e in entries.items()}
    path = tmp_path / gavel.THROUGHPUTS_NAME
    path.write_text(json.dumps(raw))
    return path


def _trace(tmp_path: Path, *lines: str, name: str = "jobs.trace") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------ real data


def test_generated_trace(gavel_trace: Path) -> None:
    w = gavel.load(gavel_trace)
    assert len(w) == 1000 and w.report.skipped_total == 0
    assert w.tenants == ["default"]
    first = w.jobs[0]
    assert first.job_id == "0" and first.submit_time_s == 0.0
    # Gavel generated total_steps = 3600 s x the V100 throughput, so the fastest-type duration is exact.
    assert first.duration_s == 3600.0
    assert first.model == TRANSFORMER and first.priority == 1
    assert dict(first.type_speed or ()) == {"k80": 0.1802, "p100": 0.5644, "v100": 1.0}
    assert Counter(j.learners for j in w.jobs) == {1: 786, 2: 78, 4: 136}
    assert all(j.gpus_per_learner == 1 for j in w.jobs)
    assert not any("scale_factor) the throughput table" in n for n in w.report.notes)  # all measured
    assert str(gavel_trace.parent / gavel.THROUGHPUTS_NAME) in w.report.notes[0]


def test_per_vc_folder(gavel_vc_workload: Workload) -> None:
    w = gavel_vc_workload
    assert len(w) == 15264 and w.report.read == 15264 and w.report.skipped_total == 0
    assert len(w.tenants) == 15
    assert Counter(j.tenant for j in w.jobs)["ee9e8c"] == 2000
    assert w.jobs[0].submit_time_s == 0.0
    assert max(j.learners for j in w.jobs) == 64
    # Scale factors above Gavel's measured 8 (and unmeasured ones such as ('A3C', 4)) are extrapolated.
    assert any("1548 jobs use a (job_type, scale_factor)" in n for n in w.report.notes)


def test_per_vc_job_ids_carry_the_tenant(gavel_vc_workload: Workload) -> None:
    ids = {j.job_id for j in gavel_vc_workload.jobs}
    assert "0e4a51-0" in ids and "ee9e8c-1999" in ids


def test_single_per_vc_file(gavel_vc_folder: Path) -> None:
    w = gavel.load(gavel_vc_folder / "795a4c.trace")
    assert [j.job_id for j in w.jobs] == ["795a4c-0", "795a4c-1", "795a4c-2"]
    assert w.tenants == ["795a4c"]


# ------------------------------------------------------------------------------------- small fixtures


def test_duration_and_speeds_from_the_fastest_type(tmp_path: Path) -> None:
    _throughputs(tmp_path, {"v100": {f"('{TRANSFORMER}', 1)": 10.0}, "k80": {f"('{TRANSFORMER}', 1)": 2.5}})
    (job,) = gavel.load(_trace(tmp_path, _line10(steps="1000", priority="5"))).jobs
    assert job.duration_s == 100.0
    assert job.type_speed == (("k80", 0.25), ("v100", 1.0))
    assert job.priority == 5


def test_unconsolidated_entries_are_not_gpu_types(tmp_path: Path) -> None:
    key = f"('{TRANSFORMER}', 1)"
    _throughputs(tmp_path, {"v100": {key: 10.0}, "v100_unconsolidated": {key: 50.0}})
    (job,) = gavel.load(_trace(tmp_path, _line10())).jobs
    assert job.type_speed == (("v100", 1.0),)


def test_unmeasured_scale_factor_is_extrapolated(tmp_path: Path) -> None:
    _throughputs(tmp_path, {"v100": {f"('{TRANSFORMER}', 1)": 10.0, f"('{TRANSFORMER}', 4)": 20.0}})
    w = gavel.load(_trace(tmp_path, _line10(steps="4000", scale="16")))
    (job,) = w.jobs
    assert job.learners == 16
    assert job.duration_s == 4000 / (20.0 * 16 / 4)
    assert any("1 jobs use a (job_type, scale_factor)" in n for n in w.report.notes)


def test_unknown_job_type_names_line_and_field(tmp_path: Path) -> None:
    _throughputs(tmp_path, {"v100": {f"('{TRANSFORMER}', 1)": 10.0}})
    with pytest.raises(TraceFormatError) as err:
        gavel.load(_trace(tmp_path, _line10(), _line10(job_type="Mystery")))
    assert (err.value.line, err.value.field) == (2, "job_type")


def test_scale_factor_below_every_measured_one(tmp_path: Path) -> None:
    _throughputs(tmp_path, {"v100": {f"('{TRANSFORMER}', 2)": 10.0}})
    with pytest.raises(TraceFormatError) as err:
        gavel.load(_trace(tmp_path, _line10(scale="1")))
    assert (err.value.line, err.value.field) == (1, "scale_factor")


def test_bundled_throughputs_when_none_beside(tmp_path: Path) -> None:
    w = gavel.load(_trace(tmp_path, _line10()))
    assert str(samples.data_path("gavel", "gavel_throughputs_isolated.json")) in w.report.notes[0]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (_line10(steps="many"), "total_steps"),
        (_line10(scale="two"), "scale_factor"),
        (_line10(scale="0"), "scale_factor"),
        (_line10(arrival="noon"), "arrival_time"),
        (_line10(priority="1.5"), "priority_weight"),
    ],
)
def test_bad_values_name_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    with pytest.raises(TraceFormatError) as err:
        gavel.load(_trace(tmp_path, _line10(), _line10(), line))
    assert (err.value.line, err.value.field) == (3, field)


def test_wrong_field_count(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError) as err:
        gavel.load(_trace(tmp_path, _line10(), "A3C\tpython3 main.py\t1"))
    assert err.value.line == 2
    assert "3 tab-separated fields" in str(err.value)


def test_explicit_variant_mismatch_suggests_the_other(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="--format gavel-vc"):
        gavel.load(_trace(tmp_path, _line7()), variant="gavel")


def test_folder_merges_files_with_tenant_per_file(tmp_path: Path) -> None:
    _trace(tmp_path, _line7(arrival="100"), _line7(arrival="200"), name="vcA.trace")
    _trace(tmp_path, _line7(arrival="50"), name="vcB.trace")
    w = gavel.load(tmp_path)
    assert [(j.job_id, j.tenant, j.submit_time_s) for j in w.jobs] == [
        ("vcB-0", "vcB", 0.0), ("vcA-0", "vcA", 50.0), ("vcA-1", "vcA", 150.0),
    ]
    assert all(j.priority == 1 for j in w.jobs)  # Gavel's default weight where the trace has none


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"no \*\.trace"):
        gavel.load(tmp_path)
