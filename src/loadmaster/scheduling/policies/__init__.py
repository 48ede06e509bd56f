"""Policies: who gets how much, in which order. Any policy composes with any placer."""

from __future__ import annotations

from collections.abc import Callable

from loadmaster.scheduling.policies.base import Admission, Gate, Policy
from loadmaster.scheduling.policies.fair import FairPolicy
from loadmaster.scheduling.policies.fifo import FifoPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": FifoPolicy,
    "fifo-strict": lambda: FifoPolicy(strict=True),
    "fair": FairPolicy,
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None


__all__ = ["POLICIES", "Admission", "Gate", "Policy", "make_policy"]
