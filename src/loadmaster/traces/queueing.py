"""Why each job waited: Philly's split of queueing delay into fair-share and fragmentation delay.

Jeon et al. (ATC'19, section 3.1) attribute a job's queueing delay to fair-share delay when its virtual
cluster has used up its share of GPUs, and to fragmentation delay when enough GPUs are free in total but
not in the locality the job needs. Here every instant of a job's wait (submission to first start) is
classified on the occupancy rebuilt from the trace (traces/occupancy.py), first rule that holds:

  fair_share     the VC's busy GPUs plus this job's would exceed the VC's share
  capacity       fewer GPUs are free in the whole cluster than the job needs
  fragmentation  enough GPUs are free in total, but not in the shape the job finally ran in
                 (its recorded GPUs per server): no set of servers had room for it
  locality       its final shape would have fitted, but not the tightest one (fewest servers): the
                 scheduler was still holding out for locality it later gave up (a fragmentation-class
                 delay, as Philly's relaxed locality makes it)
  unexplained    the rebuilt occupancy shows room for the job as it finally ran: the wait has a cause
                 the trace does not show (load from jobs outside a sampled trace, scheduler latency)

The classes partition the wait, so each job's seconds add up to its queueing delay. A trace that holds
only part of a cluster's jobs under-states occupancy: fair_share, capacity and fragmentation are then
lower bounds and unexplained takes the rest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from loadmaster.traces.history import JobHistory
from loadmaster.traces.occupancy import Occupancy, packed_shape, shape_of

CLASSES: tuple[str, ...] = ("fair_share", "fragmentation", "locality", "capacity", "unexplained")
# Philly's two headline classes, and which of ours make each up.
PHILLY_CLASSES: dict[str, tuple[str, ...]] = {
    "fair_share": ("fair_share",),
    "fragmentation": ("fragmentation", "locality"),
}


@dataclass(frozen=True)
class DelaySplit:
    """Seconds of queueing delay per class, one row per job (in the order given)."""

    jobs: list[JobHistory]
    seconds: dict[str, np.ndarray]  # class -> seconds per job

    def of(self, i: int) -> dict[str, float]:
        return {c: float(self.seconds[c][i]) for c in self.seconds}


def split_delays(jobs: list[JobHistory], occ: Occupancy, shares: Mapping[str, float]) -> DelaySplit:
    """Classify every instant of each job's wait (see the module docstring). Jobs are grouped by what
    the rules depend on (VC, GPUs, final shape), so the per-segment conditions are computed once per
    group and each job costs two prefix-integral lookups per class."""
    groups: dict[tuple[str, int, tuple[int, ...]], list[int]] = defaultdict(list)
    for i, job in enumerate(jobs):
        shape = shape_of(job.last_placement) or packed_shape(job.spec.gpus, occ.max_server_gpus)
        groups[(job.spec.tenant, job.spec.gpus, shape)].append(i)
    seconds = {c: np.zeros(len(jobs)) for c in CLASSES}
    free = occ.capacity - occ.busy
    zero = np.zeros(len(occ.t) - 1, dtype=np.int64)
    for (vc, gpus, shape), members in groups.items():
        start = np.array([jobs[i].spec.submit_time_s for i in members])
        end = np.array([jobs[i].first_start_s for i in members], dtype=float)
        fair = occ.vc_busy.get(vc, zero) + gpus > shares.get(vc, 0.0)
        short = ~fair & (free < gpus)
        rest = ~fair & ~short
        fits_final = occ.fits(shape)
        fits_packed = occ.fits(packed_shape(gpus, occ.max_server_gpus))
        masks = {
            "fair_share": fair,
            "capacity": short,
            "fragmentation": rest & ~fits_final,
            "locality": rest & fits_final & ~fits_packed,
            "unexplained": rest & fits_final & fits_packed,
        }
        for cls, mask in masks.items():
            seconds[cls][members] = occ.integrate(mask, start, end)
    return DelaySplit(jobs, seconds)


def demand_shares(jobs: list[JobHistory], capacity: int) -> dict[str, float]:
    """Each VC's share of the cluster in proportion to its GPU-time demand in the trace (Philly sized
    VCs by what each team bought, which tracks what it uses). Not rounded: a share is compared with
    busy GPUs, and a fraction of a GPU changes no comparison with whole GPUs but the last."""
    demand: dict[str, float] = defaultdict(float)
    for j in jobs:
        s = j.spec
        demand[s.tenant] += s.gpus * (s.duration_s + sum(s.failed_attempts_s))
    total = sum(demand.values())
    if total <= 0:
        return {vc: capacity / len(demand) for vc in demand} if demand else {}
    return {vc: capacity * d / total for vc, d in sorted(demand.items())}
