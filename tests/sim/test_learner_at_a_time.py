"""Learner-at-a-time placement (--gang off): partial gangs hold GPUs idle, deadlock, and timeouts break it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loadmaster.cli.main import app
from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import FinalStatus, JobSpec, JobStatus
from loadmaster.scheduling import make_placer, make_policy
from loadmaster.sim.failures import FailureModel, RetryPolicy
from loadmaster.sim.learner_at_a_time import LearnerAtATimeSimulator, parse_gang, parse_timeout
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import SimConfig, SimResult, Simulator
from loadmaster.traces.canonical import write_csv
from tests.helpers import cluster, job, workload


def run(c: Cluster, *jobs: JobSpec, timeout: float | None = None, placement: str = "pack",
        locality: bool = False, retry: RetryPolicy = RetryPolicy.TRACE, until: float | None = None) -> SimResult:
    sim = LearnerAtATimeSimulator(c, make_policy("fifo"), make_placer(placement), FailureModel(retry, 3, 0),
                                  PerformanceModel(c, locality=locality), SimConfig(until_s=until),
                                  partial_timeout_s=timeout)
    return sim.run(workload(*jobs))


def by_id(result: SimResult) -> dict[str, object]:
    return {r.spec.job_id: r for r in result.records}


# Two servers of 4 GPUs. C (one 2-GPU learner) takes half of n0; A (2 learners x 4 GPUs) binds one learner
# on n1 and waits for a whole server; B (3 learners x 2 GPUs) binds one learner beside C. When C ends, B's
# second learner takes C's GPUs: every GPU is now held by a partial gang, nothing runs, and neither A
# (needs 4 more on one server) nor B (needs 2 more) can ever complete. Gang scheduling runs B at t=2.
DEADLOCK = (job("C", 1, 2, duration=100, submit=0), job("A", 2, 4, duration=100, submit=1),
            job("B", 3, 2, duration=100, submit=2))


@pytest.mark.parametrize("placement", ["pack", "spread"])
def test_partial_gangs_deadlock_without_a_timeout(placement: str) -> None:
    res = run(cluster(4, 4), *DEADLOCK, placement=placement)
    recs = by_id(res)
    assert recs["C"].status is JobStatus.COMPLETED  # type: ignore[attr-defined]
    for j in ("A", "B"):
        assert recs[j].status is JobStatus.QUEUED and recs[j].first_start_s is None  # type: ignore[attr-defined]
    m = res.mode_metrics
    assert m["deadlocked_jobs"] == 2 and m["starved_jobs"] == 0
    assert m["gpus_held_at_end"] == 8 and m["first_stall_s"] == pytest.approx(100)
    # A holds 4 GPUs from t=1, B 2 GPUs from t=2 (its second learner binds at t=100, when the run ends).
    assert m["gpu_hours_held_by_partial_gangs"] == pytest.approx((4 * 99 + 2 * 98) / 3600)
    assert res.busy_gpu_s == pytest.approx(2 * 100)  # held GPUs are not busy


def test_a_timeout_breaks_the_deadlock() -> None:
    res = run(cluster(4, 4), *DEADLOCK, timeout=300)
    recs = by_id(res)
    assert all(r.status is JobStatus.COMPLETED for r in res.records)
    # A (partial since t=1) gives up first, at 301: B takes its server and runs; A waits for B to end.
    assert recs["B"].first_start_s == pytest.approx(301)  # type: ignore[attr-defined]
    assert recs["A"].first_start_s == pytest.approx(401)  # type: ignore[attr-defined]
    assert recs["A"].finish_s == pytest.approx(501)  # type: ignore[attr-defined]
    m = res.mode_metrics
    assert m["partial_gang_timeouts"] == 1 and m["deadlocked_jobs"] == 0 and m["gpus_held_at_end"] == 0
    assert m["gpu_hours_held_by_partial_gangs"] == pytest.approx((4 * 300 + 2 * 98 + 4 * 201) / 3600)
    assert m["stalled_s"] == pytest.approx(201)  # nothing ran from C's end until A's timeout


def test_a_timeout_that_cannot_help_is_reported_as_a_livelock() -> None:
    # Two learners of 4 GPUs; one server of type a, two of type b. Pack binds the first learner on the a
    # server, and later learners must stay on the first one's type, so the second never fits: the job binds,
    # times out and binds the same way again, forever (a gang scheduler would use the two b servers). The
    # run stops at the first repeat and reports it.
    c = Cluster(tuple(Node(f"n{i}", 4, 32, 256, gpu_type=t) for i, t in enumerate("abb")))
    res = run(c, job("x", 2, 4), timeout=100)
    m = res.mode_metrics
    assert m["livelock"] is True and m["deadlocked_jobs"] == 1 and m["partial_gang_timeouts"] == 1
    assert res.end_s == pytest.approx(100)


def test_gang_scheduling_runs_the_same_jobs_without_deadlock() -> None:
    c = cluster(4, 4)
    sim = Simulator(c, make_policy("fifo"), make_placer("pack"), FailureModel(seed=0),
                    PerformanceModel(c, locality=False))
    recs = by_id(sim.run(workload(*DEADLOCK)))
    assert all(r.status is JobStatus.COMPLETED for r in recs.values())  # type: ignore[attr-defined]
    assert recs["B"].first_start_s == pytest.approx(2)  # type: ignore[attr-defined]
    assert recs["A"].first_start_s == pytest.approx(102)  # type: ignore[attr-defined]


def test_until_stops_the_clock_without_calling_partial_gangs_deadlocked() -> None:
    res = run(cluster(4, 4), *DEADLOCK, until=50)
    m = res.mode_metrics
    assert m["deadlocked_jobs"] == 0 and m["partial_gangs_at_end"] == 2


def test_each_learner_is_placed_on_its_own() -> None:
    # An idle 2x4 cluster with one GPU taken on n0: PACK puts each learner on the fullest server that fits
    # (n0, then n0 again), SPREAD on the emptiest (n1, then n0), so spread pays the cross-server slowdown.
    jobs = (job("x", 1, 1, duration=1000, submit=0), job("y", 2, 1, duration=100, submit=1))
    packed = by_id(run(cluster(4, 4), *jobs, locality=True))["y"]
    spread = by_id(run(cluster(4, 4), *jobs, placement="spread", locality=True))["y"]
    assert packed.jct_s == pytest.approx(100)  # type: ignore[attr-defined]
    assert spread.jct_s > 100  # type: ignore[attr-defined]


def test_learners_stay_on_the_type_of_the_first() -> None:
    # The gang fits on the two K80 servers, but PACK binds its first learner to the V100 server (first of
    # equals) without seeing the gang; later learners keep to that type, so it never completes.
    c = Cluster((Node("v", 2, 32, 256, gpu_type="v100"), Node("k0", 2, 32, 256, gpu_type="k80"),
                 Node("k1", 2, 32, 256, gpu_type="k80")))
    res = run(c, job("x", 2, 2, duration=100))
    assert res.mode_metrics["deadlocked_jobs"] == 1 and res.mode_metrics["gpus_held_at_end"] == 2


def test_a_job_that_can_never_fit_is_rejected_not_held() -> None:
    res = run(cluster(4, 4), job("huge", 3, 4))
    rec = res.records[0]
    assert rec.status is JobStatus.FAILED and "needs 12 GPUs" in rec.reject_reason
    assert res.mode_metrics["gpu_hours_held_by_partial_gangs"] == 0


def test_failed_attempts_requeue_and_place_learners_again() -> None:
    spec = job("f", 2, 2, duration=100, failed_attempts_s=(50.0,), final_status=FinalStatus.PASS)
    rec = run(cluster(4), spec).records[0]
    assert rec.status is JobStatus.COMPLETED and rec.attempts_run == 2 and rec.finish_s == pytest.approx(150)


def test_priority_orders_learners_before_time_queued() -> None:
    jobs = (job("busy", 1, 4, duration=100), job("low", 1, 4, submit=1), job("high", 1, 4, submit=2, priority=5))
    recs = by_id(run(cluster(4), *jobs))
    assert recs["high"].first_start_s == pytest.approx(100)  # type: ignore[attr-defined]
    assert recs["low"].first_start_s == pytest.approx(200)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("policy", "placement", "timeout", "field"),
    [("fair", "pack", None, "--policy"), ("fifo-strict", "pack", None, "--policy"),
     ("fifo", "locality", None, "--placement"), ("fifo", "pack", 0.0, "partial_timeout_s")],
)
def test_unsupported_combinations_are_clear_errors(policy: str, placement: str, timeout: float | None,
                                                   field: str) -> None:
    c = cluster(4)
    with pytest.raises(ValueError, match=field):
        LearnerAtATimeSimulator(c, make_policy(policy), make_placer(placement), partial_timeout_s=timeout)


def test_option_parsing() -> None:
    assert parse_gang("off") is False and parse_gang("ON") is True
    assert parse_timeout("never") is None and parse_timeout("3600") == 3600 and parse_timeout("90s") == 90
    for bad in ("-1", "0", "soon", "nan"):
        with pytest.raises(ValueError, match="--partial-timeout"):
            parse_timeout(bad)
    with pytest.raises(ValueError, match="--gang"):
        parse_gang("maybe")


# -- properties ---------------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, list[JobSpec]]:
    gpus = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    c = cluster(*gpus, cpus=8, mem=64)
    jobs = []
    for i in range(draw(st.integers(1, 7))):
        failed = draw(st.lists(st.floats(1, 100), max_size=1))
        jobs.append(job(
            f"j{i}", learners=draw(st.integers(1, 3)), gpus=draw(st.integers(1, max(gpus))),
            duration=draw(st.floats(1, 300)), submit=draw(st.floats(0, 300)),
            cpus_per_learner=float(draw(st.integers(0, 4))), mem_gb_per_learner=float(draw(st.integers(0, 32))),
            failed_attempts_s=tuple(failed),
        ))
    jobs.sort(key=lambda j: j.submit_time_s)
    return c, jobs


def check_capacity(res: SimResult) -> None:
    assert max(res.timeline.busy_gpus, default=0) <= res.cluster.total_gpus
    m = res.mode_metrics
    assert 0 <= m["gpus_held_at_end"] <= res.cluster.total_gpus  # type: ignore[operator]
    held = m["gpu_hours_held_by_partial_gangs"]
    assert isinstance(held, float)
    assert 0 <= held * 3600 <= res.cluster.total_gpus * res.end_s + 1e-6
    assert res.busy_gpu_s + held * 3600 <= res.cluster.total_gpus * res.end_s + 1e-6


@settings(max_examples=150)
@given(scenarios(), st.floats(1, 500), st.sampled_from(["pack", "spread"]))
def test_with_a_finite_timeout_every_job_ends_or_is_reported(scenario: tuple[Cluster, list[JobSpec]],
                                                             timeout: float, placement: str) -> None:
    c, jobs = scenario
    # Capacity is checked on every bind and start by the simulator itself (hold() raises if exceeded).
    res = run(c, *jobs, timeout=timeout, placement=placement)
    check_capacity(res)
    m = res.mode_metrics
    unfinished = [r for r in res.records if not r.status.terminal]
    if m["livelock"]:
        assert len(unfinished) == m["deadlocked_jobs"] + m["starved_jobs"]  # type: ignore[operator]
    else:
        assert not unfinished and m["gpus_held_at_end"] == 0 and m["deadlocked_jobs"] == 0
    assert len(res.records) == len(jobs)


@settings(max_examples=100)
@given(scenarios(), st.sampled_from(["pack", "spread"]))
def test_without_a_timeout_the_run_ends_and_every_stuck_job_is_reported(
        scenario: tuple[Cluster, list[JobSpec]], placement: str) -> None:
    c, jobs = scenario
    res = run(c, *jobs, placement=placement)
    check_capacity(res)
    m = res.mode_metrics
    unfinished = [r for r in res.records if not r.status.terminal]
    assert len(unfinished) == m["deadlocked_jobs"] + m["starved_jobs"]  # type: ignore[operator]
    assert m["partial_gangs_at_end"] == m["deadlocked_jobs"]
    if not m["deadlocked_jobs"]:
        assert not unfinished  # with nothing held, a job that fits alone on the cluster always runs


# -- the CLI ------------------------------------------------------------------------------------------
runner = CliRunner()


def test_cli_compares_gang_with_learner_at_a_time(tmp_path: Path) -> None:
    trace = tmp_path / "w.csv"
    write_csv(DEADLOCK, trace)
    result = runner.invoke(app, ["sim", "compare", "--trace", str(trace), "--cluster", "2x4", "--policy", "fifo",
                                 "--placement", "pack", "--gang", "on,off", "--partial-timeout", "never,300",
                                 "--out", str(tmp_path / "cmp"), "--no-plots", "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    assert set(runs) == {"fifo/pack", "fifo/pack/no-gang/timeout-never", "fifo/pack/no-gang/timeout-300s"}
    assert runs["fifo/pack"]["deadlocked_jobs"] == 0 and runs["fifo/pack"]["gang"] is True
    assert runs["fifo/pack/no-gang/timeout-never"]["deadlocked_jobs"] == 2
    assert runs["fifo/pack/no-gang/timeout-300s"]["completed"] == 3
    table = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "gpu_hours_held_by_partial_gangs" in table and "deadlocked_jobs" in table
    summary = json.loads((tmp_path / "cmp" / "fifo_pack_no-gang_timeout-never" / "summary.json").read_text())
    assert summary["unfinished"] == 2


def test_cli_run_with_gang_off_writes_the_learner_keys(tmp_path: Path) -> None:
    trace = tmp_path / "w.csv"
    write_csv(DEADLOCK, trace)
    result = runner.invoke(app, ["sim", "run", "--trace", str(trace), "--cluster", "2x4", "--gang", "off",
                                 "--partial-timeout", "300", "--out", str(tmp_path / "o"), "--no-plots"])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["gang"] is False and summary["partial_timeout_s"] == 300 and summary["completed"] == 3
    assert "deadlocked_jobs" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [(["--gang", "maybe"], "--gang"), (["--gang", "off", "--policy", "fair"], "--policy"),
     (["--gang", "off", "--placement", "synergy"], "--placement"), (["--partial-timeout", "60"], "--gang off"),
     (["--gang", "off", "--partial-timeout", "soon"], "--partial-timeout")],
)
def test_cli_bad_gang_options_are_one_clear_line(args: list[str], expected: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "run", *args, "--out", str(tmp_path / "o"), "--no-plots"])
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
