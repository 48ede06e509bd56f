"""`trace analyze` on a hand-built Philly log (every figure worked out by hand), on traces without start
times, and on the real Philly sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces import philly
from loadmaster.traces.analysis import Options, Shares, analyze
from loadmaster.traces.formats import load_history
from loadmaster.traces.history import History, Times
from loadmaster.traces.occupancy import rebuild
from loadmaster.traces.queueing import CLASSES, split_delays
from tests.traces.analysis_fixtures import (
    HAND_END_S,
    HAND_GPU_S,
    HAND_SHARES,
    HAND_TRACE,
    attempt,
    hand_cluster,
    job,
    write_log,
)


@pytest.fixture
def hand_history(tmp_path: Path) -> History:
    return philly.load_history(write_log(tmp_path / "hand.json", HAND_TRACE))


@pytest.fixture
def hand(hand_history: History) -> dict[str, Any]:
    return analyze(hand_history, hand_cluster(), lambda _capacity: Shares(HAND_SHARES, "by hand"))


def _split_of(history: History) -> dict[str, dict[str, float]]:
    occ = rebuild(history, hand_cluster())
    split = split_delays(history.jobs, occ, HAND_SHARES)
    return {j.spec.job_id: {c: v for c, v in split.of(i).items() if v} for i, j in enumerate(history.jobs)}


# ------------------------------------------------------------------------------------------ by hand


def test_history_keeps_every_attempt_on_the_shifted_clock(hand_history: History) -> None:
    assert hand_history.times is Times.RECORDED
    j9 = next(j for j in hand_history.jobs if j.spec.job_id == "J9")
    assert [(a.start_s, a.end_s) for a in j9.attempts] == [(6000, 6100), (6200, 6500)]
    assert j9.attempts[0].placement == ()
    assert [(p.machine, p.gpus) for p in j9.attempts[1].placement] == [("m2", ("gpu0", "gpu1"))]
    assert (j9.first_start_s, j9.end_s, j9.queue_delay_s) == (6000, 6500, 0)
    # load_history gives the same JobSpecs as load.
    assert [j.spec for j in hand_history.jobs] == philly.load(hand_history.workload.report.source).jobs


def test_every_wait_is_split_as_worked_out_by_hand(hand_history: History) -> None:
    split = _split_of(hand_history)
    assert split["J2"] == {"fair_share": 900}
    assert split["J6"] == {"locality": 400}
    assert split["J5"] == {"fragmentation": 800, "fair_share": 500, "unexplained": 500}
    assert split["J7"] == {"capacity": 1600, "fragmentation": 500, "unexplained": 500}
    for jid in ("J1", "J3", "J4", "J8", "J9"):
        assert split[jid] == {}, jid


def test_occupancy_by_hand(hand_history: History) -> None:
    occ = rebuild(hand_history, hand_cluster())
    assert occ.capacity == 12
    assert occ.checks == {"gpus_double_booked": 0, "server_overbooked_events": 0}
    assert occ.integral(occ.busy)[-1] == HAND_GPU_S
    at = {float(t): k for k, t in enumerate(occ.t[:-1])}
    # [700, 1000): J1 4 + J3 2 + J4 2 + J6 4 = every GPU; [1500, 2000): m1 empty, m2 and m3 half full.
    assert occ.busy[at[700]] == 12 and list(occ.servers_free[:, at[700]]) == [3, 0, 0, 0, 0]
    assert occ.busy[at[1500]] == 4 and list(occ.servers_free[:, at[1500]]) == [3, 3, 3, 1, 1]
    assert occ.vc_busy["c"][at[700]] == 4 and occ.vc_busy["c"][at[1200]] == 0
    # [6000, 6100): J9's first attempt logged no machines: in the totals, on no server.
    assert occ.busy[at[6000]] == 2 and occ.vc_busy["b"][at[6000]] == 2
    assert list(occ.servers_free[:, at[6000]]) == [3, 3, 3, 3, 3]
    assert any("1 attempts have no recorded machines" in n for n in occ.notes)


def test_hand_trace_figures(hand: dict[str, Any]) -> None:
    sizes = hand["job_sizes"]
    assert dict(zip(sizes["buckets"], sizes["jobs"], strict=True)) == {"1": 0, "2-4": 8, "5-8": 1, ">8": 0}
    assert sizes["gpu_time_share"][2] == pytest.approx(8000 / HAND_GPU_S)
    mix = hand["status_mix"]
    assert mix["jobs"] == [8, 1, 0]
    assert mix["gpu_hours"] == pytest.approx([(HAND_GPU_S - 120) / 3600, 120 / 3600, 0])

    q = hand["queueing"]
    assert q["available"]
    assert q["by_size"]["2-4"]["n"] == 8 and q["by_size"]["5-8"]["n"] == 1
    assert q["by_size"]["5-8"]["p50"] == 2600
    assert sorted(v for v, _ in q["overall"]["curve"])[-1] == 2600
    split = q["split"]
    assert split["available"] and split["inputs"]["capacity_gpus"] == 12
    small, big = split["by_size"]["2-4"], split["by_size"]["5-8"]
    assert small["jobs_delayed"] == 3  # J2, J5, J6
    assert small["delayed_jobs_by_dominant_class"] == {"fair_share": 1, "fragmentation": 1, "locality": 1,
                                                       "capacity": 0, "unexplained": 0}
    assert small["seconds_by_class"] == {"fair_share": 1400, "fragmentation": 800, "locality": 400,
                                         "capacity": 0, "unexplained": 500}
    assert big["delayed_jobs_by_dominant_class"]["capacity"] == 1
    assert big["share_by_class"]["capacity"] == pytest.approx(1600 / 2600)
    assert split["overall"]["jobs_delayed"] == 4

    loc = hand["locality"]
    assert loc["points"] == [[2600.0, 2, 8]]

    u = hand["utilization"]
    assert u["allocated_mean"] == pytest.approx(HAND_GPU_S / (12 * HAND_END_S))
    # Hourly bins; the second ends with the trace at 6,500 s. In the first hour: everything but J7's last
    # 400 s (8 GPUs), J8 and J9.
    assert u["series"]["allocated"] == pytest.approx([(HAND_GPU_S - 3200 - 120 - 800) / (12 * 3600),
                                                      (3200 + 120 + 800) / (12 * 2900)])
    assert u["per_gpu_compute"]["available"] is False

    rows = {r["outcome"]: r for r in hand["failures"]["rows"]}
    assert set(rows) == {"recovered", "terminal"}
    assert rows["terminal"]["trials"] == 1 and rows["terminal"]["rtf_s"]["p50"] == 60
    assert rows["terminal"]["failed_within"] == {"1min": 1.0, "10min": 1.0, "60min": 1.0}
    assert rows["recovered"]["failed_within"]["1min"] == 0.0  # J9's first attempt ran 100 s
    assert rows["terminal"]["gpu_hours"] == pytest.approx(120 / 3600)
    assert rows["recovered"]["rtf_s"]["p50"] == 100 and rows["recovered"]["users"] == 1
    assert hand["failures"]["category"]["available"] is False

    r = hand["retries"]
    assert (r["jobs_retried"], r["retried_then_passed"], r["failed_attempts"]) == (1, 1, 1)
    assert r["retry_gap"]["p50"] == 100
    assert r["attempts_by_status"] == {"Failed": {"1": 1}, "Pass": {"1": 7, "2": 1}}

    runtime = hand["runtime"]["by_status"]
    assert runtime["Failed"]["p50"] == 60
    # J2, J5, J6 500 s, J9 500 s from its first start to its last end, J1 and J7 1000, J3 2000, J4 3000.
    assert (runtime["Pass"]["p50"], runtime["Pass"]["max"]) == (750, 3000)


def test_a_gpu_held_twice_is_reported(tmp_path: Path) -> None:
    clash = [*HAND_TRACE, job("X", "a", 0, [attempt(10, 20, [("m1", [3])])])]  # J1 holds m1 gpu3 then
    occ = rebuild(philly.load_history(write_log(tmp_path / "clash.json", clash)), hand_cluster())
    assert occ.checks["gpus_double_booked"] == 1
    assert occ.checks["server_overbooked_events"] == 1
    assert any("held at the same time" in n for n in occ.notes)
    assert occ.servers_free[:, 1].min() >= 0


def test_servers_used_beyond_the_list_or_missing_from_it(tmp_path: Path) -> None:
    records = [*HAND_TRACE, job("Y", "a", 7000, [attempt(7000, 7100, [("m1", [7]), ("m9", [0, 1])])])]
    occ = rebuild(philly.load_history(write_log(tmp_path / "more.json", records)), hand_cluster())
    assert occ.server_gpus == {"m1": 8, "m2": 4, "m3": 4, "m9": 2}
    assert any("used with more GPUs than the machine list" in n for n in occ.notes)
    assert any("not in the cluster" in n for n in occ.notes)


def test_without_a_cluster_the_servers_come_from_the_log(hand_history: History) -> None:
    occ = rebuild(hand_history, None)
    assert occ.server_gpus == {"m1": 4, "m2": 4, "m3": 4}


def test_default_shares_follow_gpu_time(hand_history: History) -> None:
    a = analyze(hand_history, hand_cluster())
    shares = a["queueing"]["split"]["inputs"]["shares_gpus"]
    assert sum(shares.values()) == pytest.approx(12, abs=0.05)
    assert shares["d"] == pytest.approx(12 * 8000 / HAND_GPU_S, abs=0.01)
    assert "GPU-time" in a["queueing"]["split"]["inputs"]["share_rule"]


def test_min_delay_sets_who_counts_as_delayed(hand_history: History) -> None:
    a = analyze(hand_history, hand_cluster(), lambda _c: Shares(HAND_SHARES, "x"), Options(min_delay_s=1000))
    assert a["queueing"]["split"]["overall"]["jobs_delayed"] == 2  # J5 (1,800 s) and J7 (2,600 s)


# ------------------------------------------------------------------------------------------ untimed


def _untimed_workload() -> Workload:
    jobs = [
        JobSpec("a", "t1", 0, 1, 1, 100.0, user="u"),
        JobSpec("b", "t1", 10, 2, 4, 50.0, user="u", final_status=FinalStatus.FAILED, failed_attempts_s=(5.0,)),
        JobSpec("c", "t2", 20, 1, 2, 30.0, user="v", final_status=FinalStatus.KILLED),
    ]
    return Workload(jobs, LoadReport("mem"))


def test_without_start_times_queueing_is_unavailable_not_invented() -> None:
    a = analyze(History.untimed(_untimed_workload()), None)
    assert a["times"] == "none"
    assert a["queueing"] == {"available": False, "why": a["queueing"]["why"]}
    assert "--replay" in a["queueing"]["why"]
    assert a["locality"]["available"] is False
    assert a["utilization"]["available"] is False and "offered_load" not in a["utilization"]
    assert a["runtime"]["by_status"]["Failed"]["p50"] == 55  # 50 + the 5 s failed attempt, no gaps known
    assert "sum of the attempts" in a["runtime"]["definition"]
    rows = {r["outcome"]: r for r in a["failures"]["rows"]}
    assert rows["retried_failed"]["trials"] == 1 and rows["terminal"]["rtf_s"]["p50"] == 50
    assert rows["killed"]["gpu_hours"] == pytest.approx(2 * 30 / 3600)
    assert a["retries"]["retry_gap"]["available"] is False


def test_offered_load_needs_only_submissions_and_runtimes() -> None:
    a = analyze(History.untimed(_untimed_workload()), hand_cluster())
    # GPU-time asked: 1x100 + 8x55 + 2x30 = 600 GPU-s over 12 GPUs x 20 s of submissions.
    assert a["utilization"]["offered_load"] == pytest.approx(600 / (12 * 20))


def test_canonical_csv_loads_without_times(tmp_path: Path) -> None:
    from loadmaster.traces import write_csv

    path = tmp_path / "w.csv"
    write_csv(_untimed_workload().jobs, path)
    history = load_history(str(path))
    assert history.times is Times.NONE and len(history.jobs) == 3


# ------------------------------------------------------------------------------------------ real data


def test_the_philly_sample(philly_log: Path) -> None:
    history = load_history(str(philly_log))
    a = analyze(history, None)  # no cluster: the servers are those the log names
    assert a["jobs"] == 4206
    assert dict(zip(a["status_mix"]["statuses"], a["status_mix"]["jobs"], strict=True)) == {
        "Pass": 2534, "Failed": 1672, "Killed": 0}
    assert a["job_sizes"]["by_gpus"]["4"] == 1843
    q = a["queueing"]
    assert q["overall"]["n"] == 4206 and q["overall"]["p50"] == 224  # 3.7 minutes
    assert set(q["by_vc"]) >= {"ee9e8c", "0e4a51"} and len(q["by_vc"]) == 5
    assert a["retries"]["jobs_retried"] == 529 and a["retries"]["failed_attempts"] == 968
    assert a["checks"]["gpus_double_booked"] == 0


def test_the_philly_sample_split_accounts_for_every_second(philly_log: Path) -> None:
    from loadmaster.traces import load_cluster

    history = load_history(str(philly_log))
    occ = rebuild(history, load_cluster("philly"))
    split = split_delays(history.jobs, occ, {vc: 1e9 for vc in history.workload.tenants})
    delay = np.array([j.queue_delay_s for j in history.jobs], dtype=float)
    np.testing.assert_allclose(sum(split.seconds[c] for c in CLASSES), delay, atol=1e-6)
    assert split.seconds["fair_share"].sum() == 0  # no VC can reach an unbounded share
    # The sample's jobs hold ~11% of the capacity: the caveat says the split is a lower bound.
    a = analyze(history, load_cluster("philly"))
    assert "lower bounds" in a["queueing"]["split"]["caveat"]
    assert a["capacity_gpus"] == occ.capacity > 2490


def test_the_allocation_series_keeps_to_its_bin_budget(hand_history: History) -> None:
    a = analyze(hand_history, hand_cluster(), options=Options(utilization_max_bins=1))
    series = a["utilization"]["series"]
    assert series["bin_s"] == 7200  # 6,500 s in at most one bin: two hours, clipped to the trace
    assert series["allocated"] == pytest.approx([HAND_GPU_S / (12 * HAND_END_S)])


def test_alibaba_pods_have_start_times_but_no_servers(tmp_path: Path) -> None:
    from loadmaster.traces import alibaba

    path = tmp_path / "pods.csv"
    path.write_text(",".join(alibaba.POD_COLUMNS) + "\n"
                    "p1,8000,1024,1,1000,,LS,Succeeded,100,700,160\n"  # waits 60 s, runs 540 s
                    "p2,8000,1024,2,1000,,BE,Failed,130,400,390\n"  # waits 260 s, fails after 10 s
                    "p3,8000,1024,1,1000,,BE,Pending,150,,\n")  # never ran: skipped, as load() does
    history = load_history(str(path))
    assert history.times is Times.RECORDED and history.cluster_hint == "alibaba"
    assert [j.spec for j in history.jobs] == alibaba.load(path).jobs
    assert [(j.queue_delay_s, j.attempts[0].start_s, j.end_s) for j in history.jobs] == [(60, 60, 600),
                                                                                       (260, 290, 300)]
    a = analyze(history, hand_cluster())
    assert a["queueing"]["by_size"]["1"]["p50"] == 60 and a["queueing"]["by_size"]["2-4"]["p50"] == 260
    assert a["queueing"]["split"]["available"] is False and "which servers" in a["queueing"]["split"]["why"]
    assert a["locality"]["available"] is False
    # 1 GPU x 540 s + 2 GPUs x 10 s on 12 GPUs from the first submission (0) to the last end (600 s).
    assert a["utilization"]["allocated_mean"] == pytest.approx(560 / (12 * 600))


def test_the_alibaba_pod_list(alibaba_pods: Path) -> None:
    a = analyze(load_history(str(alibaba_pods)), None)
    assert a["queueing"]["overall"]["n"] == 7255
    assert a["queueing"]["split"]["available"] is False
    assert a["capacity_gpus"] is None and a["utilization"]["available"] is False  # no cluster, no servers named
