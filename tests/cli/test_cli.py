"""The CLI as a user drives it: real files in, real files out, clean errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadmaster.cli.main import app

runner = CliRunner()
SUMMARY_KEYS = {
    "jobs", "completed", "failed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_delay_s",
    "gpu_utilization", "max_rho", "median_rho", "jain_fairness", "preemptions", "wall_time_s",
    "fair_share_delay_s", "fragmentation_delay_s", "gpu_hours_failed_attempts",
}


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and everything printed (stdout and stderr)."""
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def invoke_json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_sim_run_on_the_bundled_sample_writes_every_output(tmp_path: Path) -> None:
    code, out = invoke("sim", "run", "--trace", "sample:philly", "--cluster", "philly", "--policy", "fair",
                       "--out", str(tmp_path))
    assert code == 0, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["jobs"] == 600
    assert summary["completed"] + summary["failed"] + summary["cancelled"] + summary["rejected"] + \
        summary["unfinished"] == summary["jobs"]
    assert 0 <= summary["gpu_utilization"] <= 1
    rows = list(csv.DictReader((tmp_path / "jobs.csv").open()))
    assert len(rows) == 600
    for name in ("jct_cdf", "queue_delay_cdf", "gpu_utilization"):  # SVG by default: no plotting library
        svg = ET.parse(tmp_path / f"{name}.svg").getroot()
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"
        assert svg.findall(".//{http://www.w3.org/2000/svg}polyline"), name  # the curve is there
        assert "fair/pack" in (tmp_path / f"{name}.svg").read_text()  # and its legend


def test_png_plots_on_request_and_none(tmp_path: Path) -> None:
    code, out = invoke("sim", "run", "--trace", "sample:philly", "--cluster", "philly", "--plots", "png",
                       "--out", str(tmp_path / "png"))
    assert code == 0, out
    for name in ("jct_cdf.png", "queue_delay_cdf.png", "gpu_utilization.png"):
        assert (tmp_path / "png" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out = invoke("sim", "run", "--trace", "sample:philly", "--cluster", "philly", "--plots", "none",
                       "--out", str(tmp_path / "none"))
    assert code == 0, out
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["jobs.csv", "summary.json"]


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / str(i)
        code, text = invoke("sim", "run", "--trace", "sample:philly", "--cluster", "philly", "--retry",
                            "classified", "--seed", "5", "--out", str(out))
        assert code == 0, text
        outs.append(out)
    for name in ("jobs.csv", "jct_cdf.svg", "queue_delay_cdf.svg", "gpu_utilization.svg"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    a, b = (json.loads((o / "summary.json").read_text()) for o in outs)
    a.pop("wall_time_s")
    b.pop("wall_time_s")
    assert a == b


def test_compare_writes_one_table_and_overlaid_plots(tmp_path: Path) -> None:
    summaries = invoke_json("sim", "compare", "--trace", "sample:philly", "--cluster", "philly", "--policy",
                            "fifo,fair", "--retry", "always,classified", "--out", str(tmp_path))
    assert isinstance(summaries, dict)
    assert set(summaries) == {"fifo/pack/always", "fifo/pack/classified", "fair/pack/always",
                              "fair/pack/classified"}
    # Classified retries never spend more GPU-hours on failed attempts than retrying everything.
    assert summaries["fifo/pack/classified"]["gpu_hours_failed_attempts"] <= \
        summaries["fifo/pack/always"]["gpu_hours_failed_attempts"]
    table = (tmp_path / "comparison.md").read_text()
    assert "fifo/pack/always" in table and "avg_jct_s" in table
    assert (tmp_path / "rho_cdf.svg").exists() and (tmp_path / "fair_pack_classified" / "summary.json").exists()


def test_synth_analyze_convert_round_trip(tmp_path: Path) -> None:
    synth = tmp_path / "w.csv"
    code, out = invoke("trace", "synth", "--like", "philly", "--jobs", "500", "--seed", "1", "--out", str(synth))
    assert code == 0, out
    stats = invoke_json("trace", "analyze", str(synth))
    assert isinstance(stats, dict)
    assert stats["jobs"] == 500 and stats["gpus_per_job"]["p50"] == 1
    again = tmp_path / "again.csv"
    code, out = invoke("trace", "convert", str(synth), "--out", str(again))
    assert code == 0, out
    assert again.read_text() == synth.read_text()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["sim", "run", "--policy", "nope"], "--policy"),
        (["sim", "run", "--placement", "tight"], "--placement"),
        (["sim", "run", "--trace", "/no/such/trace.csv"], "/no/such/trace.csv"),
        (["sim", "run", "--cluster", "banana"], "banana"),
        (["sim", "run", "--cluster", "4x"], "4x"),
        (["sim", "compare", "--retry", "sometimes"], "--retry"),
        (["trace", "synth", "--like", "helios", "--out", "x.csv"], "--like"),
        (["sim", "run", "--plots", "jpg"], "--plots"),
        (["trace", "synth", "--load", "0.5", "--out", "x.csv"], "--cluster"),
        (["trace", "synth", "--cluster-gpus", "8", "--out", "x.csv"], "--load"),
        (["trace", "synth", "--cluster", "4x", "--out", "x.csv"], "4x"),
        (["trace", "synth", "--cluster", "8x4", "--cluster-gpus", "8", "--load", "1", "--out", "x.csv"],
         "--cluster-gpus"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], expected: str, tmp_path: Path) -> None:
    code, out = invoke(*args, *(["--out", str(tmp_path / "o")] if args[1] in ("run", "compare") else []))
    assert code == 2, out
    assert expected in out
    assert "Traceback" not in out


