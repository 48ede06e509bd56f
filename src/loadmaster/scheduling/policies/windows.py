"""When time alone can let a waiting job displace a running one: the hooks behind Policy.next_change_s.

A shell that decides on a timer (the simulator's rounds) may skip every round before the earliest such
time once a decision changed nothing. Displacement under a checkpoint window (in_checkpoint_window) is
possible only just after a running job completes a checkpoint, so the set of jobs a waiting job may
displace grows only at checkpoints (and, for LAS, when a running job's service crosses a threshold) and
shrinks as their windows close; a waiting job that could not start by displacing a larger set cannot
start with a smaller one (releasing fewer jobs frees no more room). Every opening computed here is
rounded down a little (`before`) and every closing up: a round made early costs a decision, a round
skipped late would change a result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.snapshot import JobView


def before(t: float) -> float:
    """A clock just below `t`: a time computed in floats must never land after the event it predicts."""
    return t - abs(t) * 1e-12 - 1e-9


def next_checkpoint_at(job: JobView, clock: float, checkpoint_interval_s: float) -> float:
    """When running `job` next completes a checkpoint after `clock` (a checkpoint window opens then):
    infinite without checkpoints or progress."""
    if checkpoint_interval_s <= 0 or job.rate <= 0:
        return math.inf
    work = job.work_at(clock)
    target = (math.floor(work / checkpoint_interval_s) + 1) * checkpoint_interval_s
    return before(job.as_of + (target - job.work_done_s) / job.rate)


def next_window_s(running: Iterable[JobView], clock: float, checkpoint_interval_s: float,
                  max_loss_s: float | None) -> float:
    """The earliest clock after which one of `running` may become displaceable under in_checkpoint_window:
    when one of them completes its next checkpoint. A job only leaves its window between two checkpoints
    (its work grows), so nothing joins the displaceable set before that. Infinite when every job is
    displaceable at any time (max_loss_s None) or none checkpoints."""
    if max_loss_s is None or checkpoint_interval_s <= 0:
        return math.inf
    return min((next_checkpoint_at(v, clock, checkpoint_interval_s) for v in running), default=math.inf)


def enough_at(opens: npt.NDArray[np.float64], closes: npt.NDArray[np.float64], gpus: npt.NDArray[np.float64],
              deficit: float) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The openings of windows at which the windows open then hold at least `deficit` GPUs, in order, and for
    each the clock until which the windows open hold that many (the closing after which they hold fewer;
    infinite if none): window i holds gpus[i] and is displaceable from opens[i] to closes[i] (both included).
    An opening of -inf marks a window open now, one a waiting gang has seen already (it only closes); one with
    opens[i] > closes[i] is never open (left out). Between two of these openings the displaceable set is a
    subset of the one open at the earlier, and after its span it is short of the deficit until the next, so
    nothing can start. Openings sort before closings at one clock, so a tie counts both windows (a round made
    early, never late)."""
    n = opens.size
    times = np.concatenate((opens, closes))
    # A window never open opens and closes at infinity: after every clock found, and never found itself.
    never = opens > closes
    times[np.concatenate((never, never))] = math.inf
    # A stable sort keeps the openings (the first n) before the closings at one clock.
    order = np.argsort(times, kind="stable")
    at = times[order]
    enough = np.add.accumulate(np.concatenate((gpus, -gpus))[order]) >= deficit - 1e-9
    found = np.flatnonzero((order < n) & enough & np.isfinite(at))
    # Where the open windows first fall short after each opening found: only a closing takes GPUs away.
    short = np.flatnonzero(~enough)
    after = np.searchsorted(short, found)
    until = np.full(found.size, math.inf)
    within = after < short.size
    until[within] = at[short[after[within]]]
    return at[found], until
