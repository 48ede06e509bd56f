"""FreeLedger, the free arrays' sums, largest free-GPU count and free-GPU buckets kept by a shell across
events: after any sequence of starts and ends they must equal the values recomputed from the arrays, and a
snapshot given them must decide as one that computes them itself (pack's tightest fit from the buckets
included)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import JobSpec
from loadmaster.scheduling import Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import (
    GAVE_UP,
    failure_reason,
    tightest_by_buckets,
    tightest_node,
    whole_gang_nodes,
)
from loadmaster.scheduling.snapshot import FreeLedger, JobView
from tests.scheduling.test_invariants import snapshots

_CAP_G, _CAP_C, _CAP_M = 8.0, 32.0, 96.5


@settings(max_examples=150, deadline=None)
@given(servers=st.integers(1, 12),
       steps=st.lists(st.tuples(st.integers(0, 11), st.integers(1, 8), st.sampled_from([0.0, 1.5, 4.0, 0.1]),
                                st.sampled_from([0.0, 2.25, 10.0, 0.3]), st.booleans()), max_size=80))
def test_the_ledger_equals_the_recomputed_values_after_starts_and_ends(
        servers: int, steps: list[tuple[int, int, float, float, bool]]) -> None:
    gpus = np.full(servers, _CAP_G)
    cpus = np.full(servers, _CAP_C)
    mem = np.full(servers, _CAP_M)
    ledger = FreeLedger(gpus, cpus, mem)
    held: list[tuple[int, int, float, float]] = []
    for node, g, c, m, end in steps:
        if end and held:  # an end: give back the oldest holding
            n, g, c, m = held.pop(0)
            sign = -1
        else:
            n = node % servers
            if gpus[n] < g or cpus[n] < c or mem[n] < m:
                continue
            held.append((n, g, c, m))
            sign = 1
        had = float(gpus[n])
        assert ledger.shift_gpus(gpus, n, sign * g) == had - sign * g == gpus[n]
        had_c, had_m = float(cpus[n]), float(mem[n])
        assert ledger.shift_cpus_mem(cpus, mem, n, -sign * c, -sign * m) == (had_c - sign * c, had_m - sign * m)
        assert (cpus[n], mem[n]) == (had_c - sign * c, had_m - sign * m)
        tg, tc, tm, top = ledger.totals()
        assert tg == float(gpus.sum())
        assert top == float(gpus.max())
        assert abs(tc - float(cpus.sum())) < 1e-9
        assert abs(tm - float(mem.sum())) < 1e-9
        assert {k: v for k, v in ledger.buckets.items()} == _buckets(gpus)
        assert list(ledger.buckets) == sorted(ledger.buckets)  # the counts in rising order (tightest_by_buckets)


@settings(max_examples=150, deadline=None)
@given(servers=st.integers(1, 12), cpus0=st.sampled_from([0.0, 32.0, 0.5]),
       steps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 8), st.booleans()), max_size=80))
def test_moving_gpus_alone_is_moving_them_with_zero_cpus_and_memory(
        servers: int, cpus0: float, steps: list[tuple[int, int, bool]]) -> None:
    """shift_gpus() alone (the simulator's one-learner, GPU-only start and end) leaves the arrays and the
    ledger exactly as shift_gpus() with shift_cpus_mem() of zero CPUs and memory do (its path for any other
    gang): totals bit for bit, buckets in the same order."""
    gpus = np.full(servers, _CAP_G)
    cpus = np.full(servers, cpus0)
    mem = np.zeros(servers)
    full, short = FreeLedger(gpus, cpus, mem), FreeLedger(gpus, cpus, mem)
    shifted = gpus.copy()  # the array short's shift_gpus() moves
    for node, g, give_back in steps:
        n = node % servers
        sign = -1 if give_back and gpus[n] + g <= _CAP_G else 1
        if sign == 1 and gpus[n] < g:
            continue
        left = full.shift_gpus(gpus, n, sign * g)
        full.shift_cpus_mem(cpus, mem, n, -sign * 0.0, -sign * 0.0)  # as hold() computes them for c = m = 0
        assert short.shift_gpus(shifted, n, sign * g) == left
        assert shifted.tolist() == gpus.tolist()
        assert cpus.tolist() == [cpus0] * servers and mem.tolist() == [0.0] * servers
        assert short.totals() == full.totals()
        assert [(k, list(v)) for k, v in short.buckets.items()] == [(k, list(v)) for k, v in full.buckets.items()]
        assert {k: v for k, v in short.buckets.items()} == _buckets(gpus)


def _buckets(gpus: np.ndarray) -> dict[float, list[int]]:
    out: dict[float, list[int]] = {}
    for node, g in enumerate(gpus.tolist()):
        out.setdefault(g, []).append(node)
    return out


def test_reset_recounts_arrays_overwritten_wholesale() -> None:
    gpus, cpus, mem = np.array([8.0, 8.0]), np.array([4.0, 4.0]), np.array([1.0, 1.0])
    ledger = FreeLedger(gpus, cpus, mem)
    gpus[:] = [3.0, 5.0]
    cpus[:] = [1.0, 2.0]
    ledger.reset(gpus, cpus, mem)
    assert ledger.totals() == (8.0, 3.0, 2.0, 5.0)


def test_an_empty_cluster_has_no_largest_server() -> None:
    empty = np.zeros(0)
    assert FreeLedger(empty, empty, empty).totals() == (0.0, 0.0, 0.0, 0.0)


@settings(max_examples=60, deadline=None)
@given(snap=snapshots(), policy_name=st.sampled_from(["fifo", "drf", "las", "themis"]),
       placement=st.sampled_from(["pack", "spread"]))
def test_a_snapshot_given_the_ledger_decides_as_one_that_sums(snap: Snapshot, policy_name: str,
                                                              placement: str) -> None:
    ledger = FreeLedger(snap.free_gpus, snap.free_cpus, snap.free_mem)
    given_totals = Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem,
                                  snap.queued, snap.running, snap.tenants, free_totals=ledger.totals(),
                                  free_buckets=ledger.buckets)
    free = FreeCapacity(given_totals)
    assert free.total_gpus == float(snap.free_gpus.sum())
    assert free.max_node_gpus == (float(snap.free_gpus.max()) if snap.free_gpus.size else 0.0)
    a = decide(snap, make_policy(policy_name), make_placer(placement))
    b = decide(given_totals, make_policy(policy_name), make_placer(placement))
    assert a == b


@settings(max_examples=200, deadline=None)
@given(snap=snapshots(), learners=st.integers(1, 4), gpus=st.integers(1, 8), cpus=st.sampled_from([0.0, 1.0, 6.0]),
       mem=st.sampled_from([0.0, 4.0, 40.0]), typed=st.booleans())
def test_the_tightest_server_from_buckets_is_the_scanned_one(snap: Snapshot, learners: int, gpus: int, cpus: float,
                                                              mem: float, typed: bool) -> None:
    ledger = FreeLedger(snap.free_gpus, snap.free_cpus, snap.free_mem)
    job = JobView(JobSpec("j", "t", 0.0, learners, gpus, 10.0, cpus_per_learner=cpus, mem_gb_per_learner=mem), 0.0)
    free = FreeCapacity(snap)
    mask = snap.cluster.type_masks[0][1] if typed and snap.cluster.type_masks else None
    whole = whole_gang_nodes(job, learners, free, snap)
    if mask is not None:
        whole &= mask
    found = tightest_by_buckets(ledger.buckets, job, learners, free, mask)
    if free.gpus.size <= 64:  # it turns down at most 64 servers before leaving it to the scan
        assert found != GAVE_UP
    assert found == GAVE_UP or found == tightest_node(whole, free)
    span = None if mask is None else snap.cluster.mask_ranges.get(id(mask))
    if span is not None:  # the type's servers are consecutive: the walk cut to them finds the same server
        in_span = tightest_by_buckets(ledger.buckets, job, learners, free, mask, span)
        assert in_span == GAVE_UP or in_span == tightest_node(whole, free)


def test_a_walk_cut_to_one_types_servers_never_looks_at_the_others() -> None:
    """Philly's shape: many small servers of one type, then the large ones of another. A one-GPU job on the
    large type: walking the buckets under the mask turns down every small server and gives up (leaving it
    to the array scan); cut to the type's span, the walk finds the server at once."""
    servers = [(2, "12gb", 2)] * 100 + [(8, "24gb", 8)] * 10
    clu = cluster_of(servers)
    free_gpus = np.array([float(free) for _, _, free in servers])
    zeros = np.zeros_like(free_gpus)
    ledger = FreeLedger(free_gpus, zeros, zeros)
    snap = Snapshot.build(0.0, clu, free_gpus, zeros, zeros, (), (), free_totals=ledger.totals(),
                          free_buckets=ledger.buckets)
    job = JobView(JobSpec("j", "t", 0.0, 1, 1, 10.0), 0.0)
    mask = clu.type_mask_of["24gb"]
    free = FreeCapacity(snap)
    assert tightest_by_buckets(ledger.buckets, job, 1, free, mask) == GAVE_UP
    assert tightest_by_buckets(ledger.buckets, job, 1, free, mask, clu.mask_ranges[id(mask)]) == 100


@settings(max_examples=300, deadline=None)
@given(servers=st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.sampled_from(["a", "b", "c"]), st.integers(0, 8)),
                        min_size=1, max_size=30),
       grouped=st.booleans(), learners=st.integers(1, 12), gpus=st.integers(1, 8), prefer=st.booleans())
