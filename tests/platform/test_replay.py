"""A trace replayed as real jobs (platform/replay.py) and `loadmaster demo`, the README's main command.

The planning is checked on the bundled samples; the demo itself runs end to end as a user runs it: a real
server in the CLI's process, SQLite, the local executor, stand-in learners as real processes, then the
simulator on the same jobs."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.platform.replay import ReplayError, _quotas, manifest_of, plan_replay
from loadmaster.runtime import synthetic
from loadmaster.traces import load_cluster, load_workload
from tests.e2e.harness import clean_env, processes_under

PHILLY = load_workload("sample:philly")


def test_plan_keeps_the_first_jobs_that_fit_and_compresses_time_by_one_factor() -> None:
    cluster = load_cluster("2x8")
    replay = plan_replay("sample:philly", PHILLY, cluster, jobs=25, median_work_s=3.0, max_work_s=1e9,
                         min_work_s=0.0)
    chosen = replay.workload.jobs
    assert len(chosen) == 25
    assert all(j.gpus <= 16 and j.gpus_per_learner <= 8 for j in chosen)
    fitting = [j for j in PHILLY.jobs if j.gpus <= 16][:25]
    assert [j.job_id for j in chosen] == [j.job_id for j in fitting]
    assert replay.skipped == PHILLY.jobs.index(fitting[-1]) + 1 - 25
    durations = sorted(j.duration_s for j in chosen)
    assert durations[len(durations) // 2] == pytest.approx(3.0)
    original = {j.job_id: j for j in fitting}
    for job in chosen:  # arrivals and run times shrink by the same factor: the load is the trace's
        source = original[job.job_id]
        assert job.duration_s * replay.speedup == pytest.approx(source.duration_s)
        assert job.submit_time_s * replay.speedup == pytest.approx(source.submit_time_s - fitting[0].submit_time_s)
        assert job.final_status is source.final_status and job.tenant == source.tenant
    assert sum(replay.tenants.values()) == cluster.total_gpus
    assert set(replay.tenants) == {j.tenant for j in chosen} and min(replay.tenants.values()) >= 1


def test_plan_clips_run_times_and_refuses_what_cannot_be_replayed() -> None:
    cluster = load_cluster("1x4")
    replay = plan_replay("sample:philly", PHILLY, cluster, jobs=10, median_work_s=2.0, min_work_s=1.0,
                         max_work_s=5.0)
    assert all(1.0 <= j.duration_s <= 5.0 for j in replay.workload.jobs)
    assert all(j.gpus <= 4 for j in replay.workload.jobs)
    with pytest.raises(ReplayError, match="--jobs 0"):
        plan_replay("x", PHILLY, cluster, jobs=0, median_work_s=1.0)
    with pytest.raises(ReplayError, match="--median-work"):
        plan_replay("x", PHILLY, cluster, jobs=1, median_work_s=0.0)
    with pytest.raises(ReplayError, match="larger --nodes"):
        plan_replay("x", PHILLY, load_cluster("1x1"), jobs=5, median_work_s=1.0)


def test_a_failed_job_of_the_trace_fails_its_stand_in() -> None:
    replay = plan_replay("sample:philly", PHILLY, load_cluster("2x8"), jobs=20, median_work_s=1.0)
    failed = next(j for j in replay.workload.jobs if j.final_status is not FinalStatus.PASS)
    passed = next(j for j in replay.workload.jobs if j.final_status is FinalStatus.PASS)
    assert manifest_of(failed, "python")["command"][-1] == "--fail"
    manifest = manifest_of(passed, "python")
    assert manifest["command"][:3] == ["python", "-m", "loadmaster.runtime.synthetic"]
    assert float(manifest["command"][4]) == pytest.approx(passed.duration_s, abs=1e-3)
    assert manifest["learners"] == passed.learners and manifest["resources"]["gpus"] == passed.gpus_per_learner


def test_stand_in_learner_rejects_bad_arguments() -> None:
    with pytest.raises(SystemExit) as exit_:
        synthetic.main(["--work-s", "0"])
    assert exit_.value.code == 2


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadmaster.cli.main", "demo", *args], cwd=tmp_path,
                          env=clean_env({"COLUMNS": "200"}), capture_output=True, text=True, timeout=300)


def test_demo_replays_the_bundled_trace_live_and_beside_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _demo(tmp_path, "--jobs", "6", "--median-work", "1", "--nodes", "1x8", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    live, sim = summary["live"], summary["simulated"]
    assert live["jobs"] == sim["jobs"] == 6
    # Every job ended, each as the trace recorded it and as the simulator says.
    assert live["completed"] + live["failed"] == 6
    assert (live["completed"], live["failed"]) == (sim["completed"], sim["failed"])
    assert 0 < live["gpu_utilization"] <= 1 and live["makespan_s"] > 0
    with open(out / "jobs.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and all(r["status"] in ("COMPLETED", "FAILED") for r in rows)
    assert all(r["status"] == r["sim_status"] for r in rows)
    assert all(float(r["start_s"]) >= float(r["submit_s"]) for r in rows)
    assert "live platform vs simulator" in done.stdout
    assert processes_under(out / "server") == [], "a learner outlived its demo"


def test_demo_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    for args, needle in ((["--out", "taken"], "--out"), (["--trace", "nope.csv"], "nope.csv"),
                         (["--policy", "bogus"], "--policy"), (["--nodes", "zz"], "--nodes")):
        done = _demo(tmp_path, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert needle in done.stderr and "Traceback" not in done.stderr + done.stdout


@given(st.lists(st.tuples(st.sampled_from("abcdefghij"), st.integers(1, 8), st.floats(1.0, 1e6)), min_size=1,
                max_size=40), st.integers(1, 64))
def test_quotas_add_up_to_the_cluster(jobs: list[tuple[str, int, float]], gpus: int) -> None:
    specs = [JobSpec(f"j{i}", tenant, 0.0, 1, g, d) for i, (tenant, g, d) in enumerate(jobs)]
    quotas = _quotas(specs, gpus)
    assert sum(quotas.values()) == gpus and set(quotas) == {t for t, _, _ in jobs}
    if len(quotas) <= gpus:
        assert min(quotas.values()) >= 1
