"""Placers: where a job's learners go. Any placer composes with any policy."""

from __future__ import annotations

from collections.abc import Callable

from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.placement.locality import LocalityPlacer, StrictLocalityPlacer
from loadmaster.scheduling.placement.pack import PackPlacer
from loadmaster.scheduling.placement.proportional import ProportionalPlacer
from loadmaster.scheduling.placement.spread import SpreadPlacer
from loadmaster.scheduling.placement.synergy import SynergyPlacer

PLACERS: dict[str, Callable[[], Placer]] = {
    "pack": PackPlacer,
    "spread": SpreadPlacer,
    "locality": LocalityPlacer,
    "locality-strict": StrictLocalityPlacer,
    "proportional": ProportionalPlacer,
    "synergy": SynergyPlacer,
}


def make_placer(name: str) -> Placer:
    try:
        return PLACERS[name]()
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; choose one of: {', '.join(PLACERS)}") from None


__all__ = ["PLACERS", "Placer", "make_placer"]
