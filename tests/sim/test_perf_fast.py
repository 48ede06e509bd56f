"""The performance model's shortcuts (a one-server gang, CPU factors kept per key) give the rates of the
general formula, to the last bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.profiles import cpu_speed
from loadmaster.sim.perf import PerformanceModel

CLUSTER = Cluster(tuple(Node(f"n{i}", 4, 32.0, 256.0, gpu_type=("v100", "k80")[i % 2], rack=f"r{i // 3}")
                        for i in range(6)))


def general_rate(model: PerformanceModel, spec: JobSpec, alloc: Allocation) -> float:
    speed = min(model.type_factor(spec, t) for t in {CLUSTER.nodes[n].gpu_type for n in alloc.nodes})
    cpu = cpu_speed(spec.model, spec.gpus_per_learner, spec.cpus_per_learner, alloc.cpus_per_learner)
    return alloc.learners / spec.learners * speed * model.locality_factor(spec, alloc) * cpu


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(st.integers(0, 5), min_size=1, max_size=4), gpus=st.integers(1, 2),
       model=st.sampled_from(["resnet50", "bert", "lstm", ""]), cpus=st.sampled_from([0.0, 1.0, 3.0, 6.0]),
       given_cpus=st.sampled_from([0.0, 1.0, 2.0, 5.0]),
       speeds=st.none() | st.just((("v100", 1.0), ("k80", 0.4))))
def test_rates_are_the_general_formulas(nodes: list[int], gpus: int, model: str, cpus: float, given_cpus: float,
                                        speeds: tuple[tuple[str, float], ...] | None) -> None:
    spec = JobSpec("j", "t", 0.0, len(nodes), gpus, 100.0, model=model, cpus_per_learner=cpus, type_speed=speeds)
    alloc = Allocation("j", tuple(nodes), gpus, given_cpus, 0.0)
    perf = PerformanceModel(CLUSTER)
    for _ in range(2):  # the second time from the memo
        assert perf.rate(spec, alloc) == general_rate(perf, spec, alloc)


@settings(max_examples=200, deadline=None)
@given(nodes=st.lists(st.integers(0, 5), min_size=1, max_size=4), gpus=st.integers(0, 2),
       given_cpus=st.sampled_from([0.0, 2.0]), speeds=st.none() | st.just((("v100", 1.0), ("k80", 0.4))))
def test_rates_without_the_cpu_model_are_the_general_formulas(nodes: list[int], gpus: int, given_cpus: float,
                                                               speeds: tuple[tuple[str, float], ...] | None) -> None:
    # cpu=False: rate()'s per-type shortcut (no type speeds of the job's own, no CPU factor) must give
    # scale * type factor * 1.0 to the last bit, on every start (the first fills the per-type memo).
    spec = JobSpec("j", "t", 0.0, len(nodes), gpus, 100.0, cpus_per_learner=1.0, type_speed=speeds)
    alloc = Allocation("j", tuple(nodes), gpus, given_cpus, 0.0)
    perf = PerformanceModel(CLUSTER, cpu=False)
    for _ in range(3):
        speed = min(perf.type_factor(spec, t) for t in {CLUSTER.nodes[n].gpu_type for n in alloc.nodes})
        assert perf.rate(spec, alloc) == alloc.learners / spec.learners * speed * perf.locality_factor(spec, alloc)
