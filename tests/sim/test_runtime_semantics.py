"""A recorded runtime is the runtime at the resources the job requested (docs/performance-model.md): a job
given its request runs at its recorded speed under every placer; more CPUs, up to its family's want, speed
an image job up; fewer slow it down."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.profiles import PROFILES, cpu_speed, family_of, max_cpu_speed
from loadmaster.scheduling import make_placer, make_policy
from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.placement import PLACERS
from loadmaster.scheduling.snapshot import Snapshot
from loadmaster.sim.failures import FailureModel
from loadmaster.sim.perf import PerformanceModel
from loadmaster.sim.simulator import Simulator
from tests.helpers import cluster, job, queued, workload

SYNERGY_SERVER = {"cpus": 24.0, "mem": 500.0}  # Synergy's server: 8 GPUs, 24 CPUs, 500 GB
ROOMY = {"cpus": 96.0, "mem": 500.0}  # CPUs to spare: synergy gives a learner its whole want
IMAGE = PROFILES["image"]  # ResNet: wants 6 CPUs per GPU, sensitivity 0.9


def _request_the_placer_gives(placement: str, gpus: int) -> float:
    """CPUs per learner a placer gives a ResNet learner of `gpus` GPUs on an idle server of ROOMY: the
    proportional share (12 per GPU) under proportional, the family's want (6 per GPU) under synergy, and the
    request itself under every placer that honours requests (any amount: 2 per GPU here)."""
    if placement == "proportional":
        return 12.0 * gpus
    if placement == "synergy":
        return IMAGE.cpus_wanted(gpus)
    return 2.0 * gpus


@pytest.mark.parametrize("placement", list(PLACERS))
def test_a_job_given_its_request_runs_its_recorded_runtime_under_every_placer(placement: str) -> None:
    c = cluster(8, 8, **ROOMY)
    spec = job("r", learners=2, gpus=2, duration=1000.0, model="ResNet-50",
               cpus_per_learner=_request_the_placer_gives(placement, 2), mem_gb_per_learner=20.0)
    plan = decide(Snapshot.idle(0.0, c, (queued(spec),)), make_policy("fifo"), make_placer(placement))
    [start] = plan.starts
    assert start.allocation.cpus_per_learner == spec.cpus_per_learner  # the placer gave the request
    res = Simulator(c, make_policy("fifo"), make_placer(placement), FailureModel(),
                    PerformanceModel(c, locality=False)).run(workload(spec))
    assert res.records[0].jct_s == 1000.0


def test_the_issue_example_replays_as_recorded() -> None:
    """Four 4-learner ResNet-50 jobs of 100 s (1 CPU per learner) on one 8-GPU server, fifo + pack: two run
    at a time, each at its recorded speed, so the makespan is 200 s (it was 1,003 s when the recorded
    runtime was read as the runtime at the family's want of 6 CPUs per GPU)."""
    c = cluster(8, **SYNERGY_SERVER)
    specs = [job(f"j{i}", learners=4, gpus=1, duration=100.0, model="ResNet-50", cpus_per_learner=1.0)
             for i in range(4)]
    res = Simulator(c, make_policy("fifo"), make_placer("pack"), FailureModel(), PerformanceModel(c)).run(
        workload(*specs))
    assert sorted(r.finish_s for r in res.records) == [100.0, 100.0, 200.0, 200.0]


def _alloc(cpus: float, gpus: int = 2) -> Allocation:
    return Allocation("i", (0,), gpus, cpus, 0.0)


def test_more_cpus_up_to_the_want_speed_an_image_job_up_and_fewer_slow_it_down() -> None:
    perf = PerformanceModel(cluster(8))
    image = job("i", gpus=2, model="ResNet-18", cpus_per_learner=4.0)  # wants 12, asked for 4
    assert perf.cpu_factor(image, _alloc(4.0)) == 1.0
    assert perf.cpu_factor(image, _alloc(8.0)) == pytest.approx(2.0 ** 0.9)
    assert perf.cpu_factor(image, _alloc(12.0)) == pytest.approx(3.0 ** 0.9)
    assert perf.cpu_factor(image, _alloc(48.0)) == pytest.approx(3.0 ** 0.9)  # flat past the want
    assert perf.cpu_factor(image, _alloc(2.0)) == pytest.approx(0.5 ** 0.9)
    lang = job("l", gpus=2, model="Transformer", cpus_per_learner=3.0)  # asked for its want
    assert perf.cpu_factor(lang, _alloc(24.0)) == 1.0
    assert perf.cpu_factor(lang, _alloc(1.5)) == pytest.approx(0.5 ** 0.15)
    above = job("a", gpus=2, model="ResNet-18", cpus_per_learner=20.0)  # asked for more than it benefits from
    assert perf.cpu_factor(above, _alloc(12.0)) == 1.0
    assert perf.cpu_factor(above, _alloc(6.0)) == pytest.approx(0.5 ** 0.9)


def test_a_trace_without_cpu_requests_is_read_as_the_want_met() -> None:
    perf = PerformanceModel(cluster(8))
    image = job("i", gpus=2, model="ResNet-18")  # Philly and Gavel record no CPUs
    assert perf.cpu_factor(image, _alloc(0.0)) == 1.0  # a placer without CPU accounting
    assert perf.cpu_factor(image, _alloc(12.0)) == 1.0
    assert perf.cpu_factor(image, _alloc(6.0)) == pytest.approx(0.5 ** 0.9)
    assert PerformanceModel(cluster(8), cpu=False).cpu_factor(image, _alloc(1.0)) == 1.0


def test_a_learner_without_gpus_wants_its_request() -> None:
    perf = PerformanceModel(cluster(8))
    cpu_only = JobSpec("c", "t", 0.0, 1, 0, 100.0, cpus_per_learner=8.0, model="ResNet-18")
    assert perf.cpu_factor(cpu_only, Allocation("c", (0,), 0, 16.0, 0.0)) == 1.0
    assert perf.cpu_factor(cpu_only, Allocation("c", (0,), 0, 4.0, 0.0)) == pytest.approx(0.5 ** 0.9)


def test_a_cpu_aware_placer_that_gives_more_than_the_request_finishes_sooner() -> None:
    c = cluster(8, **ROOMY)
    spec = job("i", gpus=1, duration=1000.0, model="ResNet-18", cpus_per_learner=2.0, mem_gb_per_learner=10.0)
    jct = {}
    for placement in ("pack", "synergy"):
        res = Simulator(c, make_policy("fifo"), make_placer(placement), FailureModel(), PerformanceModel(c)).run(
            workload(spec))
        jct[placement] = res.records[0].jct_s
    assert jct["pack"] == 1000.0
    assert jct["synergy"] == pytest.approx(1000.0 / 3.0 ** 0.9)  # 6 CPUs given, 2 asked for


@given(model=st.sampled_from(["ResNet-18", "Transformer", "Recommendation", "A3C", "job"]),
       gpus=st.integers(0, 8), requested=st.floats(0.0, 64.0), given_cpus=st.floats(0.0, 64.0))
def test_cpu_speed_is_one_at_the_request_monotone_and_bounded(model: str, gpus: int, requested: float,
                                                              given_cpus: float) -> None:
    speed = cpu_speed(model, gpus, requested, given_cpus)
    assert 0.0 < speed <= max_cpu_speed(model, gpus, requested) + 1e-12
    if requested > 0:
        assert cpu_speed(model, gpus, requested, requested) == pytest.approx(1.0)
    if given_cpus > 0:  # 0 CPUs given means no CPU accounting at all (speed 1), not a starved learner
        assert cpu_speed(model, gpus, requested, given_cpus + 1.0) >= speed - 1e-12


def test_a_family_is_found_once_per_model_but_its_profile_read_each_time() -> None:
    """family_of caches which family a model name is in, not the numbers: replacing a profile (what
    bench/results_synergy.py --what-if does) takes effect at once."""
    original = PROFILES["image"]
    assert family_of("ResNet-18") is original
    PROFILES["image"] = dataclasses.replace(original, cpus_per_gpu=9.0)
    try:
        assert family_of("ResNet-18").cpus_per_gpu == 9.0
    finally:
        PROFILES["image"] = original
    assert family_of("ResNet-18") is original


def test_a_snapshot_without_copies_is_read_only_and_sees_the_shells_arrays() -> None:
    c = cluster(4, 4)
    free = c.gpu_capacity.astype(float)
    snap = Snapshot.build(0.0, c, free, c.cpu_capacity.astype(float), c.mem_capacity.astype(float), (), (),
                          copy=False)
    with pytest.raises(ValueError):
        snap.free_gpus[0] = 0.0
    free[0] = 1.0  # a shell that changes its arrays only once done with the snapshot
    assert snap.free_gpus[0] == 1.0
    assert Snapshot.build(0.0, c, free, c.cpu_capacity, c.mem_capacity, (), ()).free_gpus is not free
