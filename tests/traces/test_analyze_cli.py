"""`loadmaster trace analyze` as a user drives it: real files in, JSON, an HTML file, clean errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadmaster.cli.main import app
from tests.traces.analysis_fixtures import HAND_TRACE, write_log, write_machine_list

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["trace", "analyze", *args])
    return result.exit_code, result.output


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["trace", "analyze", *args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture
def hand_files(tmp_path: Path) -> dict[str, Path]:
    quotas = tmp_path / "quotas.yaml"
    quotas.write_text("tenants:\n  a: {gpus: 4}\n  b: {gpus: 4}\n  c: {gpus: 4}\n  d: {gpus: 12}\n")
    return {"log": write_log(tmp_path / "hand.json", HAND_TRACE),
            "machines": write_machine_list(tmp_path / "machines.csv"), "quotas": quotas}


def test_hand_trace_through_the_cli(hand_files: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "out" / "report.html"
    a = _json(str(hand_files["log"]), "--cluster", str(hand_files["machines"]), "--quotas",
              str(hand_files["quotas"]), "--html", str(report))
    split = a["queueing"]["split"]
    assert split["by_size"]["2-4"]["seconds_by_class"] == {"fair_share": 1400, "fragmentation": 800,
                                                           "locality": 400, "capacity": 0, "unexplained": 500}
    assert split["inputs"]["share_rule"] == f"from {hand_files['quotas']}"
    assert a["cluster"]["gpus"] == 12
    assert report.read_text().startswith("<!doctype html>")


def test_human_output_names_the_default_cluster_and_the_caveat(hand_files: dict[str, Path]) -> None:
    code, out = _run(str(hand_files["log"]))
    assert code == 0, out
    assert "cluster: philly (the default for this trace's format" in out
    assert "queueing delay by job size" in out
    # The hand trace holds a sliver of the 2,490-GPU Philly cluster: the split says it is a lower bound.
    assert "lower bounds" in " ".join(out.split())


def test_a_trace_without_start_times(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    assert runner.invoke(app, ["trace", "synth", "--jobs", "200", "--seed", "2", "--out", str(path)]).exit_code == 0
    code, out = _run(str(path))
    assert code == 0, out
    assert "queueing delay: not available" in " ".join(out.split())
    a = _json(str(path))
    assert a["times"] == "none" and a["queueing"]["available"] is False
    assert a["jobs"] == 200 and a["failures"]["available"]


def test_replay_gives_the_simulators_start_times(tmp_path: Path) -> None:
    trace = tmp_path / "w.csv"
    assert runner.invoke(app, ["trace", "synth", "--jobs", "150", "--seed", "4", "--out", str(trace)]).exit_code == 0
    a = _json(str(trace), "--replay", "fifo/pack", "--cluster", "2x4")
    assert a["times"] == "simulated" and "fifo/pack on" in a["times_how"]
    split = a["queueing"]["split"]
    assert split["classes"] == ["fair_share", "fragmentation", "capacity"]
    assert a["utilization"]["available"] and 0 < a["utilization"]["allocated_mean"] <= 1
    # The same run through `sim run` gives the same queueing delays.
    out = tmp_path / "sim"
    result = runner.invoke(app, ["sim", "run", "--trace", str(trace), "--cluster", "2x4", "--policy", "fifo",
                                 "--placement", "pack", "--no-plots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    delays = sorted(float(r["queue_delay_s"]) for r in csv.DictReader((out / "jobs.csv").open()) if r["queue_delay_s"])
    assert a["queueing"]["overall"]["n"] == len(delays)
    assert a["queueing"]["overall"]["max"] == pytest.approx(delays[-1], rel=1e-5)
    assert a["queueing"]["overall"]["mean"] == pytest.approx(sum(delays) / len(delays), rel=1e-5)
    summary = json.loads((out / "summary.json").read_text())
    assert a["utilization"]["allocated_mean"] == pytest.approx(summary["gpu_utilization"], rel=1e-3)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["/no/such/log.json"], "no such file"),
        (["LOG", "--format", "nope"], "unknown format 'nope'"),
        (["LOG", "--html", "TMP"], "is a folder"),
        (["CSV", "--replay", "fifo"], "--replay needs --cluster"),
        (["LOG", "--replay", "banana/pack"], "unknown policy 'banana'"),
        (["LOG", "--replay", "fifo/tight"], "unknown placement 'tight'"),
        (["LOG", "--quotas", "PARTIAL"], "no share for VC(s) c, d"),
        (["LOG", "--cluster", "banana"], "banana"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], expected: str, hand_files: dict[str, Path],
                                     tmp_path: Path) -> None:
    partial = tmp_path / "partial.yaml"
    partial.write_text("tenants:\n  a: {gpus: 4}\n  b: {gpus: 4}\n")
    canonical = tmp_path / "w.csv"
    canonical.write_text("job_id,tenant,submit_time_s,learners,gpus_per_learner,duration_s\na,t,0,1,1,10\n")
    subst = {"LOG": str(hand_files["log"]), "TMP": str(tmp_path), "PARTIAL": str(partial), "CSV": str(canonical)}
    code, out = _run(*(subst.get(a, a) for a in args))
    assert code == 2, out
    assert expected in " ".join(out.split())
    assert "Traceback" not in out


def test_the_installed_command_on_the_bundled_sample(tmp_path: Path) -> None:
    html = tmp_path / "philly.html"
    proc = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "trace", "analyze", "sample:philly",
                           "--json", "--html", str(html)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)
    assert a["jobs"] == 600 and a["times"] == "recorded" and a["cluster"]["name"] == "philly"
    assert a["queueing"]["split"]["available"] and html.stat().st_size > 10_000


@pytest.mark.parametrize("verb", ["analyze", "synth", "convert"])
def test_help_renders(verb: str) -> None:
    result = runner.invoke(app, ["trace", verb, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
