"""Model families and their resource profiles: what a job of each family is sensitive to.

Pure data shared by the performance model (sim) and CPU/memory- or locality-aware placers (scheduling).
The numbers and their sources: docs/performance-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def family_of(model: str) -> ModelProfile:
    name = model.strip().lower()
    for prefix, family in _PREFIXES:
        if name.startswith(prefix):
            return PROFILES[family]
    return PROFILES["generic"]