def test_a_spanning_placement_from_buckets_is_the_scanned_one(servers: list[tuple[int, str, int]], grouped: bool,
                                                              learners: int, gpus: int, prefer: bool) -> None:
    """pack places a gang given the free-GPU buckets (its multi-server search and failure reasons counted from
    them, per GPU type whose servers are consecutive) exactly as from the free arrays alone."""
    if grouped:  # a machine list grouped by type (Philly's): each type's servers consecutive
        servers = sorted(servers, key=lambda s: s[1])
    clu = cluster_of(servers)
    free_gpus = np.array([float(min(free, cap)) for cap, _, free in servers])
    zeros = np.zeros_like(free_gpus)
    ledger = FreeLedger(free_gpus, zeros, zeros)
    plain = Snapshot.build(0.0, clu, free_gpus, zeros, zeros, (), ())
    kept = Snapshot.build(0.0, clu, free_gpus, zeros, zeros, (), (), free_totals=ledger.totals(),
                          free_buckets=ledger.buckets)
    job = JobView(JobSpec("j", "t", 0.0, learners, gpus, 10.0), 0.0)
    order = list(reversed(clu.gpu_types)) if prefer else None
    pack = make_placer("pack")
    assert (pack.place(job, learners, FreeCapacity(kept), kept, order)
            == pack.place(job, learners, FreeCapacity(plain), plain, order))


