"""Format detection, dispatch, bundled samples and the canonical CSV round trip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadmaster.core.workload import Workload
from loadmaster.traces import (
    FORMATS,
    SAMPLES,
    TraceFormatError,
    detect_format,
    load_workload,
    read_csv,
    write_csv,
)


def test_detects_the_real_files(philly_log: Path, gavel_trace: Path, gavel_vc_folder: Path,
                                alibaba_pods: Path) -> None:
    assert detect_format(philly_log) == "philly"
    assert detect_format(gavel_trace) == "gavel"
    assert detect_format(gavel_vc_folder) == "gavel-vc"
    assert detect_format(gavel_vc_folder / "0e4a51.trace") == "gavel-vc"
    assert detect_format(alibaba_pods) == "alibaba"


def test_detection_reads_content_not_extension(tmp_path: Path, gavel_trace: Path, philly_log: Path) -> None:
    disguised = tmp_path / "jobs.csv"
    shutil.copy(gavel_trace, disguised)
    assert detect_format(disguised) == "gavel"
    other = tmp_path / "log.trace"
    other.write_text(philly_log.read_text()[:5000])
    assert detect_format(other) == "philly"


def test_detects_canonical(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    write_csv(load_workload("sample:gavel").jobs[:5], path)
    assert detect_format(path) == "canonical"
    assert len(load_workload(str(path))) == 5


def test_undetectable_lists_formats_and_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "mystery.txt"
    path.write_text("hello, world\n")
    with pytest.raises(TraceFormatError) as err:
        load_workload(str(path))
    for fmt in FORMATS:
        assert fmt in str(err.value)
    assert "--format" in str(err.value)


def test_unknown_format_name(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"unknown format 'slurm'.*--format"):
        load_workload(str(tmp_path), fmt="slurm")


def test_machine_list_is_not_a_workload(philly_machines: Path) -> None:
    with pytest.raises(TraceFormatError, match="cluster spec"):
        load_workload(str(philly_machines))


def test_missing_path() -> None:
    with pytest.raises(TraceFormatError, match="no such file"):
        load_workload("/nonexistent/trace.json")


def test_explicit_format_wins(gavel_vc_folder: Path) -> None:
    with pytest.raises(TraceFormatError, match="--format gavel-vc"):
        load_workload(str(gavel_vc_folder / "795a4c.trace"), fmt="gavel")


def test_folder_loads_as_one_workload(gavel_vc_folder: Path) -> None:
    assert len(load_workload(str(gavel_vc_folder))) == 15264


# ------------------------------------------------------------------------------------------- samples


def test_samples_load_without_shared_data() -> None:
    assert set(SAMPLES) == {"gavel", "philly"}
    gavel = load_workload("sample:gavel")
    assert len(gavel) == 1000 and "gavel_throughputs_isolated.json" in gavel.report.notes[0]
    philly = load_workload("sample:philly")
    assert len(philly) == 600 and philly.report.skipped_total == 0
    assert philly.jobs[0].submit_time_s == 0.0


def test_gavel_sample_matches_the_full_throughputs(gavel_trace: Path) -> None:
    """The trimmed throughput table must give the same jobs as Gavel's full file."""
    assert load_workload("sample:gavel").jobs == load_workload(str(gavel_trace)).jobs


def test_philly_sample_is_the_first_600_jobs(philly_workload: Workload) -> None:
    assert load_workload("sample:philly").jobs == philly_workload.jobs[:600]


def test_unknown_sample() -> None:
    with pytest.raises(TraceFormatError, match="sample:gavel"):
        load_workload("sample:nope")


# ------------------------------------------------------------------------------------ canonical CSV


def _round_trip(w: Workload, tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    assert write_csv(w.jobs, path) == len(w)
    assert read_csv(path).jobs == w.jobs


def test_round_trip_samples(tmp_path: Path) -> None:
    for name in SAMPLES:
        _round_trip(load_workload(f"sample:{name}"), tmp_path)


def test_round_trip_real_traces(tmp_path: Path, philly_workload: Workload, gavel_vc_workload: Workload,
                                alibaba_workload: Workload) -> None:
    for w in (philly_workload, gavel_vc_workload, alibaba_workload):
        _round_trip(w, tmp_path)
