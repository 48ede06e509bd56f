"""Policies: who gets how much, in which order. Any policy composes with any placer."""

from __future__ import annotations

from collections.abc import Callable

from loadmaster.scheduling.policies.base import Admission, Gate, Policy
from loadmaster.scheduling.policies.drf import DrfPolicy
from loadmaster.scheduling.policies.fair import FairFifoPolicy, FairPolicy
from loadmaster.scheduling.policies.fifo import FifoPolicy
from loadmaster.scheduling.policies.las import HetLasPolicy, LasPolicy
from loadmaster.scheduling.policies.las_gavel import GavelLasPolicy
from loadmaster.scheduling.policies.priority import PriorityPolicy
from loadmaster.scheduling.policies.srtf import SrtfPolicy
from loadmaster.scheduling.policies.themis import ThemisPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
    "fifo-strict": lambda: FifoPolicy(strict=True),
    "fair": FairPolicy,
    "fair-fifo": FairFifoPolicy,
    "srtf": SrtfPolicy,
    "las": LasPolicy,
    "las-het": HetLasPolicy,
    "las-gavel": GavelLasPolicy,
    "priority": PriorityPolicy,
    "drf": DrfPolicy,
    "themis": ThemisPolicy,
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None


__all__ = ["POLICIES", "Admission", "Gate", "Policy", "make_policy"]
