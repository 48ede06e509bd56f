"""Policies: who gets how much, in which order. Any policy composes with any placer.

POLICIES maps each name to a factory that imports its policy's module on first call: a run uses one policy,
and importing all of them (their modules are a third of the scheduling core's source) was a tenth of a
short simulation's whole process (`loadmaster sim run` on Gavel's 1,000 jobs)."""

from __future__ import annotations

from typing import Any

from loadmaster.core.lazy import Lazy
from loadmaster.scheduling.policies.base import Admission, Gate, Policy


def _policy(module: str, name: str, **kwargs: Any) -> Lazy[Policy]:
    return Lazy(f"loadmaster.scheduling.policies.{module}", name, **kwargs)


POLICIES: dict[str, Lazy[Policy]] = {
    "fifo": _policy("fifo", "FifoPolicy"),
    "fifo-strict": _policy("fifo", "FifoPolicy", strict=True),
    "fair": _policy("fair", "FairPolicy"),
    "fair-fifo": _policy("fair", "FairFifoPolicy"),
    "srtf": _policy("srtf", "SrtfPolicy"),
    "las": _policy("las", "LasPolicy"),
    "las-het": _policy("las", "HetLasPolicy"),
    "las-gavel": _policy("las_gavel", "GavelLasPolicy"),
    "priority": _policy("priority", "PriorityPolicy"),
    "drf": _policy("drf", "DrfPolicy"),
    "themis": _policy("themis", "ThemisPolicy"),
}


def make_policy(name: str) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory()


__all__ = ["POLICIES", "Admission", "Gate", "Policy", "make_policy"]
