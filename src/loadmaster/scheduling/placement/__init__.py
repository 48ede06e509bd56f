"""Placers: where a job's learners go. Any placer composes with any policy.

PLACERS maps each name to a factory that imports its placer's module on first call (a run uses one)."""

from __future__ import annotations

from collections.abc import Callable

from loadmaster.core.lazy import Lazy
from loadmaster.scheduling.placement.base import Placer


def _placer(module: str, name: str) -> Lazy[Placer]:
    return Lazy(f"loadmaster.scheduling.placement.{module}", name)


PLACERS: dict[str, Callable[[], Placer]] = {
    "pack": _placer("pack", "PackPlacer"),
    "spread": _placer("spread", "SpreadPlacer"),
    "locality": _placer("locality", "LocalityPlacer"),
    "locality-strict": _placer("locality", "StrictLocalityPlacer"),
    "proportional": _placer("proportional", "ProportionalPlacer"),
    "synergy": _placer("synergy", "SynergyPlacer"),
}


def make_placer(name: str) -> Placer:
    try:
        factory = PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; choose one of: {', '.join(PLACERS)}") from None
    return factory()


__all__ = ["PLACERS", "Placer", "make_placer"]
