"""Properties of the rebuilt occupancy and of the queueing-delay split, on random recorded histories."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces.history import Attempt, History, JobHistory, Placement, Times
from loadmaster.traces.occupancy import rebuild
from loadmaster.traces.queueing import CLASSES, split_delays

CLUSTER = Cluster(tuple(Node(f"m{i}", 4, 16, 64) for i in range(3)))


@st.composite
def histories(draw: st.DrawFn) -> History:
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        servers = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
        placement = tuple(Placement(f"m{s}", tuple(f"gpu{g}" for g in range(draw(st.integers(1, 4)))))
                          for s in servers)
        gpus = sum(len(p.gpus) for p in placement)
        submit = draw(st.integers(0, 1000))
        start = submit + draw(st.integers(0, 600))
        attempts = []
        if draw(st.booleans()):  # an earlier attempt without machines, as Philly logs them
            end = start + draw(st.integers(1, 100))
            attempts.append(Attempt(float(start), float(end)))
            start = end + draw(st.integers(0, 50))
        end = start + draw(st.integers(1, 500))
        attempts.append(Attempt(float(start), float(end), placement))
        spec = JobSpec(f"j{i}", draw(st.sampled_from(["a", "b"])), float(submit), gpus, 1, float(end - start))
        jobs.append((spec, tuple(attempts)))
    workload = Workload([s for s, _ in jobs], LoadReport("random"))
    by_id = {s.job_id: a for s, a in jobs}
    return History(workload, [JobHistory.recorded(s, by_id[s.job_id]) for s in workload.jobs], Times.RECORDED)


@settings(max_examples=150, deadline=None)
@given(histories(), st.floats(0, 16))
def test_the_classes_partition_every_wait(history: History, share: float) -> None:
    occ = rebuild(history, CLUSTER)
    split = split_delays(history.jobs, occ, {"a": share, "b": share})
    delay = np.array([j.queue_delay_s for j in history.jobs], dtype=float)
    for c in CLASSES:
        assert (split.seconds[c] >= -1e-9).all(), c
    np.testing.assert_allclose(sum(split.seconds[c] for c in CLASSES), delay, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_shares_decide_fair_share_delay_alone(history: History) -> None:
    occ = rebuild(history, CLUSTER)
    delay = np.array([j.queue_delay_s for j in history.jobs], dtype=float)
    unbounded = split_delays(history.jobs, occ, {"a": 1e9, "b": 1e9})
    assert unbounded.seconds["fair_share"].sum() == 0
    none = split_delays(history.jobs, occ, {"a": 0.0, "b": 0.0})  # every job would take its VC over
    np.testing.assert_allclose(none.seconds["fair_share"], delay, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_occupancy_accounts_for_every_gpu_second(history: History) -> None:
    occ = rebuild(history, CLUSTER)
    held = sum(
        (a.gpus if a.placement else j.spec.gpus) * (a.end_s - a.start_s)
        for j in history.jobs for a in j.attempts if a.start_s is not None and a.end_s is not None
    )
    assert occ.integral(occ.busy)[-1] == held
    assert sum(occ.vc_busy.values()).tolist() == occ.busy.tolist()
    assert (occ.servers_free[0] == len(CLUSTER.nodes)).all()
    assert (np.diff(occ.servers_free, axis=0) <= 0).all()  # at least c+1 free implies at least c free
    if occ.checks["gpus_double_booked"] == 0:  # distinct GPUs at every instant: no server over capacity
        assert occ.checks["server_overbooked_events"] == 0


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_bigger_cluster_never_adds_capacity_or_fragmentation_delay(history: History) -> None:
    big = Cluster((*CLUSTER.nodes, *(Node(f"x{i}", 4, 16, 64) for i in range(12))))
    small = split_delays(history.jobs, rebuild(history, CLUSTER), {"a": 1e9, "b": 1e9})
    large = split_delays(history.jobs, rebuild(history, big), {"a": 1e9, "b": 1e9})
    # 12 empty servers of 4 fit any gang of this history in its tightest shape.
    assert large.seconds["capacity"].sum() == 0
    assert large.seconds["fragmentation"].sum() == 0 and large.seconds["locality"].sum() == 0
    assert small.seconds["unexplained"].sum() <= large.seconds["unexplained"].sum() + 1e-6
