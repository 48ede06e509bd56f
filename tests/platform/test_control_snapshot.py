"""The pure parts of the control loop: rows and runs -> Snapshot (incrementally), concrete GPUs, per-job
placement, rendezvous ports."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobStatus
from loadmaster.platform.control.allocation import (
    PORT_COOLDOWN_S,
    Bookings,
    assign_gpus,
    held_gpus,
    keep_gpus,
    pick_master_port,
    to_allocation,
    to_document,
)
from loadmaster.platform.control.snapshot import DEFAULT_DURATION_S, JobInputs, SnapshotBuilder, placer_name
from loadmaster.platform.control.state import PendingStart, Phase, RunState, StopIntent, StopKind
from loadmaster.platform.control.table import JobRow
from loadmaster.platform.executors.base import AttemptSpec
from loadmaster.platform.manifest import JobManifest, parse_manifest
from loadmaster.scheduling import decide, make_placer, make_policy
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.placement.per_job import PerJobPlacer
from loadmaster.scheduling.snapshot import Snapshot, TenantQuota, free_after

CLUSTER = Cluster((Node("n0", 4, 16.0, 64.0), Node("n1", 4, 16.0, 64.0)))
NOW = 10_000.0


def _row(job_id: str, status: JobStatus = JobStatus.QUEUED, **fields: Any) -> JobRow:
    base: dict[str, Any] = dict(
        id=job_id, tenant_id=1, status=status.value, priority=0, learners=1, submitted_at=100.0,
        queued_since=100.0, first_started_at=None, attempts=0, failures=0, preemptions=0, allocation=None,
        work_done_s=0.0, attained_gpu_s=0.0, run_started_at=None, last_report_at=None, expected_duration_s=None,
        halt_requested=False, cancel_requested=False, target_learners=None, wait_reason="", state=status)
    base.update(fields)
    return JobRow(**base)


def _manifest(**fields: Any) -> JobManifest:
    return parse_manifest({"name": "m", "command": ["true"], **fields})


def _run(job_id: str, alloc: Allocation, phase: Phase = Phase.RUNNING, stop: StopIntent | None = None) -> RunState:
    spec = AttemptSpec(job_id, 1, ("true",), "/tmp", {}, (), 29500, "c", "r", "l", "p")
    return RunState(job_id, 1, spec, alloc, phase, NOW - 50, stop=stop)


def _doc(*learners: tuple[str, list[int]]) -> dict[str, Any]:
    return {"learners": [{"rank": r, "node": n, "gpu_ids": g, "cpus": 1.0, "mem_gb": 1.0}
                         for r, (n, g) in enumerate(learners)], "master_port": 29500}


def _build(rows: list[JobRow], manifests: dict[str, JobManifest], runs: dict[str, RunState] | None = None,
           pending: dict[str, PendingStart] | None = None, quotas: dict[str, TenantQuota] | None = None,
           builder: SnapshotBuilder | None = None, tenant: str = "vision") -> tuple[SnapshotBuilder, Snapshot]:
    builder = builder or SnapshotBuilder(CLUSTER)
    for row in rows:
        builder.update(row.id, JobInputs(row, manifests[row.id], tenant, (pending or {}).get(row.id),
                                         (runs or {}).get(row.id)))
    return builder, builder.build(NOW, quotas or {})


def test_rows_become_the_snapshot_decide_reads() -> None:
    rows = [
        _row("q", expected_duration_s=600.0, priority=3),
        _row("r", JobStatus.PROCESSING, attempts=1, allocation=_doc(("n0", [0, 1])), run_started_at=NOW - 100,
             last_report_at=NOW - 10, work_done_s=90.0, attained_gpu_s=180.0),
        _row("halting", halt_requested=True),
        _row("storing", JobStatus.STORING),
    ]
    manifests = {"q": _manifest(learners=2, resources={"gpus": 2}, placement={"strategy": "spread"}),
                 "r": _manifest(resources={"gpus": 2}), "halting": _manifest(), "storing": _manifest()}
    run = _run("r", Allocation("r", (0,), 2, 1.0, 1.0))
    run.running_since, run.as_of, run.work_done_s, run.attained_gpu_s = NOW - 100, NOW - 10, 90.0, 180.0
    _, snap = _build(rows, manifests, {"r": run}, quotas={"vision": TenantQuota("vision", 8)})
    [q] = snap.queued
    assert (q.job_id, q.spec.learners, q.spec.gpus_per_learner, q.spec.duration_s, q.spec.priority) == \
        ("q", 2, 2, 600.0, 3)
    assert q.spec.placement == "spread" and q.spec.tenant == "vision"
    [r] = snap.running
    assert r.allocation == Allocation("r", (0,), 2, 1.0, 1.0) and r.spec.duration_s == DEFAULT_DURATION_S
    assert r.rate == 1.0 and r.as_of == NOW - 10 and r.work_at(NOW) == pytest.approx(100.0)
    assert list(snap.free_gpus) == [2.0, 4.0]
    assert snap.tenants["vision"].gpus == 8 and dict(snap.tenant_gpus) == {"vision": 2}


def test_stopping_jobs_free_their_resources_and_pending_starts_hold_theirs() -> None:
    rows = [_row("victim", JobStatus.PROCESSING, attempts=1, allocation=_doc(("n0", [0, 1, 2, 3])),
                 run_started_at=NOW - 100),
            _row("winner")]
    manifests = {"victim": _manifest(resources={"gpus": 4}), "winner": _manifest(resources={"gpus": 4})}
    runs = {"victim": _run("victim", Allocation("victim", (0,), 4, 1.0, 1.0),
                           stop=StopIntent(StopKind.PREEMPT, "preempted by winner"))}
    pending = {"winner": PendingStart("winner", Allocation("winner", (0,), 4, 1.0, 1.0), NOW - 1)}
    _, snap = _build(rows, manifests, runs, pending)
    assert [v.job_id for v in snap.running] == ["winner"] and not snap.queued
    assert list(snap.free_gpus) == [0.0, 4.0]


def test_a_scale_request_pins_the_size_of_an_elastic_job() -> None:
    elastic = _manifest(learners=2, elastic={"min_learners": 1, "max_learners": 4})
    free = _build([_row("e")], {"e": elastic})[1].queued[0].spec
    assert free.elastic and (free.min_learners, free.max_learners) == (1, 4)
    spec = _build([_row("e", target_learners=3)], {"e": elastic})[1].queued[0].spec
    assert not spec.elastic and spec.learners == 3


def test_views_are_rebuilt_only_for_jobs_that_changed() -> None:
    row, manifests = _row("q"), {"q": _manifest(), "r": _manifest()}
    builder, first = _build([row], manifests)
    again = builder.build(NOW + 5, {})
    assert again.queued[0] is first.queued[0]
    _build([_row("q", priority=9)], manifests, builder=builder)
    changed = builder.build(NOW + 5, {}).queued[0]
    assert changed is not first.queued[0] and changed.spec.priority == 9
    builder.update("q", None)
    assert not builder.build(NOW, {}).queued


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 2), st.integers(1, 2)),
                max_size=30))
def test_incremental_capacity_always_equals_a_rebuild(steps: list[tuple[str, int, int]]) -> None:
    """Whatever order views come and go in, free capacity and each tenant's GPUs are those of the running
    views (never a GPU counted twice, never one lost)."""
    builder = SnapshotBuilder(CLUSTER)
    manifests = {j: _manifest(resources={"gpus": 1}) for j in "abcde"}
    for job, action, gpus in steps:
        if action == 0:
            builder.update(job, None)
        elif action == 1:
            builder.update(job, JobInputs(_row(job), manifests[job], "t" + job))
        else:
            alloc = Allocation(job, (0,) * gpus, 1, 1.0, 1.0)
            builder.update(job, JobInputs(_row(job), manifests[job], "t" + job, PendingStart(job, alloc, NOW)))
    snap = builder.build(NOW, {})
    gpus, cpus, mem = free_after(CLUSTER, snap.running)
    assert list(snap.free_gpus) == list(np.maximum(gpus, 0)) and list(snap.free_cpus) == list(np.maximum(cpus, 0))
    assert list(snap.free_mem) == list(np.maximum(mem, 0))
    held: dict[str, int] = {}
    for view in snap.running:
        assert view.allocation is not None
        held[view.spec.tenant] = held.get(view.spec.tenant, 0) + view.allocation.gpus
    assert dict(snap.tenant_gpus) == held
    assert not {v.job_id for v in snap.running} & {v.job_id for v in snap.queued}


@pytest.mark.parametrize(("placement", "name"), [
    ({}, ""), ({"strategy": "spread"}, "spread"), ({"locality": "relaxed"}, "locality"),
    ({"strategy": "spread", "locality": "strict"}, "locality-strict")])
def test_a_manifests_placement_names_its_placer(placement: dict[str, str], name: str) -> None:
    assert placer_name(_manifest(placement=placement)) == name


def test_each_job_is_placed_by_its_own_placer() -> None:
    rows = [_row("packed", submitted_at=1.0), _row("spread", submitted_at=2.0)]
    manifests = {"packed": _manifest(learners=2), "spread": _manifest(learners=2, placement={"strategy": "spread"})}
    snap = _build(rows, manifests)[1]
    placer = PerJobPlacer(make_placer("pack"), PLACERS)
    plan = decide(snap, make_policy("fifo"), placer)
    nodes = {s.job_id: set(s.allocation.learner_nodes) for s in plan.starts}
    assert len(nodes["packed"]) == 1 and len(nodes["spread"]) == 2
    keys = {placer.cache_key(v, 2, snap) for v in snap.queued}
    assert len(keys) == 2  # one shape, two placers: never memoised as one


def test_gpus_are_the_lowest_free_and_a_resize_keeps_the_learners_that_stay() -> None:
    held = held_gpus([_doc(("n0", [0, 2]))])
    learners = assign_gpus(Allocation("j", (0, 0, 1), 1, 1.0, 1.0), CLUSTER, held)
    assert learners is not None and [(x.node, x.gpu_ids) for x in learners] == [("n0", (1,)), ("n0", (3,)),
                                                                                   ("n1", (0,))]
    assert assign_gpus(Allocation("j", (0,), 3, 1.0, 1.0), CLUSTER, held) is None  # held until they exit
    current = to_document(learners, 29501)
    grown = keep_gpus(Allocation("j", (0, 0, 1, 1), 1, 1.0, 1.0), CLUSTER, current, held_gpus([current]))
    assert grown is not None and [x.gpu_ids for x in grown] == [(1,), (3,), (0,), (1,)]
    shrunk = keep_gpus(Allocation("j", (0,), 1, 1.0, 1.0), CLUSTER, current, held_gpus([current]))
    assert shrunk is not None and [x.gpu_ids for x in shrunk] == [(1,)]
    assert to_allocation("j", current, {"n0": 0, "n1": 1}) == Allocation("j", (0, 0, 1), 1, 1.0, 1.0)
    assert to_allocation("j", current, {"n0": 0}) is None  # a node this cluster does not have


def test_two_gangs_never_share_a_rendezvous_port_pair_and_a_port_given_back_cools_down() -> None:
    clock = [NOW]
    bookings = Bookings(lambda: clock[0])
    first = pick_master_port(bookings.busy_ports())
    bookings.book("a", _doc_on(first, ("n0", [0])))
    second = pick_master_port(bookings.busy_ports())
    assert abs(second - first) >= 2  # port and port + 1 are one gang's
    bookings.book("b", _doc_on(second, ("n0", [1])))
    bookings.release("a", _doc_on(first, ("n0", [0])))
    assert first in bookings.busy_ports()  # learners that exited may still hold it a moment
    clock[0] += PORT_COOLDOWN_S + 1
    assert first not in bookings.busy_ports() and second in bookings.busy_ports()
    assert bookings.held() == {"n0": {1}}


def test_bookings_count_each_gpu_once_and_name_a_double_booking() -> None:
    bookings = Bookings(lambda: NOW)
    assert bookings.book("a", _doc(("n0", [0, 1]))) == []
    assert bookings.book("b", _doc(("n0", [1, 2]))) == [("n0", 1, "a")]
    bookings.release("b", _doc(("n0", [1, 2])))
    assert bookings.held() == {"n0": {0, 1}} and bookings.held_by() == {"a": 2}


def _doc_on(port: int, *learners: tuple[str, list[int]]) -> dict[str, Any]:
    return {**_doc(*learners), "master_port": port}


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(["fifo", "fair", "drf", "las", "srtf", "priority"]),
       steps=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 2),
                                st.sampled_from(["", "spread", "locality"]), st.sampled_from(["a", "b"]),
                                st.integers(0, 2), st.sampled_from([30.0, 700.0, 2000.0])), min_size=1, max_size=40))
def test_the_builders_session_decides_as_decide_does_round_after_round(
        policy: str, steps: list[tuple[int, int, int, str, str, int, float]]) -> None:
    """The loop decides through the builder's Session: whatever comes and goes (submissions, ends, starts,
    preemptions, jobs asking for locality, which switch the Session to its full mode and back), each plan
    is decide()'s on the same snapshot, its waits only the reasons that changed."""
    placer = PerJobPlacer(make_placer("pack"), PLACERS)
    pol = make_policy(policy)
    builder = SnapshotBuilder(CLUSTER, policy=pol, placer=placer)
    quotas = {"a": TenantQuota("a", 4), "b": TenantQuota("b", 2)}
    placements = {"": {}, "spread": {"strategy": "spread"}, "locality": {"locality": "relaxed"}}
    inputs: dict[str, JobInputs] = {}
    known: dict[str, object] = {}  # the reasons the plans gave so far
    clock = NOW
    for n, (action, gpus, learners, placement, tenant, priority, later) in enumerate(steps):
        clock += later
        if action <= 1:  # a submission
            job = f"j{n}"
            row = _row(job, submitted_at=clock, queued_since=clock, priority=priority)
            manifest = _manifest(learners=learners, resources={"gpus": gpus}, placement=placements[placement])
            inputs[job] = JobInputs(row, manifest, tenant)
            builder.update(job, inputs[job])
        elif action == 2 and builder.running:  # the oldest running job ends
            job = min(builder.running)
            builder.update(job, None)
            del inputs[job]
        snap = builder.build(clock, quotas)
        plan = builder.decide(snap)
        want = decide(snap, pol, placer)
        assert (plan.starts, plan.preempts, plan.resizes, plan.rejects) == \
            (want.starts, want.preempts, want.resizes, want.rejects)
        known.update((w.job_id, w.reason) for w in plan.waits)
        assert {w.job_id: known.get(w.job_id) for w in want.waits} == {w.job_id: w.reason for w in want.waits}
        for s in plan.starts:  # started: holds its GPUs (a pending start until its learners run)
            inputs[s.job_id] = JobInputs(inputs[s.job_id].row, inputs[s.job_id].manifest, inputs[s.job_id].tenant,
                                         PendingStart(s.job_id, s.allocation, clock))
            builder.update(s.job_id, inputs[s.job_id])
            known.pop(s.job_id, None)
        for p in plan.preempts:  # back in the queue, queued again now
            i = inputs[p.job_id]
            inputs[p.job_id] = JobInputs(_row(p.job_id, submitted_at=i.row.submitted_at, queued_since=clock,
                                              priority=i.row.priority, preemptions=1), i.manifest, i.tenant)
            builder.update(p.job_id, inputs[p.job_id])
        for r in plan.rejects:
            builder.update(r.job_id, None)
            del inputs[r.job_id]
            known.pop(r.job_id, None)


def test_ports_cool_down_in_the_order_they_were_given_back_and_a_start_skips_the_cooling_ones() -> None:
    clock = [NOW]
    bookings = Bookings(lambda: clock[0])
    given: list[int] = []
    for i in range(300):  # a stream of short jobs: hundreds of ports cooling at once
        port = bookings.pick_port(set())
        assert port not in given
        bookings.book(f"j{i}", _doc_on(port, ("n0", [0])))
        bookings.release(f"j{i}", _doc_on(port, ("n0", [0])))
        given.append(port)
        clock[0] += 0.05
    assert len(bookings.cooling) == 300 and set(given) <= bookings.busy_ports()
    clock[0] = NOW + PORT_COOLDOWN_S + 5.025  # the first 101 have cooled down, the rest not yet
    busy = bookings.busy_ports()
    assert not set(given[:101]) & busy and set(given[101:]) <= busy
    assert list(bookings.cooling) == given[101:]
    taken = bookings.pick_port({given[0]})
    assert taken not in given[101:] and taken != given[0]
