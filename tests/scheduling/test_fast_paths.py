"""The scheduling core's shortcuts give the same plans as the long way round: jobs decided alike by class,
victims released lazily and restored from a saved state, SRTF's gains and Themis' rho computed with numpy."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Hashable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.scheduling import JobView, Snapshot, decide, make_placer, make_policy
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.policies import POLICIES, Policy
from loadmaster.scheduling.policies import themis as themis_module
from loadmaster.scheduling.policies.las import LasPolicy
from loadmaster.scheduling.policies.srtf import SrtfPolicy
from loadmaster.scheduling.policies.themis import ThemisPolicy
from loadmaster.sim.quotas import quotas_by_demand
from tests.scheduling.test_invariants import snapshots


def one_by_one(policy: Policy) -> Policy:
    """The same policy with no decision classes: decide() tries every job itself."""

    def no_class(snap: Snapshot, job: JobView) -> Hashable | None:
        return None

    policy.decision_class = no_class  # type: ignore[method-assign]
    return policy


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)))
def test_jobs_decided_by_class_get_the_plan_each_would_get(snap: Snapshot, policy: str, placement: str) -> None:
    fast = decide(snap, make_policy(policy), make_placer(placement))
    slow = decide(snap, one_by_one(make_policy(policy)), make_placer(placement))
    assert fast == slow


def _busy_world(seed: int, queued: int = 300) -> Snapshot:
    """A full two-type cluster with many jobs of few shapes waiting: classes repeat, victims abound."""
    rng = random.Random(seed)
    c = Cluster(tuple(Node(f"n{i}", 4, 32.0, 128.0, gpu_type=("v100", "k80")[i % 2], rack=f"r{i % 4}")
                      for i in range(24)))

    def spec(i: int, prefix: str) -> JobSpec:
        gpus = rng.choice([1, 1, 2, 4])
        return JobSpec(job_id=f"{prefix}{i}", tenant=rng.choice("ABC"), submit_time_s=float(rng.randint(0, 5000)),
                       learners=rng.choice([1, 1, 2]), gpus_per_learner=gpus, duration_s=float(rng.randint(60, 20000)),
                       cpus_per_learner=rng.choice([0.0, 4.0]), priority=rng.choice([0, 0, 1]),
                       type_speed=(("v100", 1.0), ("k80", rng.choice([0.0, 0.3, 0.5]))) if rng.random() < 0.3 else None)

    first = [spec(i, "r") for i in range(60)]
    warm = decide(Snapshot.idle(0, c, tuple(JobView(s, 0) for s in first)), make_policy("fifo"), make_placer("pack"))
    by_id = {s.job_id: s for s in first}
    clock = 6000.0
    running = []
    for st_ in warm.starts:
        s = by_id[st_.job_id]
        started = float(rng.randint(0, 5000))
        running.append(JobView(s, s.submit_time_s, allocation=st_.allocation, work_done_s=float(rng.randint(0, 3000)),
                               rate=rng.choice([1.0, 0.8]), as_of=started, attained_gpu_s=float(rng.randint(0, 9000)),
                               started_at=started))
    waiting = tuple(JobView(s, s.submit_time_s, as_of=s.submit_time_s, work_done_s=float(rng.choice([0, 0, 500])),
                            attained_gpu_s=float(rng.choice([0, 0, 4000])))
                    for s in (spec(i, "q") for i in range(queued)))
    quotas = quotas_by_demand(Workload([*first, *(w.spec for w in waiting)], LoadReport("t")), c.total_gpus)
    return Snapshot.of_running(clock, c, waiting, tuple(running), quotas)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("placement", ["pack", "locality", "synergy"])
def test_busy_clusters_get_the_same_plan_by_class(seed: int, policy: str, placement: str) -> None:
    snap = _busy_world(seed)
    fast = decide(snap, make_policy(policy), make_placer(placement))
    slow = decide(snap, one_by_one(make_policy(policy)), make_placer(placement))
    assert fast == slow


def every_attempt(policy: Policy) -> Policy:
    """The same policy, with no decision classes and taken to hold others back (may_block_others; its
    blocks_others() answers as before, a policy without one holds nobody back): decide() then attempts every
    job (its short cut for gangs larger than every free GPU is off)."""
    one_by_one(policy)
    base = type(policy)
    policy.__class__ = type(f"EveryAttempt{base.__name__}", (base,), {"may_block_others": property(lambda self: True)})
    return policy


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(PLACERS)), st.booleans())
def test_gangs_larger_than_the_free_gpus_wait_as_an_attempt_says(snap: Snapshot, policy: str, placement: str,
                                                                 migrate: bool) -> None:
    fast = decide(snap, make_policy(policy), make_placer(placement), migrate)
    slow = decide(snap, every_attempt(make_policy(policy)), make_placer(placement), migrate)
    assert fast == slow


def test_plain_fifo_never_blocks_and_strict_fifo_may() -> None:
    assert not make_policy("fifo").may_block_others and make_policy("fifo-strict").may_block_others
    assert every_attempt(make_policy("fifo")).may_block_others
    assert not make_policy("srtf").may_block_others  # keeps Policy.blocks_others


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["themis", "las", "srtf", "fifo"])
def test_busy_clusters_get_the_plan_of_every_attempt(seed: int, policy: str) -> None:
    snap = _busy_world(seed)
    for migrate in (False, True):
        assert decide(snap, make_policy(policy), make_placer("pack"), migrate) == decide(
            snap, every_attempt(make_policy(policy)), make_placer("pack"), migrate)


@pytest.mark.parametrize("seed", range(4))
def test_themis_ranks_a_long_queue_as_it_ranks_a_short_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _busy_world(seed, queued=200)
    assert len(snap.queued) >= themis_module._VECTOR_MIN
    vec = ThemisPolicy()
    ranked, offered, rho = list(vec.rank(snap)), vec.offered(snap), {j.job_id: vec.rho(snap, j) for j in snap.queued}
    monkeypatch.setattr(themis_module, "_VECTOR_MIN", 10**9)
    loop = ThemisPolicy()
    assert [j.job_id for j in loop.rank(snap)] == [j.job_id for j in ranked]
    assert loop.offered(snap) == offered
    assert {j.job_id: loop.rho(snap, j) for j in snap.queued} == rho  # bit for bit


@pytest.mark.parametrize("seed", range(4))
def test_srtf_gains_are_displaceable_of_each_job(seed: int) -> None:
    snap = _busy_world(seed)
    pol = SrtfPolicy()
    gains = pol._by_snapshot(snap).gains  # the arrays kept per running tuple, gains per snapshot
    assert gains.tolist() == [pol.displaceable(snap, v) for v in snap.running]
    # Candidates come highest gain first, the most recently started first among equals.
    q = snap.queued[0]
    got = list(pol.victim_candidates(snap, pol.gate(snap), q, lambda: ()))
    want = sorted((v for v in snap.running if pol.may_preempt(snap, pol.gate(snap), q, v)),
                  key=lambda v: (pol.displaceable(snap, v), v.started_at or 0.0), reverse=True)
    assert [v.job_id for v in got] == [v.job_id for v in want]


def test_take_checks_only_the_allocation_nodes_and_changes_nothing_when_it_fails() -> None:
    c = Cluster((Node("a", 4, 8.0, 32.0), Node("b", 4, 8.0, 32.0)))
    free = FreeCapacity(Snapshot.idle(0, c))
    free.take(Allocation("x", (0, 0), 2, 4.0, 16.0))
    before = (free.gpus.copy(), free.cpus.copy(), free.mem.copy(), free.total_gpus)
    with pytest.raises(ValueError, match="exceeds free capacity"):
        free.take(Allocation("y", (0, 1), 1, 1.0, 1.0))  # node a has no CPUs left
    assert all(np.array_equal(x, y) for x, y in zip(before[:3], (free.gpus, free.cpus, free.mem), strict=True))
    assert free.total_gpus == before[3]


def test_restore_undoes_tentative_releases_and_keeps_the_version() -> None:
    c = Cluster((Node("a", 4, 8.0, 32.0), Node("b", 4, 8.0, 32.0)))
    free = FreeCapacity(Snapshot.idle(0, c))
    held = Allocation("x", (0, 1), 2, 1.5, 3.0)
    free.take(held)
    saved = free.save()
    version, gpus = free.version, free.gpus
    free.give(held, grow=False)
    assert free.max_node_gpus == 4
    free.restore(saved)
    assert free.gpus is gpus and free.gpus.tolist() == [2.0, 2.0] and free.cpus.tolist() == [6.5, 6.5]
    assert free.total_gpus == 4 and free.max_node_gpus == 2 and free.version == version


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["las", "las-het"])
@pytest.mark.parametrize("max_loss_s", [60.0, None])
def test_las_candidates_are_the_displaceable_lower_queue_head_of_every_running_job(
        seed: int, policy: str, max_loss_s: float | None) -> None:
    snap = _busy_world(seed)
    pol = make_policy(policy)
    assert isinstance(pol, LasPolicy)
    pol.max_loss_s = max_loss_s
    pol.thresholds = (1000.0, 5000.0)  # three queues, so that some jobs sit in each
    assert pol._displaceable_all(snap, snap.running) == [pol.displaceable(snap, v) for v in snap.running]
    everyone = sorted(snap.running, key=lambda v: pol.victim_key(snap, v))
    for job in snap.queued[:50]:
        want = [v.job_id for v in everyone
                if pol.queue(snap, v) > pol.queue(snap, job) and pol.displaceable(snap, v)]
        # The reference walks the whole sorted list; those victims are its head.
        assert want == [v.job_id for v in everyone[:len(want)]]
        got = [v.job_id for v in pol.victim_candidates(snap, pol.gate(snap), job, lambda: everyone)]
        assert got == want


def test_themis_breaks_ties_by_job_id_on_the_long_path_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # Twins (same submit time, size and work) tie on rho and on remaining GPU-time: the id decides.
    base = _busy_world(0, queued=40)
    twins = tuple(JobView(dataclasses.replace(j.spec, job_id=f"{j.job_id}-{k}"), j.queued_since, as_of=j.as_of,
                          work_done_s=j.work_done_s, attained_gpu_s=j.attained_gpu_s)
                  for j in base.queued for k in ("b", "a", "c"))
    snap = Snapshot.build(base.clock, base.cluster, base.free_gpus, base.free_cpus, base.free_mem, twins,
                          base.running, base.tenants)
    vec = [j.job_id for j in ThemisPolicy().rank(snap)]
    monkeypatch.setattr(themis_module, "_VECTOR_MIN", 10**9)
    assert vec == [j.job_id for j in ThemisPolicy().rank(snap)]


def test_free_capacity_copies_the_snapshot_arrays_on_first_change_only() -> None:
    # FreeCapacity reads the snapshot's arrays until it changes something, and never writes them.
    c = Cluster((Node("a", 4, 8.0, 32.0), Node("b", 4, 8.0, 32.0)))
    snap = Snapshot.idle(0, c)
    before = (snap.free_gpus.copy(), snap.free_cpus.copy(), snap.free_mem.copy())
    for change in ("take", "give", "restore"):
        free = FreeCapacity(snap)
        assert free.gpus is snap.free_gpus  # nothing copied yet
        alloc = Allocation("x", (0, 1), 2, 1.5, 3.0)
        if change == "take":
            free.take(alloc)
            assert free.gpus.tolist() == [2.0, 2.0] and free.total_gpus == 4.0
        elif change == "give":
            free.give(alloc)
            assert free.gpus.tolist() == [6.0, 6.0] and free.version == 1
        else:
            saved = free.save()
            free.restore(saved)
            free.take(alloc)
            free.restore(saved)
            assert free.gpus.tolist() == [4.0, 4.0]
        assert free.gpus is not snap.free_gpus
        after = (snap.free_gpus, snap.free_cpus, snap.free_mem)
        assert all(np.array_equal(x, y) for x, y in zip(before, after, strict=True))