def cluster_of(servers: list[tuple[int, str, int]]) -> Cluster:
    return Cluster(tuple(Node(f"n{i}", cap, 0.0, 0.0, gpu_type=t) for i, (cap, t, _) in enumerate(servers)))


@settings(max_examples=200, deadline=None)
@given(snap=snapshots(), learners=st.integers(1, 6), gpus=st.integers(1, 8), cpus=st.sampled_from([0.0, 6.0, 40.0]))
def test_a_failure_reason_from_buckets_is_the_scanned_one(snap: Snapshot, learners: int, gpus: int,
                                                           cpus: float) -> None:
    """failure_reason() counts the learners every server takes from the free-GPU buckets where the snapshot has
    them: the same reason as from the arrays."""
    ledger = FreeLedger(snap.free_gpus, snap.free_cpus, snap.free_mem)
    with_buckets = Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem,
                                  snap.queued, snap.running, snap.tenants, free_totals=ledger.totals(),
                                  free_buckets=ledger.buckets)
    job = JobView(JobSpec("j", "t", 0.0, learners, gpus, 10.0, cpus_per_learner=cpus), 0.0)
    assert (failure_reason(job, learners, FreeCapacity(with_buckets), with_buckets)
            == failure_reason(job, learners, FreeCapacity(snap), snap))
