"""Model families and their resource profiles: what a job of each family is sensitive to.

Pure data shared by the performance model (sim) and CPU/memory- or locality-aware placers (scheduling).
The numbers and their sources: docs/performance-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class ModelProfile:
    family: str
    cross_node_slowdown: float  # fractional slowdown when the gang spans servers in one rack
    cross_rack_slowdown: float  # ... when it spans racks
    cpu_sensitivity: float  # exponent on the CPU shortfall ratio (0 = insensitive, 1 = linear)
    cpus_per_gpu: float  # CPUs per GPU the family benefits from (Synergy-style profile)
    mem_gb_per_gpu: float

    def cpus_wanted(self, gpus: int) -> float:
        """CPUs a learner with `gpus` GPUs benefits from: more does not make it faster (Synergy's
        best-case demand). The performance model and the CPU-aware placers share this one definition."""
        return self.cpus_per_gpu * gpus

    def mem_wanted(self, gpus: int) -> float:
        """Host memory (GB) a learner with `gpus` GPUs benefits from."""
        return self.mem_gb_per_gpu * gpus

    def cpu_throughput(self, cpus: float, want: float) -> float:
        """Throughput of a learner given `cpus` CPUs, relative to one given its `want`: (cpus / want) **
        cpu_sensitivity, flat past the want (more CPUs than it benefits from do nothing), the ratio floored
        at 0.05 (a starved input pipeline still moves)."""
        if want <= 0:
            return 1.0
        return float(max(min(cpus / want, 1.0), 0.05) ** self.cpu_sensitivity)


# Families and the model-name prefixes that map to them. Numbers: see docs/performance-model.md.
PROFILES: dict[str, ModelProfile] = {
    "image": ModelProfile("image", 0.10, 0.30, 0.9, 6.0, 48.0),
    "language": ModelProfile("language", 0.25, 0.60, 0.15, 1.5, 24.0),
    "recommendation": ModelProfile("recommendation", 0.30, 0.70, 0.5, 3.0, 64.0),
    "rl": ModelProfile("rl", 0.05, 0.15, 0.7, 4.0, 16.0),
    "generic": ModelProfile("generic", 0.15, 0.40, 0.5, 3.0, 32.0),
}
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("resnet", "image"),
    ("vgg", "image"),
    ("alexnet", "image"),
    ("inception", "image"),
    ("cyclegan", "image"),
    ("mobilenet", "image"),
    ("shufflenet", "image"),
    ("transformer", "language"),
    ("lm", "language"),
    ("bert", "language"),
    ("gpt", "language"),
    ("lstm", "language"),
    ("gnmt", "language"),
    ("deepspeech", "language"),
    ("recommendation", "recommendation"),
    ("ncf", "recommendation"),
    ("dlrm", "recommendation"),
    ("a3c", "rl"),
    ("ppo", "rl"),
    ("dqn", "rl"),
)


def cpu_speed(model: str, gpus_per_learner: int, requested: float, given: float) -> float:
    """How fast a learner given `given` CPUs runs relative to its recorded runtime, which is its runtime at
    the `requested` CPUs: f(given) / f(requested), with f the family's saturating curve (cpu_throughput).

    A recorded runtime says nothing about CPUs when the request is 0 (Philly and Gavel record none): it is
    then taken as the runtime with the family's want met, f(requested) = 1. An allocation that carries no
    CPUs (a placer that does no CPU accounting) is not CPU-bound. A learner without GPUs wants its request.
    """
    if given <= 0:
        return 1.0
    profile = family_of(model)
    want = profile.cpus_wanted(gpus_per_learner) if gpus_per_learner > 0 else requested
    reference = profile.cpu_throughput(requested, want) if requested > 0 else 1.0
    return profile.cpu_throughput(given, want) / reference


def max_cpu_speed(model: str, gpus_per_learner: int, requested: float) -> float:
    """The fastest a learner can run relative to its recorded runtime by CPUs alone: given its family's
    want, when it requested less (1.0 when it requested its want or more, or nothing)."""
    if requested <= 0:
        return 1.0
    profile = family_of(model)
    want = profile.cpus_wanted(gpus_per_learner) if gpus_per_learner > 0 else requested
    return 1.0 / profile.cpu_throughput(requested, want)


def family_of(model: str) -> ModelProfile:
    return PROFILES[_family_name(model)]


@lru_cache(maxsize=4096)
def _family_name(model: str) -> str:
    """The family a model name belongs to. Cached by name (the simulator asks at every start); the
    profile itself is looked up afresh each time, so PROFILES stays the one source of the numbers."""
    name = model.strip().lower()
    for prefix, family in _PREFIXES:
        if name.startswith(prefix):
            return family
    return "generic"


