"""PER-JOB: each job is placed by the placer it names (JobSpec.placement), the rest by a default placer.

The platform's manifests choose their own placement (pack or spread, locality none, relaxed or strict),
while the server has one --placement for everything else. A job naming no placer ("") gets the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.snapshot import JobView, Snapshot


class PerJobPlacer(Placer):
    name = "per-job"
    time_dependent_key = True  # whatever the jobs' own placers do (locality is one of them)

    def __init__(self, default: Placer, registry: Mapping[str, Callable[[], Placer]]) -> None:
        self.default = default
        self.registry = registry
        # One instance per name, made on first use: placers are cheap but some keep per-round memos.
        self._placers: dict[str, Placer] = {"": default, default.name: default}

    def placer_for(self, job: JobView) -> Placer:
        wanted = job.spec.placement
        placer = self._placers.get(wanted)
        if placer is None:
            factory = self.registry.get(wanted)
            if factory is None:
                raise ValueError(f"job {job.job_id}: unknown placement {wanted!r}; "
                                 f"choose one of: {', '.join(self.registry)}")
            placer = self._placers[wanted] = factory()
        return placer

    def place(self, job: JobView, learners: int, free: FreeCapacity, snap: Snapshot,
              prefer: Sequence[str] | None = None) -> Allocation | WaitReason:
        return self.placer_for(job).place(job, learners, free, snap, prefer)

    def cache_key(self, job: JobView, learners: int, snap: Snapshot) -> tuple[object, ...] | None:
        placer = self.placer_for(job)
        key = placer.cache_key(job, learners, snap)
        if key is None:
            return None
        # Jobs of one shape place alike only under one placer: the placer's name joins the last element
        # (decide() compares the numbers before it for dominance, and the last one as a set).
        return (*key[:-1], (key[-1], placer.name))

    def next_change_s(self, job: JobView, snap: Snapshot) -> float | None:
        return self.placer_for(job).next_change_s(job, snap)
