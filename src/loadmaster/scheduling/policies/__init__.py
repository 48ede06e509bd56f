"""Policies: who gets how much, in which order. Any policy composes with any placer.

POLICIES maps each name to a factory that imports its policy's module on first call: a run uses one policy,
and importing all of them (their modules are a third of the scheduling core's source) was a tenth of a
short simulation's whole process (`loadmaster sim run` on Gavel's 1,000 jobs)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from loadmaster.scheduling.policies.base import Admission, Gate, Policy


def _lazy(module: str, cls: str, **kwargs: Any) -> Callable[[], Policy]:
    def make() -> Policy:
        policy: Policy = getattr(import_module(f"loadmaster.scheduling.policies.{module}"), cls)(**kwargs)
        return policy

    make.__qualname__ = make.__name__ = cls
    return make


POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": _lazy("fifo", "FifoPolicy"),
    "fifo-strict": _lazy("fifo", "FifoPolicy", strict=True),
    "fair": _lazy("fair", "FairPolicy"),
    "fair-fifo": _lazy("fair", "FairFifoPolicy"),
    "srtf": _lazy("srtf", "SrtfPolicy"),
    "las": _lazy("las", "LasPolicy"),
    "las-het": _lazy("las", "HetLasPolicy"),
    "las-gavel": _lazy("las_gavel", "GavelLasPolicy"),
    "priority": _lazy("priority", "PriorityPolicy"),
    "drf": _lazy("drf", "DrfPolicy"),
    "themis": _lazy("themis", "ThemisPolicy"),
}


def make_policy(name: str) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory()


__all__ = ["POLICIES", "Admission", "Gate", "Policy", "make_policy"]
