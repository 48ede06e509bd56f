"""Policies: who gets how much, in which order. Any policy composes with any placer.

POLICIES maps each name to a factory that imports its policy's module on first call: a run uses one policy,
and importing all of them (their modules are a third of the scheduling core's source) was a tenth of a
short simulation's whole process (`loadmaster sim run` on Gavel's 1,000 jobs)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from loadmaster.scheduling.policies.base import Admission, Gate, Policy


class PolicyFactory:
    """A policy class by module and name, imported on first use: calling it makes the policy (keyword
    arguments go to the class, over the entry's own); `cls` is the class itself (its signature, say)."""

    def __init__(self, module: str, name: str, **kwargs: Any) -> None:
        self.module = f"loadmaster.scheduling.policies.{module}"
        self.name = name
        self.kwargs = kwargs

    @property
    def cls(self) -> type[Policy]:
        cls: type[Policy] = getattr(import_module(self.module), self.name)
        return cls

    def __call__(self, **kwargs: Any) -> Policy:
        return self.cls(**{**self.kwargs, **kwargs})

    def __repr__(self) -> str:
        return f"PolicyFactory({self.module}.{self.name}, {self.kwargs})"


POLICIES: dict[str, PolicyFactory] = {
    "fifo": PolicyFactory("fifo", "FifoPolicy"),
    "fifo-strict": PolicyFactory("fifo", "FifoPolicy", strict=True),
    "fair": PolicyFactory("fair", "FairPolicy"),
    "fair-fifo": PolicyFactory("fair", "FairFifoPolicy"),
    "srtf": PolicyFactory("srtf", "SrtfPolicy"),
    "las": PolicyFactory("las", "LasPolicy"),
    "las-het": PolicyFactory("las", "HetLasPolicy"),
    "las-gavel": PolicyFactory("las_gavel", "GavelLasPolicy"),
    "priority": PolicyFactory("priority", "PriorityPolicy"),
    "drf": PolicyFactory("drf", "DrfPolicy"),
    "themis": PolicyFactory("themis", "ThemisPolicy"),
}


def make_policy(name: str) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory()


__all__ = ["POLICIES", "Admission", "Gate", "Policy", "PolicyFactory", "make_policy"]
