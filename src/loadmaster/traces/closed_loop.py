"""Closed-loop submissions for `trace synth --vcs --vc-queue Q`: users who submit when their VC has room.

Open-loop arrivals (a Poisson process whatever the queue) leave a VC either not full (nothing waits) or with a
backlog that drifts for days; Philly's VCs were held full with a short queue, because users watched their VC and
submitted when its queue was short (docs/results.md section 9). This module times the submissions that way.

Each VC is pre-simulated on its own as a queue capped at its quota, scheduled as `fair` does inside a VC with fixed
quotas (FIFO with backfill: any queued job that fits in what is left of the quota starts). Fixed quotas make VCs
independent, so the simulator stays a pure trace replayer: the result is an ordinary canonical CSV whose
submission times are shaped for fair + fixed quotas (other policies or borrowing replay the same times, but the
loop was closed for fair).

A *unit* is what one user submits at once: a single job, or a burst (a hyperparameter sweep). Unit u is submitted
at max(its intended time, the first moment the VC has fewer than Q jobs waiting); a burst's later jobs keep their
offsets from its first job. The intended times carry the day/night cycle and the bursts; the gate only holds
demand back while the VC is full.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def close_loop(intended: FloatArray, units: Sequence[IntArray], gpus: IntArray, occupancy: FloatArray, quota: int,
               queue: int) -> tuple[FloatArray, FloatArray]:
    """Submission and start times of one VC's jobs under the queue gate (see the module docstring); jobs not in
    `units` keep their intended time and start NaN. The starts are the pre-simulation's, what `fair` on fixed
    quotas should reproduce up to placement.

    intended: every job's open-loop submit time; units: job indices per unit, first job first, the units in order
    of their first job's intended time; gpus, occupancy: what a job holds and for how long (every attempt);
    quota: the VC's GPUs; queue: Q >= 1, the waiting jobs at which the VC's users hold back.
    """
    if queue < 1:
        raise ValueError(f"vc_queue must be >= 1 (jobs waiting in a VC before its users hold back), got {queue}")
    submit = intended.astype(np.float64).copy()
    start = np.full(len(intended), np.nan)
    if quota <= 0:
        return submit, start
    free = quota
    ends: list[tuple[float, int]] = []  # (end time, GPUs) of running jobs
    later: list[tuple[float, int]] = []  # (submit time, job) of bursts' later jobs, not yet arrived
    waiting: list[int] = []  # FIFO by submission
    now = 0.0
    u = 0
    g = gpus.tolist()
    occ = occupancy.tolist()

    def start_what_fits() -> None:
        nonlocal free
        kept = []
        for j in waiting:
            if g[j] <= free:
                free -= g[j]
                start[j] = now
                heapq.heappush(ends, (now + occ[j], g[j]))
            else:
                kept.append(j)
        waiting[:] = kept

    while u < len(units) or later or waiting:
        # The next event: a job end, a burst member's arrival, or the next unit (only while the gate is open).
        t_end = ends[0][0] if ends else np.inf
        t_later = later[0][0] if later else np.inf
        t_unit = max(now, float(intended[units[u][0]])) if u < len(units) and len(waiting) < queue else np.inf
        now = min(t_end, t_later, t_unit)
        if now == np.inf:
            # Jobs wait that can never fit (wider than the quota): the caller caps sizes at the quota.
            raise ValueError(f"a job of {max(g[j] for j in waiting)} GPUs cannot fit a VC quota of {quota}")
        if t_end == now:
            while ends and ends[0][0] == now:
                free += heapq.heappop(ends)[1]
        elif t_later == now:
            while later and later[0][0] == now:
                waiting.append(heapq.heappop(later)[1])
        else:
            members = units[u]
            first = int(members[0])
            shift = now - float(intended[first])
            for j in members.tolist():
                submit[j] = float(np.floor(intended[j] + shift))
                if j == first or submit[j] <= now:
                    waiting.append(j)
                else:
                    heapq.heappush(later, (submit[j], j))
            u += 1
        start_what_fits()
    return submit, start
