"""Placers: where a job's learners go. Any placer composes with any policy.

PLACERS maps each name to a factory that imports its placer's module on first call (a run uses one)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from loadmaster.scheduling.placement.base import Placer


def _lazy(module: str, cls: str) -> Callable[[], Placer]:
    def make() -> Placer:
        placer: Placer = getattr(import_module(f"loadmaster.scheduling.placement.{module}"), cls)()
        return placer

    make.__qualname__ = make.__name__ = cls
    return make


PLACERS: dict[str, Callable[[], Placer]] = {
    "pack": _lazy("pack", "PackPlacer"),
    "spread": _lazy("spread", "SpreadPlacer"),
    "locality": _lazy("locality", "LocalityPlacer"),
    "locality-strict": _lazy("locality", "StrictLocalityPlacer"),
    "proportional": _lazy("proportional", "ProportionalPlacer"),
    "synergy": _lazy("synergy", "SynergyPlacer"),
}


def make_placer(name: str) -> Placer:
    try:
        factory = PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; choose one of: {', '.join(PLACERS)}") from None
    return factory()


__all__ = ["PLACERS", "Placer", "make_placer"]
