"""Counts kept in a dict without zeros, so that its keys are exactly the things counted (the tenants with a
queued job, the priority classes running) and reading them needs no filter."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")


def tally(counts: dict[K, int], key: K, change: int) -> None:
    """Add `change` to the count of `key`, dropping the key when its count reaches zero."""
    n = counts.get(key, 0) + change
    if n:
        counts[key] = n
    else:
        del counts[key]
