"""The locality, proportional and synergy placers, the CPU term of the performance model, and the
simulator's wake-up for jobs waiting for locality."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.scheduling import JobView, Snapshot, WaitReason, decide, make_placer, make_policy
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.placement.locality import LocalityPlacer
from loadmaster.scheduling.placement.synergy import SynergyPlacer
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import Simulator
from tests.helpers import cluster, job, queued, workload


def _snap(c: Cluster, j: JobView, clock: float = 0.0, gpus: list[float] | None = None,
          cpus: list[float] | None = None, mem: list[float] | None = None) -> Snapshot:
    return Snapshot.build(clock, c, c.gpu_capacity if gpus is None else np.array(gpus, dtype=float),
                          c.cpu_capacity if cpus is None else np.array(cpus, dtype=float),
                          c.mem_capacity if mem is None else np.array(mem, dtype=float), (j,), ())


def _place(placer: Placer, snap: Snapshot) -> Allocation | WaitReason:
    j = snap.queued[0]
    return placer.place(j, j.spec.learners, FreeCapacity(snap), snap)


# -- locality ---------------------------------------------------------------------------------------------

def test_locality_prefers_one_server_and_packs_tightly() -> None:
    c = cluster(8, 8, 8, racks=2)
    alloc = _place(LocalityPlacer(), _snap(c, queued(job("j", learners=2, gpus=2)), gpus=[8, 4, 6]))
    assert isinstance(alloc, Allocation) and alloc.nodes == {1}


def test_locality_waits_then_relaxes_to_the_rack_then_anywhere() -> None:
    placer = LocalityPlacer(node_wait_s=100, rack_wait_s=300)
    c = cluster(4, 4, 4, 4, racks=2)  # racks: r0 = nodes 0 and 2, r1 = nodes 1 and 3
    j = queued(job("j", learners=2, gpus=2))
    # Two free GPUs on each of two servers of one rack: no single server has room.
    same_rack = [2, 0, 2, 0]
    assert _place(placer, _snap(c, j, 0, same_rack)) is WaitReason.LOCALITY_WAIT
    assert _place(placer, _snap(c, j, 99, same_rack)) is WaitReason.LOCALITY_WAIT
    alloc = _place(placer, _snap(c, j, 100, same_rack))
    assert isinstance(alloc, Allocation) and alloc.nodes == {0, 2}
    # Room only across racks: it also waits out the rack threshold.
    across = [2, 2, 0, 0]
    assert _place(placer, _snap(c, j, 150, across)) is WaitReason.LOCALITY_WAIT
    alloc = _place(placer, _snap(c, j, 300, across))
    assert isinstance(alloc, Allocation) and alloc.nodes == {0, 1}
    # With no room at any level the reason is the ordinary one, not locality.
    assert _place(placer, _snap(c, j, 0, [1, 1, 1, 1])) is WaitReason.FRAGMENTATION
    # The strict variant never relaxes.
    assert _place(make_placer("locality-strict"), _snap(c, j, 1e9, across)) is WaitReason.LOCALITY_WAIT


def test_locality_does_not_wait_for_what_a_gang_can_never_get() -> None:
    # Two learners of 4 GPUs never fit one 4-GPU server: the rack level is allowed at once.
    c = cluster(4, 4, 4, 4, racks=2)
    j = queued(job("big", learners=2, gpus=4))
    alloc = _place(LocalityPlacer(), _snap(c, j, 0))
    assert isinstance(alloc, Allocation) and alloc.nodes == {0, 2}


def test_locality_next_change_and_decide_does_not_preempt_for_locality() -> None:
    placer = LocalityPlacer(node_wait_s=100, rack_wait_s=300)
    c = cluster(4, 4, racks=1)
    j = JobView(job("j", learners=2, gpus=2), queued_since=10.0)
    assert placer.next_change_s(j, _snap(c, j, 50)) == 110
    assert placer.next_change_s(j, _snap(c, j, 150)) == 310
    assert placer.next_change_s(j, _snap(c, j, 400)) is None
    assert make_placer("locality-strict").next_change_s(j, _snap(c, j, 50)) is None
    # A preemptive policy leaves running jobs alone for a job that only waits for locality.
    busy = JobView(job("busy", learners=2, gpus=2, tenant="B"), 0, allocation=Allocation("busy", (0, 1), 2, 0, 0),
                   rate=1.0)
    snap = Snapshot.build(50, c, np.array([2.0, 2.0]), c.cpu_capacity, c.mem_capacity, (j,), (busy,))
    plan = decide(snap, make_policy("fair"), placer)
    assert plan.preempts == () and plan.waits[0].reason is WaitReason.LOCALITY_WAIT


def test_simulator_wakes_up_when_locality_relaxes() -> None:
    # Two 3-GPU jobs leave one GPU free on each server until t=1000; a 2 x 1-GPU gang arriving at t=1 waits
    # for one server until its node wait ends at t=101, then runs across the two (no other event then).
    c = cluster(4, 4)
    jobs = [job("a", gpus=3, duration=1000), job("b", gpus=3, duration=1000),
            job("c", learners=2, gpus=1, duration=50, submit=1.0)]
    sim = Simulator(c, make_policy("fifo"), LocalityPlacer(node_wait_s=100, rack_wait_s=200), FailureModel(),
                    PerformanceModel(c, locality=False))
    rec = {r.spec.job_id: r for r in sim.run(workload(*jobs)).records}["c"]
    assert rec.first_start_s == pytest.approx(101)
    assert rec.wait_s == {"locality_wait": pytest.approx(100)}


# -- proportional and synergy -----------------------------------------------------------------------------

SYNERGY_SERVER = {"cpus": 24.0, "mem": 500.0}  # 8 GPUs, 24 CPUs, 500 GB (Synergy's server)


def test_proportional_gives_the_node_share_whatever_the_request() -> None:
    c = cluster(8, **SYNERGY_SERVER)
    alloc = _place(make_placer("proportional"), _snap(c, queued(job("j", gpus=2, cpus_per_learner=10))))
    assert isinstance(alloc, Allocation)
    assert (alloc.cpus_per_learner, alloc.mem_gb_per_learner) == (6.0, 125.0)
    # Spread over servers of different shapes, every learner gets the smaller share.
    mixed = Cluster((Node("a", 4, 16, 100), Node("b", 4, 8, 100)))
    alloc = _place(make_placer("proportional"), _snap(mixed, queued(job("k", learners=2, gpus=4))))
    assert isinstance(alloc, Allocation) and alloc.nodes == {0, 1} and alloc.cpus_per_learner == 8.0


def test_synergy_gives_image_jobs_more_and_language_jobs_fewer_cpus() -> None:
    c = cluster(8, **SYNERGY_SERVER)
    lang = queued(job("lang", gpus=4, model="Transformer", submit=0))
    image = queued(job("img", gpus=4, model="ResNet-18", submit=1))
    snap = Snapshot.idle(1, c, (lang, image))
    got = {s.job_id: s.allocation for s in decide(snap, make_policy("fifo"), make_placer("synergy")).starts}
    share = 24 / 8 * 4
    # The language job takes what it benefits from (1.5 CPUs per GPU), less than its share; the image job
    # gets its share plus what the language job left (6 of its 6 x 4 = 24 wanted).
    assert got["lang"].cpus_per_learner == 6.0 < share
    assert got["img"].cpus_per_learner == 18.0 > share
    prop = {s.job_id: s.allocation for s in decide(snap, make_policy("fifo"), make_placer("proportional")).starts}
    assert prop["lang"].cpus_per_learner == prop["img"].cpus_per_learner == share
    # Alone on a server it keeps the share of the free GPUs for later jobs, unless told not to reserve.
    alone = _snap(c, queued(job("img2", gpus=4, model="ResNet-18")))
    first = _place(SynergyPlacer(), alone)
    greedy = _place(SynergyPlacer(reserve=0.0), alone)
    assert isinstance(first, Allocation) and isinstance(greedy, Allocation)
    assert (first.cpus_per_learner, greedy.cpus_per_learner) == (12.0, 24.0)


def test_synergy_falls_back_toward_the_proportional_share() -> None:
    c = cluster(8, 8, **SYNERGY_SERVER)
    image = queued(job("img", gpus=4, model="ResNet-18"))
    # Neither server can give the 24 CPUs wanted; the one that can give more (16 of them) is chosen.
    alloc = _place(SynergyPlacer(), _snap(c, image, gpus=[4, 4], cpus=[12, 16]))
    assert isinstance(alloc, Allocation) and alloc.nodes == {1} and alloc.cpus_per_learner == 16.0
    # Not even the share fits: it waits, and says CPUs are the reason.
    assert _place(SynergyPlacer(), _snap(c, image, gpus=[4, 4], cpus=[8, 8])) is WaitReason.CPU_MEMORY
    # Two learners whose want fits only on two servers are spread there (Synergy-TUNE tries the want spread
    # before the lowered demand on one server).
    pair = queued(job("pair", learners=2, gpus=2, model="ResNet-18"))
    alloc = _place(SynergyPlacer(), _snap(c, pair, gpus=[4, 2], cpus=[18, 12]))
    assert isinstance(alloc, Allocation) and alloc.nodes == {0, 1} and alloc.cpus_per_learner == 12.0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([4.0, 16.0, 24.0, 64.0]),
                          st.sampled_from([32.0, 500.0])), min_size=1, max_size=5),
       st.data(), st.sampled_from(["ResNet-18", "Transformer", "DLRM", ""]), st.integers(1, 4),
       st.sampled_from([1, 2, 4]), st.sampled_from([0.0, 0.5, 1.0]))
def test_synergy_never_exceeds_free_cpus_or_memory(nodes: list[tuple[int, float, float]], data: st.DataObject,
                                                  model: str, learners: int, gpus: int, reserve: float) -> None:
    c = Cluster(tuple(Node(f"n{i}", g, cp, m, rack=f"r{i % 2}") for i, (g, cp, m) in enumerate(nodes)))
    free_g = [data.draw(st.integers(0, n.gpus)) for n in c.nodes]
    free_c = [data.draw(st.floats(0, n.cpus)) for n in c.nodes]
    free_m = [data.draw(st.floats(0, n.mem_gb)) for n in c.nodes]
    snap = _snap(c, queued(job("j", learners=learners, gpus=gpus, model=model)), 0, free_g, free_c, free_m)
    alloc = _place(SynergyPlacer(reserve), snap)
    if isinstance(alloc, WaitReason):
        return
    assert alloc.learners == learners
    for node, k in alloc.per_node().items():
        assert k * gpus <= free_g[node]
        assert k * alloc.cpus_per_learner <= free_c[node] + 1e-6
        assert k * alloc.mem_gb_per_learner <= free_m[node] + 1e-6
    FreeCapacity(snap).take(alloc)  # the core's own check


def test_cpu_factor_compares_given_cpus_with_the_family_want() -> None:
    perf = PerformanceModel(cluster(8))
    image = job("i", gpus=2, model="ResNet-18")  # wants 6 x 2 = 12 CPUs, sensitivity 0.9
    lang = job("l", gpus=2, model="Transformer")  # wants 1.5 x 2 = 3 CPUs
    assert perf.cpu_factor(image, Allocation("i", (0,), 2, 0.0, 0.0)) == 1.0  # no CPU accounting
    assert perf.cpu_factor(image, Allocation("i", (0,), 2, 12.0, 0.0)) == 1.0
    assert perf.cpu_factor(image, Allocation("i", (0,), 2, 6.0, 0.0)) == pytest.approx(0.5 ** 0.9)
    assert perf.cpu_factor(lang, Allocation("l", (0,), 2, 3.0, 0.0)) == 1.0
    assert perf.cpu_factor(lang, Allocation("l", (0,), 2, 1.5, 0.0)) == pytest.approx(0.5 ** 0.15)


def _mix(jobs: int, seed: int) -> list[JobSpec]:
    """CPU-sensitive (ResNet-18) and insensitive (Transformer) jobs of 1-8 GPUs, offered at 80% load of 16x8."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 8], size=jobs, p=[0.7, 0.1, 0.15, 0.05])
    duration = np.clip(np.round(rng.lognormal(np.log(3600.0), 1.0, size=jobs)), 300, 86400)
    submit = np.sort(np.round(rng.uniform(0, float((gpus * duration).sum()) / (128 * 0.8), size=jobs)))
    models = np.where(rng.random(jobs) < 0.5, "ResNet-18", "Transformer")
    return [job(f"j{i}", gpus=int(gpus[i]), duration=float(duration[i]), submit=float(submit[i]),
                model=str(models[i]), cpus_per_learner=3.0 * int(gpus[i])) for i in range(jobs)]


def test_synergy_beats_proportional_on_a_mixed_workload() -> None:
    c = cluster(*[8] * 16, **SYNERGY_SERVER)
    w = workload(*_mix(400, seed=0))
    avg = {}
    for name in ("proportional", "synergy"):
        res = Simulator(c, make_policy("fifo"), make_placer(name), FailureModel(), PerformanceModel(c)).run(w)
        jcts = [r.jct_s for r in res.records if r.jct_s is not None]
        assert len(jcts) == 400
        avg[name] = sum(jcts) / len(jcts)
    assert avg["synergy"] < avg["proportional"]
