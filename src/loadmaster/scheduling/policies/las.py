"""Tiresias' discretized two-dimensional least-attained-service (Gu et al., NSDI'19), and a
heterogeneity-aware variant in the spirit of Gavel's (Narayanan et al., OSDI'20).

`las`: a job's attained service is GPU-seconds (GPUs x time held, both dimensions at once). K queues split
at `thresholds`; a job starts in the first and moves down as its service crosses each threshold. Queues
are served in order, FIFO by submit time within one. A job may displace running jobs of a *lower* queue
only, never of its own, so jobs of similar service do not swap back and forth (Tiresias discretizes
priorities for exactly this reason: continuous LAS preempts at every small difference).

Starvation guard (Tiresias' STARVELIMIT, with the knob the Tiresias simulator calls solve_starvation): a
queued job that has already been demoted and has waited at least `starve_factor` x its executed time is
promoted to the first queue. Tiresias then resets its executed time, so it stays promoted until it has
crossed the first threshold again; this policy keeps no state between calls, so it reads the same thing
off the job view: a running job that was promoted when it started counts only the service of this run.
After a later preemption it is judged on all its service again (a slightly stricter guard than Tiresias',
whose executed time stays reset). Known gap: an elastic resize relaunches a job with a new started_at and
the old queued_since, which can read as a promotion; the job then counts only the service since the
resize (a view field for "promoted" would close it).

The queue of a job changes with time alone (a running job crosses a threshold, a waiting job starves),
so `round_s` asks the shell to decide again at least that often while jobs wait.

Checkpoint-aware displacement (an addition to Tiresias, whose simulator treats preemption as free; the
simulator here charges a preempted job all work since its last checkpoint plus a restart): with
`max_loss_s` a running job can be displaced only once it has saved a checkpoint since it (re)started, and
only while it would lose at most max_loss_s work-seconds, i.e. just after one of its checkpoints. A job
of the first queue then waits for the next checkpoint of some job of a lower queue (at most a checkpoint
interval, usually far less with many jobs running) instead of wasting up to an interval of another's
work. Within the lowest queue the victim is the one that queue's FIFO order serves last (Tiresias gives
GPUs in queue order, so the tail of the lowest queue loses them), then the one losing least.

Defaults and where they come from (measurements in docs/policies.md, `## las`):
- thresholds (3250,): two queues split at 3,250 GPU-seconds, the first queue limit in Tiresias' public
  simulator (SymbioticLab/Tiresias, simulator/jobs.py: queue_limit = [3250, 7200, 18000]).
- starve_factor 100: one of the knob values the Tiresias simulator evaluates (run_sim.py: dlas-gpu-0.5,
  -1, -2, -4, -8, -10, -100, -1000; plain dlas-gpu has it off). Small knobs turned LAS into processor
  sharing under overload (mean JCT 2.2-2.6x that without the guard on Gavel's trace on 36 GPUs); at 100
  the guard still bounds starvation and cost 0.5% mean JCT on a Philly-like workload.
- max_loss_s 60 and round_s 60: the order changes with time alone (a threshold crossed, a wait grown
  long, a checkpoint saved), and a job is displaceable only in the max_loss_s after each checkpoint, so
  the shell must decide again at least that often while jobs wait or windows pass unseen. Against
  displacing at any time after the first checkpoint, this cut the work lost to preemption 20x and mean
  JCT 25% on Gavel's trace on 56 GPUs (300 s windows and rounds: 4x and 21%).

`las-het` measures attained service as *work*: GPU-seconds weighted by the job's speed on the placement it
ran on relative to its best one (gpus x work done, in work-seconds of the best placement), so a job that
ran on a slow GPU has attained less and keeps its priority longer; and it asks placers for the GPU types
on which the job itself runs fastest.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.keyed import Key, KeyedPolicy
from loadmaster.scheduling.policies.srtf import (
    DEFAULT_CHECKPOINT_INTERVAL_S,
    DEFAULT_RESTART_OVERHEAD_S,
    in_checkpoint_window,
    preemption_loss_gpu_s,
)
from loadmaster.scheduling.policies.view_rows import ViewRows
from loadmaster.scheduling.policies.windows import enough_at
from loadmaster.scheduling.snapshot import JobView, Snapshot

TIRESIAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3250.0,)
DEFAULT_STARVE_FACTOR = 100.0
DEFAULT_ROUND_S = 60.0
DEFAULT_MAX_LOSS_S = 60.0
# Checkpoint windows of each running job that next_change_s follows: past them it asks for a round. More
# cost a little more per call and spare rounds where a gang waits for windows to open on enough GPUs at once.
WINDOWS_FOLLOWED = 4
_RANK_KEY = itemgetter(0, 1, 2)  # queue, submit time, job id
_NEVER: Sequence[tuple[float, float]] = ((math.inf, math.inf),)  # next_change_spans(): nothing ever changes
_VICTIM_ORDER = itemgetter(0, 1, 2)  # victim_key() less its first element: minus queue, minus submit time, loss
_WORK_DONE = attrgetter("work_done_s")
_RATE = attrgetter("rate")
_AS_OF = attrgetter("as_of")
_ATTAINED = attrgetter("attained_gpu_s")


def _before(t: float) -> float:
    """windows.before(), leaving an infinite clock as it is."""
    return t - abs(t) * 1e-12 - 1e-9 if math.isfinite(t) else t


# Relative training throughput per GPU type, V100 = 1.0: the same numbers as the simulator's
# DEFAULT_TYPE_SPEED (sim/perf.py, medians over Gavel's models), repeated because scheduling may not
# import sim. Used only to order GPU types for jobs that carry no per-type speeds of their own.
DEFAULT_TYPE_SPEED: Mapping[str, float] = {"k80": 0.2, "p100": 0.76, "v100": 1.0}


@dataclass(slots=True)
class _RunArrays:
    """The running views' numbers that do not change while they run, one element per view."""

    done: npt.NDArray[np.float64]
    rate: npt.NDArray[np.float64]
    as_of: npt.NDArray[np.float64]
    attained: npt.NDArray[np.float64]
    checkpoints: npt.NDArray[np.float64]  # checkpoints saved before the current run's progress (floor(done / ckpt))
    held: npt.NDArray[np.float64]  # GPUs held
    gang: npt.NDArray[np.float64]  # GPUs of the job's gang (spec.gpus)
    base: npt.NDArray[np.float64]  # service the current run does not count (all before it if promoted, else 0)
    # When each view's service, as queue() counts it, reaches thresholds[q] (row q; rounded down, infinite if
    # it never does): the threshold crossings next_change_s follows.
    reach: npt.NDArray[np.float64]

    @classmethod
    def of(cls, rows: npt.NDArray[np.float64]) -> _RunArrays:
        """From the columns ViewRows keeps (rows in the order of the fields)."""
        return cls(rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7], rows[8:])


