"""The queue as a Session keeps it between decisions: jobs grouped by alike key (JobClass) and, for policies
that order by group (DRF by tenant), by group; and the protocol of a walk over it in the policy's order.

Kept apart from session.py so that a policy can provide its own walk (policies.drf) without importing the
Session (which imports decide, which imports the policies).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView

Key = tuple[object, ...]
LOWEST: Key = ()  # below every order key (they are non-empty tuples)


class _Sorted:
    """Views sorted by their order keys."""

    keys: list[Key]
    views: list[JobView]

    def insert(self, key: Key, view: JobView) -> None:
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.views.insert(i, view)

    def delete(self, key: Key) -> None:
        i = bisect_left(self.keys, key)
        del self.keys[i]
        del self.views[i]


@dataclass(eq=False)
class JobClass(_Sorted):
    """The queued jobs of one alike key, in rank order, and the reason each run of them got last time.

    `reasons` is piecewise constant over order keys: (key, reason) pairs sorted by key; a job's reason is
    that of the last pair at or before its key. A job is never ranked before the first pair unless it
    joined since (the Session reports those on their own)."""

    ident: int
    alike: object
    group: object = None
    keys: list[Key] = field(default_factory=list)
    views: list[JobView] = field(default_factory=list)
    reasons: list[tuple[Key, WaitReason]] = field(default_factory=list)
    solo: str | None = None  # "reject" or "alone": a class of one job, answered on its own

    def runs(self) -> Iterator[tuple[int, int, WaitReason]]:
        """(first, end, reason) for each run of `reasons`, as positions in `keys`."""
        runs = self.reasons
        keys = self.keys
        for i, (a, reason) in enumerate(runs):
            hi = bisect_left(keys, runs[i + 1][0]) if i + 1 < len(runs) else len(keys)
            yield bisect_left(keys, a), hi, reason

    def reason_at(self, key: Key) -> WaitReason | None:
        return reason_at(self.reasons, key)


@dataclass(eq=False)
class Group(_Sorted):
    """The queued jobs of one group (Policy.order_group) in rank order, and how many of each class.

    `version` changes whenever a class joins or leaves `classes` (not when a class only gains or loses jobs), so
    that a policy may keep what it worked out from the group's classes (DRF's _prune) and be told when that is
    stale without comparing them."""

    keys: list[Key] = field(default_factory=list)
    views: list[JobView] = field(default_factory=list)
    classes: dict[JobClass, int] = field(default_factory=dict)
    version: int = 0

    def count_in(self, cls: JobClass) -> None:
        """One more job of `cls` in the group."""
        classes = self.classes
        n = classes.get(cls, 0)
        if not n:
            self.version += 1
        classes[cls] = n + 1

    def count_out(self, cls: JobClass) -> None:
        """One job of `cls` less in the group."""
        classes = self.classes
        n = classes[cls] - 1
        if n:
            classes[cls] = n
        else:
            del classes[cls]
            self.version += 1


def _first(pair: tuple[Key, WaitReason]) -> Key:
    return pair[0]


def reason_at(runs: list[tuple[Key, WaitReason]], key: Key) -> WaitReason | None:
    i = bisect_right(runs, key, key=_first) - 1
    return runs[i][1] if i >= 0 else None


class WalkOrder(Protocol):
    """The queue in a policy's rank order, skipping the jobs whose class was answered since the last start.

    next() gives the next job to answer (its class, its position there, its class order and its key), or
    None when none is left; the walk then reports what happened to it: answered(cls) when it waits (its
    class's later jobs get its answer until something starts), started(...) when it starts.

    `settled`: classes the order answered itself, without handing out a job, with the reason a visit would
    have given; the walk takes them in before it answers anything else."""

    settled: list[tuple[JobClass, WaitReason]]

    def next(self) -> tuple[JobClass, int, Key, Key] | None: ...

    def answered(self, cls: JobClass) -> None: ...

    def started(self, cls: JobClass, i: int, order: Key, key: Key) -> None: ...
