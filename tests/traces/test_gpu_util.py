"""Per-GPU utilisation from a cluster_gpu_util log joined to the hand-built job log."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadmaster.cli.main import app
from loadmaster.core.job import JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces import TraceFormatError, philly
from loadmaster.traces.analysis import analyze
from loadmaster.traces.gpu_util import per_job_utilization
from loadmaster.traces.history import History
from loadmaster.traces.report import render
from tests.traces.analysis_fixtures import HAND_TRACE, T0, hand_cluster, stamp, write_log

HEADER = "time,machineId," + ",".join(f"gpu{i}_util" for i in range(8)) + ","
# Every GPU of m1 runs at 80%; m2's gpu0-1 at 20% and gpu2-3 at 60%; m3's at 40%, except gpu3 reporting NA
# at 3,060 s (J7 holds it then). m9 holds no job of the log.
LEVELS = {"m1": [80] * 8, "m2": [20, 20, 60, 60, 0, 0, 0, 0], "m3": [40] * 8, "m9": [99] * 8}


def write_util(path: Path) -> Path:
    lines = [HEADER]
    for t in range(0, 6600, 60):
        for machine, levels in LEVELS.items():
            cells = [("NA" if (machine, t, g) == ("m3", 3060, 3) else f"{v:.1f}") for g, v in enumerate(levels)]
            lines.append(f"{stamp(t)} PDT,{machine}," + ",".join(cells) + ",")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def hand(tmp_path: Path) -> tuple[History, Path]:
    return philly.load_history(write_log(tmp_path / "hand.json", HAND_TRACE)), write_util(tmp_path / "util.csv")


def test_each_gpu_minute_goes_to_the_job_holding_that_gpu(hand: tuple[History, Path]) -> None:
    history, util = hand
    assert history.origin_s == (T0 - T0.replace(year=1970, month=1, day=1)).total_seconds()
    u = per_job_utilization(history, util)
    assert u["available"] and u["log_rows"] == 110 * 4
    # Samples at whole minutes, attempt start included and end excluded: J1 68, J2 16, J3 68, J4 100, J5 32,
    # J6 32, J7 17 x 8 - 1 NA = 135, J8 2, J9's second attempt 10 (its first logged no GPUs).
    assert u["gpu_minutes"] == 463
    assert u["mean_by_gpus"]["8"] == pytest.approx((68 * 80 + 67 * 40) / 135)
    assert u["mean_by_gpus"]["4"] == pytest.approx((68 * 80 + 16 * 20 + 16 * 60 + 16 * 60 + 16 * 40) / 132)
    failed = u["by_status"]["Failed"]["2-4"]
    assert (failed["n"], failed["mean"], failed["p50"]) == (2, 80, 80)
    passed_8 = u["by_status"]["Pass"]["5-8"]
    assert (passed_8["p10"], passed_8["p90"], passed_8["max"]) == (40, 80, 80)
    assert passed_8["curve"][0] == [40.0, 0.0] and passed_8["curve"][-1] == [80.0, 1.0]


def test_the_analysis_and_report_carry_it(hand: tuple[History, Path]) -> None:
    history, util = hand
    a = analyze(history, hand_cluster(), gpu_util=util)
    assert a["utilization"]["per_gpu_compute"]["gpu_minutes"] == 463
    html = render(a)
    assert "GPU utilisation, Pass jobs" in html and "60.1%" in html  # the 8-GPU mean


def test_without_placements_there_is_nothing_to_join(tmp_path: Path) -> None:
    w = Workload([JobSpec("a", "t", 0, 1, 1, 60.0)], LoadReport("mem"))
    u = per_job_utilization(History.untimed(w), write_util(tmp_path / "u.csv"))
    assert u["available"] is False and "which GPUs" in u["why"]


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("when,machine,gpu0_util\n", 1, "time"),
        ("time,machineId,util\n", 1, None),
        (HEADER + "\n2017-10-01 00:00:00 PDT,m1,fast,0,0,0,0,0,0,0,\n", 2, "gpu0_util"),
        (HEADER + "\nyesterday,m1,1,0,0,0,0,0,0,0,\n", 2, "time"),
    ],
)
def test_a_malformed_log_names_line_and_field(hand: tuple[History, Path], tmp_path: Path, text: str, line: int,
                                              field: str | None) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        per_job_utilization(hand[0], bad)
    assert (err.value.line, err.value.field) == (line, field)


def test_cli(hand: tuple[History, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    log = hand[0].workload.report.source
    result = runner.invoke(app, ["trace", "analyze", log, "--cluster", "3x4", "--gpu-util", str(hand[1]), "--json"])
    assert result.exit_code == 0, result.output
    missing = runner.invoke(app, ["trace", "analyze", log, "--gpu-util", str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2 and "--gpu-util: no such file" in " ".join(missing.output.split())
