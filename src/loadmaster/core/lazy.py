"""A callable named by module and attribute, imported on its first call.

A run uses one policy, one placer and one trace format, so the registries (POLICIES, PLACERS, the trace
loaders) name theirs this way and import only the one asked for: importing them all was a tenth of a short
simulation's whole process. Unlike a closure, a Lazy pickles (two strings and its keyword arguments): the
queue estimator sends the control loop's placer, registry included, to its child process."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """Calls `module.name(*args, **kwargs)`, the keyword arguments given here under the caller's."""

    def __init__(self, module: str, name: str, **kwargs: Any) -> None:
        self.module = module
        self.name = name
        self.kwargs = kwargs

    @property
    def target(self) -> Callable[..., T]:
        """The attribute itself (a class: its signature, say)."""
        target: Callable[..., T] = getattr(import_module(self.module), self.name)
        return target

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        return self.target(*args, **{**self.kwargs, **kwargs})

    def __repr__(self) -> str:
        return f"Lazy({self.module}.{self.name}, {self.kwargs})"