class LasPolicy(KeyedPolicy):
    name = "las"

    def __init__(self, thresholds: Sequence[float] = TIRESIAS_THRESHOLDS_GPU_S,
                 starve_factor: float | None = DEFAULT_STARVE_FACTOR,
                 round_s: float | None = DEFAULT_ROUND_S,
                 max_loss_s: float | None = DEFAULT_MAX_LOSS_S,
                 checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S) -> None:
        if list(thresholds) != sorted(thresholds) or any(t <= 0 for t in thresholds):
            raise ValueError(f"LAS thresholds must be positive and increasing, got {list(thresholds)}")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.starve_factor = starve_factor
        self.round_s = round_s
        self.max_loss_s = max_loss_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        # Each job's queue at one snapshot, computed once: rank() sorts by it and decide() asks again for
        # every job that does not fit and every victim candidate. Held for the snapshot last asked about.
        self._queues: tuple[Snapshot, dict[int, tuple[JobView, int]]] | None = None
        # Waiting jobs' queues across snapshots (_waiting_queue): view, queue, and the clocks they hold from
        # and until; for these settings, checked once per snapshot.
        self._waiting: dict[int, tuple[JobView, int, float, float]] = {}
        self._waiting_for: tuple[object, ...] = (self.thresholds, starve_factor)
        self._waiting_snap: Snapshot | None = None
        # The running jobs displaceable at one snapshot in victim order: (snapshot, minus each one's queue,
        # the jobs). See victim_candidates().
        self._displaceable: tuple[Snapshot, list[int], list[JobView], list[float]] | None = None
        # The same jobs' minus queues in ascending order and the GPUs of each prefix, without the victim
        # order (most displacement searches end at releasable_gpus(), which needs only these).
        self._releasable: tuple[Snapshot, list[float]] | None = None  # releasable_gpus() per queue
        self._running_q: tuple[Snapshot, npt.NDArray[np.intp]] | None = None  # _running_queues()
        self._thresholds: tuple[tuple[float, ...], npt.NDArray[np.float64]] = (
            self.thresholds, np.asarray(self.thresholds, dtype=np.float64))
        # Per snapshot: the running jobs' arrays, GPUs held, service as queue() counts it, displaceable now.
        self._now: tuple[Snapshot, tuple[_RunArrays, npt.NDArray[np.float64], npt.NDArray[np.float64],
                                         npt.NDArray[np.bool_]]] | None = None
        # Per running view (by identity): _RunArrays' numbers, computed once per view (a new tuple of running
        # views mostly holds views seen before, so its arrays are a gather of these).
        self._rows = ViewRows(8 + len(self.thresholds), self._row)
        self._rows_for: tuple[object, ...] = (self.thresholds, checkpoint_interval_s, starve_factor)
        # The running jobs' numbers as arrays, for the last tuple of running views asked about (a shell that
        # keeps one tuple while its running jobs do not change, as the simulator does, pays for them once).
        self._arrays: tuple[Sequence[JobView], _RunArrays] | None = None
        # Per snapshot: the running jobs' work done at its clock, and which are displaceable then.
        self._work: tuple[Snapshot, npt.NDArray[np.float64], npt.NDArray[np.bool_],
                          npt.NDArray[np.float64]] | None = None
        # next_change_s's last answer: (running views, free GPUs, gangs by queue, clock, the clocks at which a
        # gang could start, horizon), reused while the first three stay the same.
        self._quiet: tuple[Sequence[JobView], float, tuple[tuple[int, float], ...], float,
                           npt.NDArray[np.float64], npt.NDArray[np.float64], float] | None = None
        # The windows _windows() follows past each job's next checkpoint, as a column (0, 1, ..).
        self._followed = np.arange(WINDOWS_FOLLOWED + 1.0)[:, None]

    # -- attained service: what `las-het` redefines ---------------------------------------------------
    def service(self, job: JobView, clock: float) -> float:
        """Attained service at `clock`: GPU-seconds."""
        return job.attained_at(clock)

    def service_before_run(self, job: JobView) -> float:
        """Attained service when the current run began (all of it for a waiting job)."""
        return job.attained_gpu_s

    # -- queues ---------------------------------------------------------------------------------------
    def _starving(self, job: JobView, waited_s: float) -> bool:
        """Promote a demoted job that has waited `starve_factor` x the time it has run."""
        if self.starve_factor is None or not self.thresholds:
            return False
        before = self.service_before_run(job)
        if before < self.thresholds[0]:
            return False  # still in the first queue: nothing to promote
        gpus = job.spec.gpus
        executed = job.attained_gpu_s / gpus if gpus > 0 else 0.0
        return executed > 0 and waited_s >= self.starve_factor * executed

    def queue(self, snap: Snapshot, job: JobView) -> int:
        """0 is served first; len(thresholds) last."""
        if job.allocation is None and job.rate == 0:
            return self._waiting_queue(snap, job)
        memo = self._queues
        if memo is None or memo[0] is not snap:
            memo = self._queues = (snap, {})
        # Keyed by identity (hashing a JobView would hash all its fields); the entry holds the view, so
        # its id cannot be reused by another object while the entry lives.
        hit = memo[1].get(id(job))
        if hit is not None and hit[0] is job:
            return hit[1]
        q = self._queue(snap, job)
        memo[1][id(job)] = (job, q)
        return q

    def _waiting_queue(self, snap: Snapshot, job: JobView) -> int:
        """queue() of a waiting job that makes no progress: its service stays put, so its queue changes with
        time only when it starves, at order_until() (rounded down). Kept across snapshots, with the clocks
        it holds for (the Session's walk asks every class's first job at every decision: most are the same
        jobs as at the last one)."""
        clock = snap.clock
        if snap is not self._waiting_snap:
            # The kept queues follow from these settings; a policy whose settings were changed starts afresh.
            settings = (self.thresholds, self.starve_factor)
            if settings != self._waiting_for or len(self._waiting) > 8192:
                self._waiting = {}  # views that left the queue are never asked again: dropped wholesale
                self._waiting_for = settings
            self._waiting_snap = snap
        # Keyed by identity; the entry holds the view, so its id cannot be reused while the entry lives.
        hit = self._waiting.get(id(job))
        if hit is not None and hit[0] is job and hit[2] <= clock < hit[3]:
            return hit[1]
        q = self._queue(snap, job)
        # From this clock (a promoted job was not promoted before it) until its queue may change.
        self._waiting[id(job)] = (job, q, clock, self.order_until(snap, job))
        return q

    def _queue(self, snap: Snapshot, job: JobView) -> int:
        if not self.thresholds:
            return 0  # one queue: FIFO, nobody displaced
        clock = snap.clock
        service = self.service(job, clock)
        if job.allocation is None:
            if service < self.thresholds[0]:
                return 0  # the common case: a job that has not yet used up its first queue
            return 0 if self._starving(job, clock - job.queued_since) else bisect_right(self.thresholds, service)
        # A running view keeps queued_since and started_at: whether it was promoted when it started.
        if job.started_at is not None and self._starving(job, job.started_at - job.queued_since):
            service -= self.service_before_run(job)
        return bisect_right(self.thresholds, service)

    def key(self, snap: Snapshot, job: JobView) -> Key:
        return (float(self.queue(snap, job)),)

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return self.queue(snap, job)  # the key, without building it

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        # Queues in order, FIFO by submit time within one. Each queue is computed once here and reused
        # by the preemption hooks through the memo (filled directly: this runs over the whole queue).
        memo = self._queues
        if memo is None or memo[0] is not snap:
            memo = self._queues = (snap, {})
        known = memo[1]
        compute = self._queue
        keyed = []
        waiting = self._waiting_queue
        for j in snap.queued:
            if j.allocation is None and j.rate == 0:
                q = waiting(snap, j)
            else:
                hit = known.get(id(j))
                if hit is not None and hit[0] is j:
                    q = hit[1]
                else:
                    q = compute(snap, j)
                    known[id(j)] = (j, q)
            spec = j.spec
            keyed.append((q, spec.submit_time_s, spec.job_id, j))
        keyed.sort(key=_RANK_KEY)
        return [k[3] for k in keyed]

    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (self.queue(snap, job), job.spec.submit_time_s, job.spec.job_id)

    def order_until(self, snap: Snapshot, job: JobView) -> float:
        """A waiting job's queue changes with time alone once: when it starves and is promoted."""
        if self.starve_factor is None or not self.thresholds or job.allocation is not None:
            return math.inf
        if self.service(job, snap.clock) < self.thresholds[0] or self._starving(job, snap.clock - job.queued_since):
            return math.inf  # in the first queue already, and a promoted job stays promoted while it waits
        gpus = job.spec.gpus
        executed = job.attained_gpu_s / gpus if gpus > 0 else 0.0
        if executed <= 0:
            return math.inf
        at = job.queued_since + self.starve_factor * executed
        return at - abs(at) * 1e-12 - 1e-9  # rounding must never put the promotion after this

    def next_change_s(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """Nobody waiting can displace anyone (every waiting class is in the last queue): only a promotion
        (the Session's) changes that. Else a waiting job of queue q may displace the running jobs of a queue
        above q that are in their checkpoint window, a window that opens when one completes a checkpoint and
        closes max_loss_s of work later: a gang still short of GPUs with every job it may displace released
        cannot start before windows open at once on enough of them (windows.enough_at). The next
        WINDOWS_FOLLOWED windows of each job are followed; past them (the horizon) a round is made."""
        return self.next_change_spans(snap, heads)[0][0]

    def next_change_spans(self, snap: Snapshot, heads: Sequence[JobView]) -> Sequence[tuple[float, float]]:
        """next_change_s()'s clock, and every later one, each with the clock until which the windows open from
        it on hold enough GPUs (windows.enough_at's spans): a round after that and before the next opening
        sees the windows short again, or only a subset of those a round at the opening would have seen."""
        last = len(self.thresholds)
        needs: dict[int, float] = {}  # queue -> the smallest gang of that queue that may displace others
        for h in heads:
            q = self.queue(snap, h)
            if q < last:
                spec = h.spec
                gpus = float(spec.gpus_per_learner * (spec.min_learners or spec.learners))
                needs[q] = min(needs.get(q, math.inf), gpus)
        if not needs or not snap.running:
            return _NEVER
        clock = snap.clock
        free = float(snap.free_gpus.sum())
        facts = (snap.running, free, tuple(sorted(needs.items())))
        memo = self._quiet
        if memo is not None and memo[0] is facts[0] and memo[1:3] == facts[1:] and memo[3] <= clock < memo[6]:
            # The same running jobs, free GPUs and gangs as at an earlier clock before its horizon, and nothing
            # started in the rounds since: the clocks found then still hold, less those already passed (a
            # window whose rounded opening lies within rounding of this clock may not have opened yet: kept).
            at, until, horizon = memo[4], memo[5], memo[6]
            i = int(np.searchsorted(at, clock - abs(clock) * 4e-12 - 4e-9, side="right"))
        else:
            at, until, horizon = self._enough_at(snap, needs, free)
            self._quiet = (*facts, clock, at, until, horizon)
            i = 0
        return [*zip(at[i:].tolist(), until[i:].tolist(), strict=True), (horizon, math.inf)]

    def _enough_at(self, snap: Snapshot, needs: Mapping[int, float], free: float
                   ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
        """The clocks before the horizon at which a waiting gang of `needs` could start by displacing jobs in
        their windows (sorted), until when the windows open from each on hold enough (windows.enough_at),
        and the horizon (infinite when none ever could)."""
        clock = snap.clock
        arrays, held, service, now = self._running_now(snap)
        opens, closes, later = self._windows(clock, arrays, self._work_mask(snap)[0], now)  # (windows, jobs)
        gpus = np.concatenate((held,) * opens.shape[0])  # of each window, in the order of opens.ravel()
        opened = np.isfinite(opens[0])
        found: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]] = []
        horizon = math.inf
        for q, need in needs.items():
            below = service < self.thresholds[q]
            crosses = np.where(below, arrays.reach[q], clock)
            ever = np.isfinite(crosses) & opened  # may be displaced by this gang now or later
            if float(held[ever].sum()) + 1e-9 < need - free:
                continue  # not even with every job it may ever displace
            # A window joins the set this gang may displace when it opens, or when its job crosses into a queue
            # this gang may displace (a job of such a queue has crosses == clock, so a window open now keeps
            # its opening, the clock).
            start = np.maximum(opens, crosses)
            seen = start <= closes  # a window that closes before its job crosses is never in the set
            # The current windows of the jobs this gang may displace now are in its set already: they only
            # close (the later windows of such a job join again after it closed).
            start[0, now & ~below & seen[0]] = -math.inf
            horizon = min(horizon, float(np.minimum.reduce(later[ever], initial=math.inf)))
            found.append(enough_at(start.ravel(), closes.ravel(), gpus, need - free))
        if not found:
            return np.empty(0), np.empty(0), horizon
        if len(found) == 1:
            at, until = found[0]  # sorted already
        else:
            at, until = np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])
            order = np.argsort(at, kind="stable")
            at, until = at[order], until[order]
        keep = at < horizon
        return at[keep], until[keep], horizon

    def _windows(self, clock: float, arrays: _RunArrays, work: npt.NDArray[np.float64], now: npt.NDArray[np.bool_]
                 ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The next WINDOWS_FOLLOWED checkpoint windows of each running job (rows; the first is the current
        one for a job in one, `now`): when each opens (rounded down; the clock for one open now; infinite
        for one that never opens) and closes (rounded up; infinite for one that never closes), and when each
        job's window after those opens (rounded down). `work`: each job's work done at `clock`."""
        n = now.size
        if self.max_loss_s is None:
            return np.full((1, n), clock), np.full((1, n), math.inf), np.full(n, math.inf)
        done, rate, as_of = arrays.done, arrays.rate, arrays.as_of
        ckpt, loss = self.checkpoint_interval_s, self.max_loss_s
        moving = rate > 0
        # Most running jobs make progress: then the masks below change nothing and are left out (the ufunc's
        # own reduce: ndarray.all() goes through Python first).
        stalled = not np.logical_and.reduce(moving)
        step = np.where(moving, rate, 1.0) if stalled else rate
        if ckpt <= 0:
            # No checkpoints: displaceable until max_loss_s of work is done, never again after.
            end = as_of + (loss - done) / step
            closes = np.where(moving, end + np.abs(end) * 1e-12 + 1e-9, math.inf)
            return np.where(now, clock, math.inf)[None], np.where(now, closes, -math.inf)[None], np.full(n, math.inf)
        # The checkpoints that open the windows followed, and the one after them (a job in a window now
        # follows it first: + 0, else its next one: + 1).
        k = (np.floor(work / ckpt) + ~now) + self._followed
        # Every number here is finite (a job that makes no progress divides by 1): windows.before() inline,
        # and its mirror for closings (a window must never close before it really does).
        reach = as_of + (k * ckpt - done) / step
        early = reach - np.abs(reach) * 1e-12 - 1e-9
        end = reach[:-1] + loss / step
        closes = end + np.abs(end) * 1e-12 + 1e-9
        if not stalled:
            opens = early[:-1]
            opens[0, now] = clock
            return opens, closes, early[-1]
        opens = np.where(moving, early[:-1], math.inf)
        opens[0, now] = clock
        closes = np.where(moving, closes, -math.inf)
        closes[0, now & ~moving] = math.inf
        return opens, closes, np.where(moving, early[-1], math.inf)

    def _row(self, job: JobView) -> tuple[float, ...]:
        """_RunArrays' numbers of one running view, in the order of its fields (kept by ViewRows)."""
        alloc = job.allocation
        assert alloc is not None
        done, ckpt = job.work_done_s, self.checkpoint_interval_s
        promoted = job.started_at is not None and self._starving(job, job.started_at - job.queued_since)
        row = (done, job.rate, job.as_of, job.attained_gpu_s, float(math.floor(done / ckpt)) if ckpt > 0 else done,
               float(alloc.gpus), float(job.spec.gpus), self.service_before_run(job) if promoted else 0.0)
        return row + tuple(self._reach_time(row, threshold + row[7]) for threshold in self.thresholds)

    def _run_arrays(self, running: Sequence[JobView]) -> _RunArrays:
        """The running views' numbers as arrays (once per tuple of views; each view's computed once)."""
        memo = self._arrays
        if memo is not None and memo[0] is running:
            return memo[1]
        # The kept numbers follow from these settings; a policy whose settings were changed starts afresh.
        settings = (self.thresholds, self.checkpoint_interval_s, self.starve_factor)
        if self._rows_for != settings:
            self._rows = ViewRows(8 + len(self.thresholds), self._row)
            self._rows_for = settings
        arrays = _RunArrays.of(self._rows.gather(running))
        self._arrays = (running, arrays)
        return arrays

    def _services(self, arrays: _RunArrays, work: npt.NDArray[np.float64], since: npt.NDArray[np.float64]
                  ) -> npt.NDArray[np.float64]:
        """service() of every running job at a clock, with the same float operations (GPU-seconds held);
        `work`: each one's work done then, `since`: max(0, clock - as_of)."""
        return arrays.attained + arrays.held * since

    def _reach_time(self, row: tuple[float, ...], service: float) -> float:
        """When a running job (its _row()) reaches `service` (rounded down; inf if it holds no GPU)."""
        _, _, as_of, attained, _, held, _, _ = row[:8]
        return _before(as_of + (service - attained) / held) if held > 0 else math.inf

    def displaceable(self, snap: Snapshot, victim: JobView) -> bool:
        """May `victim` be displaced now? With max_loss_s, only once it has saved a checkpoint since it
        (re)started (a run cut short before that is wholly lost, and the restart paid for nothing), and
        only while the work since its last checkpoint is at most max_loss_s."""
        return in_checkpoint_window(victim, snap.clock, self.checkpoint_interval_s, self.max_loss_s)

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        return self.queue(snap, victim) > self.queue(snap, job) and self.displaceable(snap, victim)

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        # Displaceable jobs first, the lowest queue first among them; within a queue the one that queue's
        # FIFO order serves last (Tiresias gives GPUs in queue order, so the tail of the lowest queue
        # loses them), then the one whose preemption wastes the fewest GPU-seconds.
        held = 0.0 if self.displaceable(snap, victim) else 1.0
        loss = preemption_loss_gpu_s(victim, snap.clock, self.checkpoint_interval_s, self.restart_overhead_s)
        return (held, -float(self.queue(snap, victim)), -victim.spec.submit_time_s, loss)

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # In victim_key order the displaceable jobs come first, lowest queue first, so the ones of a lower
        # queue than the job's are a prefix of them. Only that run is built (once per snapshot: the running
        # jobs that are displaceable now, sorted by victim_key), not decide()'s list of every running job,
        # and each job cuts its prefix by bisection instead of walking it.
        run = self._displaceable_run(snap)
        return iter(run[2][:bisect_left(run[1], -self.queue(snap, job))])

    def releasable_gpus(self, snap: Snapshot, gate: Gate, job: JobView) -> float | None:
        rel = self._releasable
        if rel is None or rel[0] is not snap:
            # The GPUs held by the jobs displaceable now, per queue, summed from the last queue up: a job of
            # queue q may displace those of the queues above q. GPUs are whole numbers, so the sums are those
            # of any order (victim_key's included).
            _, held, _, now = self._running_now(snap)
            levels = len(self.thresholds) + 1
            per_queue = np.bincount(self._running_queues(snap)[now], weights=held[now], minlength=levels).tolist()
            above = [0.0] * levels
            for q in range(levels - 2, -1, -1):
                above[q] = above[q + 1] + per_queue[q + 1]
            rel = self._releasable = (snap, above)
        return rel[1][self.queue(snap, job)]

    def _running_queues(self, snap: Snapshot) -> npt.NDArray[np.intp]:
        """queue() of every running job at once (once per snapshot): the number of thresholds at most the
        service its queue counts (_running_now's, with queue()'s float operations)."""
        memo = self._running_q
        if memo is not None and memo[0] is snap:
            return memo[1]
        thresholds = self._thresholds
        if thresholds[0] is not self.thresholds:
            thresholds = self._thresholds = (self.thresholds, np.asarray(self.thresholds, dtype=np.float64))
        queues: npt.NDArray[np.intp] = np.searchsorted(thresholds[1], self._running_now(snap)[2], side="right")
        self._running_q = (snap, queues)
        return queues

    def _running_now(self, snap: Snapshot) -> tuple[_RunArrays, npt.NDArray[np.float64], npt.NDArray[np.float64],
                                                    npt.NDArray[np.bool_]]:
        """The running jobs' arrays, GPUs held, service as their queue counts it (queue() of each is the
        number of thresholds at most that), and which are displaceable now, with queue()'s and displaceable()'s
        float operations (once per snapshot)."""
        memo = self._now
        if memo is not None and memo[0] is snap:
            return memo[1]
        arrays = self._run_arrays(snap.running)
        work, mask = self._work_mask(snap)
        assert self._work is not None
        state = (arrays, arrays.held, self._services(arrays, work, self._work[3]) - arrays.base, mask)
        self._now = (snap, state)
        return state

    def _displaceable_run(self, snap: Snapshot) -> tuple[Snapshot, list[int], list[JobView], list[float]]:
        """The running jobs displaceable now in victim_key order, minus each one's queue, and the GPUs of
        each prefix of them (once per snapshot)."""
        run = self._displaceable
        if run is None or run[0] is not snap:
            running = snap.running
            if type(self).victim_key is LasPolicy.victim_key:
                # victim_key() of each, its queue read off the running jobs' queues (queue()'s, at once): all
                # are displaceable, so its first element is the same for all and left out.
                clock, ckpt, restart = snap.clock, self.checkpoint_interval_s, self.restart_overhead_s
                queues = self._running_queues(snap).tolist()
                keyed = sorted(((-float(queues[i]), -running[i].spec.submit_time_s,
                                 preemption_loss_gpu_s(running[i], clock, ckpt, restart), i)
                                for i in np.flatnonzero(self._work_mask(snap)[1]).tolist()), key=_VICTIM_ORDER)
                jobs = [running[k[3]] for k in keyed]
                minus = [int(k[0]) for k in keyed]
            else:
                jobs = [v for v, ok in zip(running, self._displaceable_all(snap, running), strict=True) if ok]
                jobs.sort(key=lambda v: self.victim_key(snap, v))
                minus = [-self.queue(snap, v) for v in jobs]
            held = [0.0]
            for v in jobs:
                assert v.allocation is not None
                held.append(held[-1] + v.allocation.gpus)
            run = self._displaceable = (snap, minus, jobs, held)
        return run

    def _displaceable_all(self, snap: Snapshot, jobs: Sequence[JobView]) -> list[bool]:
        """displaceable() of every job at once, with the same float operations (this runs over every
        running job whenever a job may displace others)."""
        if jobs is not snap.running:
            return [self.displaceable(snap, v) for v in jobs]
        flags: list[bool] = self._work_mask(snap)[1].tolist()
        return flags

    def _work_mask(self, snap: Snapshot) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Each running job's work done at the snapshot's clock, and _displaceable_all() as an array (once
        per snapshot)."""
        memo = self._work
        if memo is not None and memo[0] is snap:
            return memo[1], memo[2]
        arrays = self._run_arrays(snap.running)
        done = arrays.done
        since = np.maximum(0.0, snap.clock - arrays.as_of)  # the time each has run since its numbers were taken
        work = done + arrays.rate * since
        ckpt = self.checkpoint_interval_s
        if self.max_loss_s is None:
            ok = np.ones(done.size, dtype=bool)
        elif ckpt <= 0:
            ok = work <= self.max_loss_s  # no checkpoints: every run counts as checkpointed, all work is lost
        else:
            # fmod is % for the non-negative numbers here (exact, as Python's % in in_checkpoint_window).
            ok = (np.floor(work / ckpt) > arrays.checkpoints) & (np.fmod(work, ckpt) <= self.max_loss_s)
        self._work = (snap, work, ok, since)
        return work, ok

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        # A job in the last queue has nobody below it.
        return self.queue(snap, job) < len(self.thresholds)


class HetLasPolicy(LasPolicy):
    """Heterogeneity-aware LAS: service is work done, and jobs go to the GPU types they run fastest on."""

    name = "las-het"

    def __init__(self, thresholds: Sequence[float] = TIRESIAS_THRESHOLDS_GPU_S,
                 starve_factor: float | None = DEFAULT_STARVE_FACTOR,
                 round_s: float | None = DEFAULT_ROUND_S,
                 max_loss_s: float | None = DEFAULT_MAX_LOSS_S,
                 checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S,
                 type_speed: Mapping[str, float] | None = None) -> None:
        super().__init__(thresholds, starve_factor, round_s, max_loss_s, checkpoint_interval_s, restart_overhead_s)
        self.type_speed = dict(DEFAULT_TYPE_SPEED if type_speed is None else type_speed)
        # Per (cluster types, job speeds): the types in the order offered (_preference). Both are immutable, and
        # a trace has few distinct speed tuples (most jobs none), so this stays small; type_preference() is
        # asked at every start, and on 117,000 Philly-like jobs sorting the types each time was ~5% of las-het.
        self._prefs: dict[tuple[tuple[str, ...], tuple[tuple[str, float], ...] | None], list[str]] = {}

    def service(self, job: JobView, clock: float) -> float:
        # Work-seconds are seconds on the job's best placement: a second on a GPU at a fifth of the speed
        # adds a fifth. Work lost to a preemption (since the last checkpoint) was not attained.
        return job.spec.gpus * job.work_at(clock)

    def service_before_run(self, job: JobView) -> float:
        return job.spec.gpus * job.work_done_s

    def _services(self, arrays: _RunArrays, work: npt.NDArray[np.float64], since: npt.NDArray[np.float64]
                  ) -> npt.NDArray[np.float64]:
        return arrays.gang * work

    def _reach_time(self, row: tuple[float, ...], service: float) -> float:
        done, rate, as_of, _, _, _, gpus, _ = row[:8]
        return _before(as_of + (service / gpus - done) / rate) if gpus > 0 and rate > 0 else math.inf

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        return (self.queue(snap, job), job.spec.type_speed)  # the preference follows the job's own speeds

    def type_preference(self, snap: Snapshot, job: JobView) -> Sequence[str] | None:
        types = snap.cluster.gpu_types
        spec = job.spec
        if len(types) <= 1 or spec.gpus_per_learner == 0:
            return None
        key = (types, spec.type_speed)
        found = self._prefs.get(key)
        if found is None:
            found = self._prefs[key] = self._preference(types, spec.type_speed)
        return found

    def _preference(self, types: tuple[str, ...], speeds: tuple[tuple[str, float], ...] | None) -> list[str]:
        """The types a job with per-type `speeds` (None: none known) is offered, in order, on a cluster of
        `types`."""
        # The job's own speeds when the trace has them (Gavel's per-type throughputs), else the default
        # table; a type the job has no number for comes after those it has, in the table's order. Ties
        # keep the cluster's order. Types where the job cannot run (speed 0) are left to the placer,
        # which never offers them.
        own = dict(speeds) if speeds is not None else {}

        def order(i_t: tuple[int, str]) -> tuple[int, float, int]:
            i, t = i_t
            if t in own:
                return (0, -own[t], i)
            return (1, -self.type_speed.get(t, 1.0), i)

        return [t for _, t in sorted(enumerate(types), key=order)]
