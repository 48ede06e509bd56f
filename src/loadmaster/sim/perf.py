"""Performance model: how fast a job runs on a given allocation, relative to its best placement alone.

rate = type_speed x locality_factor x cpu_factor, in work-seconds per second (1.0 = the pace of the recorded
runtime; above 1 only where a CPU-aware placer gives a job more CPUs than it requested).

- GPU type: from the job's own per-type throughputs when the trace has them (Gavel's table), else from
  DEFAULT_TYPE_SPEED, normalised to the fastest type in the cluster (duration_s is on the best type).
- Locality: a gang that spans servers pays `cross_node_slowdown` (all-reduce over the network instead of
  NVLink/PCIe), one that spans racks `cross_rack_slowdown`, per model family (see docs/performance-model.md).
- CPU: duration_s is the runtime at the CPUs the job requested; a learner given other than its request
  runs at f(given) / f(requested), f = (cpus / want) ** cpu_sensitivity flat past the family's want:
  input pipelines of image models are CPU-bound (Synergy, OSDI'22), language models barely care.
  Allocations that carry no CPUs are not CPU-bound; a request of 0 counts as the want met.
"""

from __future__ import annotations

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.profiles import cpu_speed, family_of

# Relative training throughput per GPU type, V100 = 1.0 (median over Gavel's models in
# simulation_throughputs.json: K80 0.20, P100 0.76 of V100). Unknown types count as 1.0.
DEFAULT_TYPE_SPEED: dict[str, float] = {"k80": 0.2, "p100": 0.76, "v100": 1.0}


class PerformanceModel:
    def __init__(self, cluster: Cluster, type_speed: dict[str, float] | None = None,
                 locality: bool = True, cpu: bool = True) -> None:
        self.cluster = cluster
        self.type_speed = dict(DEFAULT_TYPE_SPEED if type_speed is None else type_speed)
        self.locality = locality
        self.cpu = cpu
        types = cluster.gpu_types or ("gpu",)
        self._best_default = max(self.type_speed.get(t, 1.0) for t in types)
        self._node_type = [n.gpu_type for n in cluster.nodes]
        self._node_rack = cluster.rack_ids.tolist()
        self._cpu_memo: dict[tuple[str, int, float, float], float] = {}
        self._default_factor: dict[str, float] = {}

    def type_factor(self, spec: JobSpec, gpu_type: str) -> float:
        if spec.gpus_per_learner == 0:
            return 1.0
        if spec.type_speed is not None:
            speed = spec.speed_on(gpu_type)
            if speed is not None:
                best = max((s for t, s in spec.type_speed if t in self.cluster.gpu_types), default=1.0)
                return speed / best if best > 0 else 1.0
        factor = self._default_factor.get(gpu_type)
        if factor is None:  # the same division at every start: made once per type
            factor = self._default_factor[gpu_type] = self.type_speed.get(gpu_type, 1.0) / self._best_default
        return factor

    def locality_factor(self, spec: JobSpec, alloc: Allocation) -> float:
        nodes = alloc.nodes
        if not self.locality or len(nodes) <= 1:
            return 1.0
        profile = family_of(spec.model)
        racks = {self._node_rack[n] for n in nodes}
        slowdown = profile.cross_rack_slowdown if len(racks) > 1 else profile.cross_node_slowdown
        return 1.0 / (1.0 + slowdown)

    def cpu_factor(self, spec: JobSpec, alloc: Allocation) -> float:
        """f(given) / f(requested) (core.profiles.cpu_speed): 1 when a learner gets what it requested, so a
        recorded runtime is replayed as recorded under any placer that honours requests; more CPUs, up to
        the family's want, speed it up, fewer slow it down. A request of 0 (the trace records none) counts
        as the want met; an allocation that carries no CPUs is not CPU-bound."""
        if not self.cpu or alloc.cpus_per_learner <= 0:
            return 1.0  # cpu_speed()'s own answer for an allocation without CPUs, without making its key
        key = (spec.model, spec.gpus_per_learner, spec.cpus_per_learner, alloc.cpus_per_learner)
        factor = self._cpu_memo.get(key)
        if factor is None:  # a pure function of few values: asked at every start, worked out once per key
            factor = self._cpu_memo[key] = cpu_speed(*key)
        return factor

    def rate(self, spec: JobSpec, alloc: Allocation) -> float:
        """Work-seconds per wall-second on `alloc` (the slowest GPU type of the gang sets the pace)."""
        # An elastic job's duration is given at its nominal size; data parallelism scales linearly here.
        nodes = alloc.learner_nodes
        n = len(nodes)
        scale = n / spec.learners  # alloc.learners / spec.learners
        if n == 1 or nodes.count(nodes[0]) == n:  # one server (most gangs): one type, no locality slowdown
            rate = scale * self.type_factor(spec, self._node_type[nodes[0]])
        else:
            types = {self._node_type[n] for n in alloc.nodes}
            speed = min(self.type_factor(spec, t) for t in types)
            rate = scale * speed * self.locality_factor(spec, alloc)
        # cpu_factor() answers 1.0 for an allocation without CPUs (every start on a Philly trace): not asked
        # then (x * 1.0 is x).
        return rate * self.cpu_factor(spec, alloc) if alloc.cpus_per_learner > 0 else rate