def test_synth_for_a_cluster_at_a_load_feeds_sim_run(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    code, out = invoke("trace", "synth", "--like", "philly", "--jobs", "300", "--cluster", "8x4", "--load", "1.3",
                       "--seed", "5", "--out", str(w))
    assert code == 0, out
    assert "offered load 1.3" in out
    summary = invoke_json("sim", "run", "--trace", str(w), "--cluster", "8x4", "--no-plots", "--out",
                          str(tmp_path / "run"))
    assert summary["jobs"] == 300 and summary["rejected"] == 0


def test_malformed_trace_names_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,tenant,submit_time_s,learners,gpus_per_learner,duration_s\n"
                   "a,t,0,1,1,100\n"
                   "b,t,5,two,1,100\n")
    code, out = invoke("sim", "run", "--trace", str(bad), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "line 3" in out and "learners" in out and "Traceback" not in out


def test_the_installed_command_runs_as_a_process(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "sim", "run", "--no-plots", "--json",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["jobs"] == 1000


def test_synth_vcs_writes_quotas_that_sim_run_reads(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    code, out = invoke("trace", "synth", "--jobs", "400", "--cluster", "16x8", "--load", "1.0", "--vcs",
                       "--seed", "2", "--out", str(w))
    assert code == 0, out
    quotas = tmp_path / "w.quotas.yaml"
    assert quotas.exists() and "borrow_limit: 0" in quotas.read_text()
    summary = invoke_json("sim", "run", "--trace", str(w), "--cluster", "16x8", "--quotas", str(quotas),
                          "--policy", "fair", "--no-plots", "--out", str(tmp_path / "run"))
    assert summary["jobs"] == 400 and summary["rejected"] == 0 and summary["fair_share_delay_s"] > 0


def test_synth_vcs_that_borrow_over_one_span_run_under_fair_fifo(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    code, out = invoke("trace", "synth", "--jobs", "400", "--cluster", "16x8", "--load", "1.0", "--vcs",
                       "--borrow-any", "--shared-span", "--seed", "2", "--out", str(w))
    assert code == 0, out
    quotas = tmp_path / "w.quotas.yaml"
    assert "borrow_limit: null" in quotas.read_text()
    summary = invoke_json("sim", "run", "--trace", str(w), "--cluster", "16x8", "--quotas", str(quotas),
                          "--policy", "fair-fifo", "--placement", "locality", "--no-plots",
                          "--out", str(tmp_path / "r"))
    assert summary["jobs"] == 400 and summary["rejected"] == 0
    code, out = invoke("trace", "synth", "--jobs", "10", "--shared-span", "--out", str(w))
    assert code != 0 and "--shared-span" in out


def test_synth_vcs_with_closed_loop_users_runs_under_fair(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    code, out = invoke("trace", "synth", "--jobs", "400", "--cluster", "16x8", "--load", "1.5", "--vcs",
                       "--vc-queue", "2", "--seed", "2", "--out", str(w))
    assert code == 0, out
    summary = invoke_json("sim", "run", "--trace", str(w), "--cluster", "16x8", "--quotas",
                          str(tmp_path / "w.quotas.yaml"), "--policy", "fair", "--no-plots",
                          "--out", str(tmp_path / "run"))
    assert summary["jobs"] == 400 and summary["rejected"] == 0 and summary["fair_share_delay_s"] > 0


def test_sim_run_with_closed_loop_users_holds_jobs_back(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    assert invoke("trace", "synth", "--jobs", "400", "--cluster", "16x8", "--load", "2", "--vcs", "--seed", "2",
                  "--out", str(w))[0] == 0
    args = ("sim", "run", "--trace", str(w), "--cluster", "16x8", "--quotas", str(tmp_path / "w.quotas.yaml"),
            "--policy", "fair", "--no-plots")
    open_loop = invoke_json(*args, "--out", str(tmp_path / "open"))
    closed = invoke_json(*args, "--vc-queue", "2", "--out", str(tmp_path / "closed"))
    assert isinstance(open_loop, dict) and isinstance(closed, dict)
    assert "vc_queue" not in open_loop and closed["vc_queue"] == 2 and closed["jobs"] == 400
    # Users who hold their jobs back while their VC has two queued: jobs wait less once submitted.
    assert closed["jobs_held_by_users"] > 0 and closed["avg_user_hold_s"] > 0
    assert closed["avg_queue_delay_s"] < open_loop["avg_queue_delay_s"]


def test_compare_with_and_without_migration(tmp_path: Path) -> None:
    w = tmp_path / "w.csv"
    assert invoke("trace", "synth", "--jobs", "300", "--cluster", "8x8", "--load", "1.2", "--seed", "1",
                  "--out", str(w))[0] == 0
    runs = invoke_json("sim", "compare", "--trace", str(w), "--cluster", "8x8", "--policy", "fifo",
                       "--migrate", "off,on", "--no-plots", "--out", str(tmp_path / "cmp"))
    assert isinstance(runs, dict)
    assert set(runs) == {"fifo/pack", "fifo/pack/migrate"}
    assert "migrations" not in runs["fifo/pack"] and runs["fifo/pack/migrate"]["migrations"] >= 0
    assert (runs["fifo/pack/migrate"]["fragmentation_delay_s"] <= runs["fifo/pack"]["fragmentation_delay_s"])
    # The table too, where only some runs have the migration and smoke-test keys.
    code, out = invoke("sim", "compare", "--trace", str(w), "--cluster", "8x8", "--policy", "fifo", "--migrate",
                       "off,on", "--smoke-test", "60", "--no-plots", "--out", str(tmp_path / "table"))
    assert code == 0, out
    assert "migrations" in out and "smoke_tests" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["trace", "synth", "--vcs", "--out", "x.csv"], "--vcs"),
        (["trace", "synth", "--quotas-out", "q.yaml", "--out", "x.csv"], "--vcs"),
        (["trace", "synth", "--vc-queue", "2", "--out", "x.csv"], "--vcs"),
        (["sim", "run", "--migrate", "maybe"], "--migrate"),
        (["sim", "run", "--migrate", "on", "--gang", "off"], "--migrate"),
        (["sim", "run", "--smoke-test", "60", "--gang", "off"], "--smoke-test"),
        (["sim", "run", "--smoke-test", "-5"], "--smoke-test"),
        (["sim", "run", "--vc-queue", "0"], "--vc-queue"),
    ],
)
def test_bad_vcs_and_migrate_input_is_one_clear_line(args: list[str], expected: str, tmp_path: Path) -> None:
    code, out = invoke(*args, *(["--out", str(tmp_path / "o")] if args[1] in ("run", "compare") else []))
    assert code == 2, out
    assert expected in out and "Traceback" not in out
