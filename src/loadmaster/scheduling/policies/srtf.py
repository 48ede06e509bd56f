"""SRTF: shortest remaining time first, preemptive.

The key is the job's expected remaining work in work-seconds (seconds on its best placement, what
JobView.remaining_at gives), not remaining wall time at its current rate: a job's key must not jump when
it moves to a slower GPU type or while it waits with rate 0, or two jobs could swap back and forth.

A running job is displaced only when that shortens the pair's total completion time. Preempting victim v
for job j makes v redo the work since its last checkpoint and pay a restart: with r the remaining work,
finishing v first costs 2·r_v + r_j, preempting costs 2·r_j + r_v + lost_v + restart, so it pays only if
r_v - lost_v - restart > r_j. That margin also rules out thrashing: after the swap the victim waits with
r_v + lost_v, more than r_j, and a running job's remaining work only falls, so it can never win back.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.keyed import Key, KeyedPolicy
from loadmaster.scheduling.snapshot import JobView, Snapshot

# The simulator's defaults (sim.simulator.SimConfig); scheduling may not import sim, so they are repeated
# here. They only shape the estimate of what a preemption costs, never what the simulator charges.
DEFAULT_CHECKPOINT_INTERVAL_S = 900.0
DEFAULT_RESTART_OVERHEAD_S = 30.0



def work_since_checkpoint(job: JobView, clock: float, checkpoint_interval_s: float) -> float:
    """Work-seconds a running job would lose if preempted at `clock` (all of it without checkpoints)."""
    work = job.work_at(clock)
    return work % checkpoint_interval_s if checkpoint_interval_s > 0 else work


def preemption_loss_gpu_s(job: JobView, clock: float, checkpoint_interval_s: float,
                          restart_overhead_s: float) -> float:
    """GPU-seconds a preemption of running `job` at `clock` wastes: the wall time of the work since its
    last checkpoint, plus the restart it will pay, on each of its GPUs."""
    lost_work = work_since_checkpoint(job, clock, checkpoint_interval_s)
    wall = lost_work / job.rate if job.rate > 0 else 0.0
    return job.spec.gpus * (wall + restart_overhead_s)


def checkpointed_this_run(job: JobView, clock: float, checkpoint_interval_s: float) -> bool:
    """Has running `job` saved a checkpoint since it (re)started? Until then a preemption undoes the
    whole run. Always true without periodic checkpoints (nothing would ever be kept)."""
    if checkpoint_interval_s <= 0:
        return True
    at_start = math.floor(job.work_done_s / checkpoint_interval_s)
    return math.floor(job.work_at(clock) / checkpoint_interval_s) > at_start


def in_checkpoint_window(job: JobView, clock: float, checkpoint_interval_s: float, max_loss_s: float | None) -> bool:
    """The checkpoint window of `las` and `drf` (las.py explains it): running `job` may be displaced only
    once it has checkpointed in its current run and while at most max_loss_s work-seconds would be lost,
    i.e. just after a checkpoint. max_loss_s None: at any time."""
    if max_loss_s is None:
        return True
    return (checkpointed_this_run(job, clock, checkpoint_interval_s)
            and work_since_checkpoint(job, clock, checkpoint_interval_s) <= max_loss_s)


class _DisplacementGate(Gate):
    """SRTF's gate: it admits every job, as Gate does, and books what bounds the GPUs a displacement may
    find in this decide() call: the GPUs of the jobs started, and the victims released and not (wholly)
    given back, i.e. preempted or scaled down. decide() tells a gate of every start and release, and shows
    it the call's free capacity (watch())."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__(snap)
        self.started_gpus = 0
        self.released: dict[str, JobView] = {}
        self.free: FreeCapacity | None = None
        # Starts and releases told so far: with the capacity's version, what the free arrays are at a point of
        # the call (decide() changes them only with a start or release it tells, a success that bumps the
        # version, or a search it undoes). The last bound answered, for that point.
        self.changes = 0
        self.last_room: tuple[JobView, int, int, int, bool] | None = None
        # The free GPUs per server at one point of the call ((changes, version)) and, per learner size, the
        # learners they hold: _fits_now() asks several classes at one point (5,104 of its 7,875 calls on the
        # 3k overload), each of which summed every server again.
        self.point: tuple[int, int] | None = None
        self.point_gpus: list[float] = []
        self.point_room: dict[float, int] = {}

    def watch(self, free: FreeCapacity) -> None:
        self.free = free

    def add(self, job: JobView, learners: int | None = None) -> None:
        self.changes += 1
        a = job.allocation
        if a is None:  # a queued job starts
            self.started_gpus += (job.spec.learners if learners is None else learners) * job.spec.gpus_per_learner
        elif learners is None or learners >= a.learners:  # a victim given back all it held
            self.released.pop(job.job_id, None)

    def remove(self, job: JobView) -> None:
        self.changes += 1
        self.released[job.job_id] = job


class _Running:
    """The running jobs' progress as arrays: fixed while the tuple is (a shell passes the same tuple while
    nobody starts or ends, e.g. between arrivals), so they are read once for every snapshot until then.

    A new tuple takes the rows of the views it shares with the last one (`prev`: a view is fixed, so its row
    is too) and reads only the others: a shell's next tuple is mostly the last one less the jobs that left,
    with those that started after them (the simulator's). The columns are the rows of one array, so the shared
    rows are taken in one concatenation, however many columns: on Philly's cluster (~870 jobs running on
    average over the 117k jobs) reading every view at every start and end was srtf's largest cost (4.4 s of
    CPU), and on the 3k overload (~54 running) reading them was ~7% of its run."""

    __slots__ = ("as_of", "done", "duration", "jobs", "rate", "rows", "started")

    def __init__(self, jobs: Sequence[JobView], prev: _Running | None = None) -> None:
        self.jobs = jobs
        runs, shared = _shared(prev.jobs, jobs) if prev is not None else ([], 0)
        rows = _read(jobs[shared:])
        if runs:
            assert prev is not None
            old = prev.rows
            rows = np.concatenate([old[:, a:b] for a, b in runs] + [rows], axis=1)
        self.rows: npt.NDArray[np.float64] = rows
        self.done: npt.NDArray[np.float64] = rows[0]
        self.rate: npt.NDArray[np.float64] = rows[1]
        self.as_of: npt.NDArray[np.float64] = rows[2]
        self.duration: npt.NDArray[np.float64] = rows[3]
        # When each job started (0 without a start: victim_key's `or 0.0`), for the victim order.
        self.started: npt.NDArray[np.float64] = rows[4]


def _read(views: Sequence[JobView]) -> npt.NDArray[np.float64]:
    """_Running's columns for `views`, one row per column."""
    return np.array([[v.work_done_s for v in views], [v.rate for v in views], [v.as_of for v in views],
                     [v.spec.duration_s for v in views], [v.started_at or 0.0 for v in views]], np.float64)


# How many runs of shared views _Running follows before it reads the rest of a new tuple afresh.
_MAX_GAPS = 8
# From how many running jobs _Gains sorts none of the gains up front (870 gains: the stable sort and the sorted
# copy ~50 us a snapshot; counting those above a work 1 us, asked ~2 times per snapshot on Philly's cluster),
# and the shortest prefix by falling gain it then sorts (most walks on Philly's cluster stop within ~30 jobs).
_UNSORTED_FROM = 192
_FIRST_SORTED = 64


def _shared(old: Sequence[JobView], new: Sequence[JobView]) -> tuple[list[tuple[int, int]], int]:
    """The runs (start, end) of the last tuple's views that the new one begins with, in order, and how many
    views of the new one they make. A shell's new tuple is the last one less the views that left (each ends a
    run) and then the others, which are read afresh. Each run's end is bisected on "the same view at the same
    offset" (true up to the first view that left, false past it, in such a tuple) and the run is then compared
    whole, in C (identical or equal views: equal rows); where that fails (views out of order, a view twice) the
    rest is read afresh. At 870 running views this costs ~10 us a tuple, the id() of every view 33 us."""
    runs: list[tuple[int, int]] = []
    i = j = 0
    for _ in range(_MAX_GAPS):
        size = min(len(old) - i, len(new) - j)
        if size <= 0:
            break
        lo, hi = 0, size
        while lo < hi:
            mid = (lo + hi) // 2
            if old[i + mid] is new[j + mid]:
                lo = mid + 1
            else:
                hi = mid
        run = lo
        if run:
            if old[i:i + run] != new[j:j + run]:
                break
            runs.append((i, i + run))
        i += run + 1  # old[i + run] left
        j += run
    return runs, j


class _Gains:
    """Every running job's displaceable() at one snapshot and its maximum; on first use, the victim order, the
    snapshot's free GPUs per server and, along the jobs by falling gain, what releasing each prefix of them
    adds."""

    __slots__ = ("_asked", "_by_gain", "_cum", "_free", "_order", "_rooms", "_want", "asc", "gains", "jobs", "most",
                 "running", "snap", "work")

    def __init__(self, snap: Snapshot, running: _Running, work: npt.NDArray[np.float64],
                 gains: npt.NDArray[np.float64]) -> None:
        self.snap = snap
        self.jobs = running.jobs
        self.running = running
        self.work = work
        self.gains = gains
        # For a few dozen jobs one sort gives both the positions by falling gain (by_gain(): nearly every
        # snapshot walks them) and the gains rising as a list, bisected (above(): bisect on a list beats any
        # numpy call). From _UNSORTED_FROM on nothing is sorted here: above() compares the array, and by_gain()
        # sorts only the prefix asked for (on Philly's cluster a snapshot's walks reach ~70 of ~900 jobs, and
        # sorting them all was most of srtf's per-snapshot cost).
        self._by_gain: list[int] | None = None
        self.asc: list[float] | None = None
        if gains.size < _UNSORTED_FROM:
            by_gain_at = (-gains).argsort(kind="stable")
            self._by_gain = by_gain_at.tolist()
            self.asc = gains[by_gain_at[::-1]].tolist()
            self.most = self.asc[-1] if self.asc else -math.inf
        else:
            self.most = float(gains.max()) if gains.size else -math.inf
        self._order: list[int] | None = None
        self._free: tuple[list[float], float, dict[float, int]] | None = None
        self._cum: list[int] = [0]  # extended by gpus_of_first() as asked
        self._rooms: dict[float, _Rooms] = {}
        self._asked: JobView | None = None
        self._want = 0.0

    def order(self) -> list[int]:
        """The running jobs' positions by displaceable(), highest first; ties: the most recently started
        first, then snapshot order (a stable sort of the negated keys: what sorted(..., reverse=True) on
        victim_key gives). Only a displacement that may fit walks the victims, so it is sorted then."""
        order = self._order
        if order is None:
            order = self._order = np.lexsort((-self.running.started, -self.gains)).tolist()
        return order

    def want_of(self, job: JobView) -> float:
        """The remaining work `job` must beat a gain by, at this snapshot's clock: the walk asks preemptor()
        and then room_by_displacing() of one job, so the last answer is kept."""
        if self._asked is job:
            return self._want
        want = self._want = job.remaining_at(self.snap.clock)
        self._asked = job
        return want

    def above(self, want: float) -> int:
        """How many running jobs gain more than `want`: the first that many of order(), and of by_gain()."""
        asc = self.asc
        if asc is None:
            return int(np.count_nonzero(self.gains > want))
        return len(asc) - bisect_right(asc, want)

    def by_gain(self, k: int) -> list[int]:
        """The running jobs' positions by falling displaceable(), ties in any order, at least the first `k` of
        them (all where fewer run): its first above(x) are the jobs that gain more than x, as in order(), which
        only orders ties further. A longer prefix asked later extends the one given, which stays its start
        (the walks along it keep their counts): every job after it gains no more than the prefix's last."""
        by_gain = self._by_gain
        if by_gain is None:
            by_gain = self._by_gain = []
        if len(by_gain) < k:
            gains = self.gains
            n = gains.size
            if by_gain:
                rest = np.ones(n, dtype=bool)
                rest[by_gain] = False
                left = np.flatnonzero(rest)
            else:
                left = np.arange(n)
            # The prefix at least doubles: a few sorts per snapshot at most, however the asks grow.
            more = min(max(k - len(by_gain), len(by_gain), _FIRST_SORTED), left.size)
            neg = -gains[left]
            if more < left.size:
                top = neg.argpartition(more - 1)[:more]
                left, neg = left[top], neg[top]
            by_gain.extend(left[neg.argsort(kind="stable")].tolist())
        return by_gain

    def gpus_of_first(self, k: int, enough: float = math.inf) -> int:
        """The GPUs the first `k` jobs of by_gain() hold, in all (the sums extended along it as asked). With
        `enough`: that sum where it is below `enough`, else any sum of at least `enough` (the walk may stop
        there: a displacement needs a few GPUs, and hundreds of jobs may gain more than a long job's work)."""
        cum = self._cum
        if k >= len(cum) and cum[-1] < enough:
            jobs, total = self.jobs, cum[-1]
            for i in self.by_gain(k)[len(cum) - 1:k]:
                a = jobs[i].allocation
                assert a is not None
                total += len(a.learner_nodes) * a.gpus_per_learner
                cum.append(total)
                if total >= enough:
                    break
        return cum[min(k, len(cum) - 1)]

    def free(self) -> tuple[list[float], float, dict[float, int]]:
        """The snapshot's free GPUs per server, in all (its sum: decide()'s FreeCapacity starts from it too),
        and per learner size the learners they hold (room())."""
        free = self._free
        if free is None:
            free = self._free = (self.snap.free_gpus.tolist(), self.snap.free_gpu_total, {})
        return free

    def room(self, per: float) -> int:
        """How many learners of `per` GPUs the snapshot's free servers hold at most: from its free-GPU buckets
        where its shell keeps them (a few counts, not every server)."""
        by_size = self.free()[2]
        room = by_size.get(per)
        if room is None:
            buckets = self.snap.free_buckets
            if buckets is not None:
                room = sum(len(servers) * int((gpus + 1e-9) // per) for gpus, servers in buckets.items())
            else:
                room = sum(int((gpus + 1e-9) // per) for gpus in self.free()[0])
            by_size[per] = room
        return room

    def room_with_first(self, per: float, k: int, enough: float = math.inf) -> int:
        """How many learners of `per` GPUs the servers could hold at most with the first `k` jobs of by_gain()
        released: _may_fit()'s count with nothing else released, extended along it as asked. With `enough`: that
        count where it is below `enough`, else any count of at least `enough` (the walk may stop there)."""
        rooms = self._rooms.get(per)
        if rooms is None:
            rooms = self._rooms[per] = _Rooms(self.room(per))
        return rooms.at(k, per, self, enough)


class _Rooms:
    """_Gains.room_with_first() for one learner size: the count after each prefix of by_gain() so far, and
    the free GPUs of each server that prefix touched, with it released (whole numbers: exact)."""

    __slots__ = ("counts", "now")

    def __init__(self, room: int) -> None:
        self.counts = [room]
        self.now: dict[int, float] = {}

    def at(self, k: int, per: float, gains: _Gains, enough: float = math.inf) -> int:
        counts = self.counts
        if k < len(counts):
            return counts[k]
        if counts[-1] >= enough:
            return counts[-1]  # releasing more only adds room: the count at k is at least this one
        free_now = gains.free()[0]
        now = self.now
        order, jobs = gains.by_gain(k), gains.jobs
        room = counts[-1]
        for i in order[len(counts) - 1:k]:
            a = jobs[i].allocation
            assert a is not None
            g = a.gpus_per_learner
            nodes = a.learner_nodes
            for node in nodes:
                before = now.get(node)
                if before is None:
                    before = free_now[node]
                after = now[node] = before + g
                room += int((after + 1e-9) // per) - int((before + 1e-9) // per)
            counts.append(room)
            if room >= enough:
                break
        return room


class SrtfPolicy(KeyedPolicy):
    name = "srtf"

    def __init__(self, checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S) -> None:
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        # The running jobs' arrays (kept while the shell passes the same tuple) and their gains at the last
        # snapshot asked about.
        self._running: _Running | None = None
        self._gains_memo: _Gains | None = None
        # answers_hold_until()'s last answer, with the snapshot and heads it was for: the simulator asks
        # next_change_s() at a stale pass for the decision whose walk asked it last (665 of 680 times on the 3k
        # overload).
        self._held: tuple[Snapshot, tuple[JobView, ...], float] | None = None

    def gate(self, snap: Snapshot) -> Gate:
        return _DisplacementGate(snap)

    def admits_alone(self, snap: Snapshot, job: JobView) -> bool:
        # The gate only keeps books for the displacement bound and admits everyone, as Gate does: asked at most
        # arrivals, making one to ask it was ~3 % of srtf's simulation on 117,000 Philly-like jobs.
        return True

    def key(self, snap: Snapshot, job: JobView) -> Key:
        return (job.remaining_at(snap.clock),)

    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        # KeyedPolicy's order, with the key inlined: this sort runs over the whole queue every decision.
        clock = snap.clock
        return sorted(snap.queued, key=lambda j: (j.remaining_at(clock), j.spec.submit_time_s, j.spec.job_id))

    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        return (job.remaining_at(snap.clock), job.spec.submit_time_s, job.spec.job_id)

    def order_until(self, snap: Snapshot, job: JobView) -> float:
        # A queued job makes no progress (rate 0): its remaining work stays put while it waits.
        return float("inf") if job.rate == 0 else snap.clock

    def displaceable(self, snap: Snapshot, victim: JobView) -> float:
        """The remaining work a job must beat to displace `victim`: its own, less what preempting it costs."""
        # Runs for every running job whenever a preemption is tried, so the work is read once.
        work = victim.work_at(snap.clock)
        ckpt = self.checkpoint_interval_s
        lost = work % ckpt if ckpt > 0 else work
        return max(0.0, victim.spec.duration_s - work) - lost - self.restart_overhead_s

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        return self.displaceable(snap, victim) > job.remaining_at(snap.clock)

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        # The victim with most to gain from being displaced first; ties: the most recently started.
        return (-self.displaceable(snap, victim), -(victim.started_at or 0.0))

    def _by_snapshot(self, snap: Snapshot) -> _Gains:
        """The running jobs' gains at `snap` (once per snapshot: decide() may try to preempt for many queued
        jobs in one round, and this reads every running job)."""
        memo = self._gains_memo
        if memo is None or memo.snap is not snap:
            jobs = snap.running
            running = self._running
            if running is None or running.jobs is not jobs:
                running = self._running = _Running(jobs, running)
            memo = self._gains_memo = _Gains(snap, running, *self._gains(snap.clock, running))
        return memo

    def _gains(self, clock: float, r: _Running) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Every job's work at `clock` and displaceable(), at once, with the same float operations in the same
        order."""
        work = r.done + r.rate * np.maximum(0.0, clock - r.as_of)
        ckpt = self.checkpoint_interval_s
        lost = np.remainder(work, ckpt) if ckpt > 0 else work
        gains: npt.NDArray[np.float64] = np.maximum(0.0, r.duration - work) - lost - self.restart_overhead_s
        return work, gains

    def answers_hold_until(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """Until a running job saves a checkpoint that may let a class's first job displace it where it could
        not at `snap`. Between its checkpoints a running job's displaceable() only falls (its remaining work
        falls, its work since the last checkpoint grows); a checkpoint drops the work at stake to 0 and the
        gain jumps to at most its remaining work then less the restart, and each later one to less. A queued
        job's remaining work stays put, so until such a checkpoint each head (and each later job of its class,
        with at least its remaining work) may displace a subset of the jobs it could displace at `snap`, and
        a displacement that failed then fails again."""
        held = self._held
        if (held is not None and held[0] is snap and len(held[1]) == len(heads)
                and all(a is b for a, b in zip(held[1], heads, strict=True))):
            return held[2]
        until = self._checkpoint_matters_at(snap, heads)
        self._held = (snap, tuple(heads), until)
        return until

    def _checkpoint_matters_at(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """answers_hold_until(), worked out."""
        ckpt = self.checkpoint_interval_s
        if ckpt <= 0 or not snap.running:
            return math.inf  # all the work is at stake: a gain only ever falls
        clock = snap.clock
        wants = np.fromiter((h.remaining_at(clock) for h in heads), np.float64, len(heads))
        wants.sort()
        if not wants.size:
            return math.inf
        memo = self._by_snapshot(snap)  # the gains the walk used, and the running jobs' arrays
        r = self._running
        assert r is not None and r.jobs is memo.jobs
        work = memo.work  # every running job's work at `clock` (work_at()'s operations, in its order)
        saved = (np.floor(work / ckpt) + 1.0) * ckpt  # the work at each one's next checkpoint
        most = np.maximum(0.0, r.duration - saved) - self.restart_overhead_s  # its gain just after it
        # The first head that cannot displace it now (remaining work >= its gain): could it after the checkpoint?
        i = wants.searchsorted(memo.gains, side="left")
        first = wants[np.minimum(i, wants.size - 1)]
        moving = r.rate > 0  # a job making no progress keeps its gain
        risky = moving & (i < wants.size) & (first < most + 1e-6)
        if not risky.any():
            return math.inf
        at = np.maximum(clock, r.as_of[risky]) + (saved[risky] - work[risky]) / r.rate[risky]
        # A millisecond early: rounding must not reach the checkpoint before this says.
        return float(at.min()) - 1e-3

    def next_change_s(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """answers_hold_until(): after a decision that changed nothing, the same running jobs, free GPUs and
        queue at a later clock get the same answers until a running job's checkpoint may let a waiting job
        displace it. A failed displacement leaves the job the reason its placement gave (decide.py's
        place_by_preempting), so the Waits repeat too. `heads` must be each class's first job (the Session's
        heads()): a later one, with more remaining work, may displace fewer. Running elastic jobs may be
        shrunk or grown, which answers_hold_until() does not follow: no bound then."""
        if snap.running_elastic:
            return snap.clock
        return self.answers_hold_until(snap, heads)

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        # Jobs are ranked by rising remaining work, and a job may displace those whose gain exceeds its own
        # remaining work: a later job of the same shape may displace a subset of an earlier one's victims,
        # so if that one found no room, neither does this one. The exact remaining work adds nothing.
        return ()

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        memo = self._gains_memo
        if memo is None or memo.snap is not snap:
            memo = self._by_snapshot(snap)
        want = memo.want_of(job)
        return memo.most > want

    def room_by_displacing(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        # victim_candidates()'s bound, at this point of the call: before anything happened it only tightens
        # as jobs start (fewer free GPUs in all; the same candidates and servers), and a later job of the
        # class, with at least this one's remaining work, has a prefix of its candidates.
        if not isinstance(gate, _DisplacementGate):
            return True
        memo = self._gains_memo
        if memo is None or memo.snap is not snap:
            memo = self._by_snapshot(snap)
        return self._room(gate, job, memo, memo.above(memo.want_of(job)))

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # In victim_key order, from this policy's own per-snapshot gains (decide()'s victims() would
        # recompute every key): those whose gain exceeds the job's remaining work, which come first by falling
        # gain. None at all when releasing every one of them cannot make room for the gang (decide() then
        # gives up at once).
        memo = self._by_snapshot(snap)
        k = memo.above(memo.want_of(job))
        if isinstance(gate, _DisplacementGate) and not self._room(gate, job, memo, k):
            return ()
        jobs = memo.jobs
        return (jobs[i] for i in memo.order()[:k])

    def _room(self, gate: _DisplacementGate, job: JobView, memo: _Gains, k: int) -> bool:
        """Could `job`'s gang fit once the first `k` running jobs of the victim order are released, at this
        point of the decide() call? False only when it cannot."""
        free = gate.free
        if free is None:  # a gate no decide() call watches (a test's): the snapshot's bound
            return self._may_fit(gate, job, memo, k)
        last = gate.last_room
        if (last is not None and last[0] is job and last[1] == k and last[2] == gate.changes
                and last[3] == free.version):
            return last[4]  # a walk asks room_by_displacing(), then attempt() asks victim_candidates()
        if gate.released:
            # Someone was displaced in this call: the free GPUs as they are now bound it more tightly than the
            # snapshot's plus every release (and cost the same walk over the candidates).
            fits = self._fits_now(free, gate, job, memo, k)
        else:
            # The snapshot's bound first (its sums are kept per snapshot); once jobs have started in this
            # call, the free GPUs as they are now, where the started gangs went: under overload that rules
            # out most searches the snapshot's bound lets through (they would release victims, try the placer
            # and fail).
            fits = self._may_fit(gate, job, memo, k) and (
                (gate.started_gpus == 0 and free.version == 0) or self._fits_now(free, gate, job, memo, k))
        gate.last_room = (job, k, gate.changes, free.version, fits)
        return fits

    def _fits_now(self, free: FreeCapacity, gate: _DisplacementGate, job: JobView, memo: _Gains, k: int) -> bool:
        """Could `job`'s gang fit once the first `k` running jobs of the victim order are released, on the free
        GPUs of this decide() call as they are now? False only when it cannot: the search releases at most
        those candidates not displaced already (gate.released: preempted or scaled down in this call; their
        GPUs are in `free` now), all they hold (an elastic one keeps its minimum), and a server then holds
        at most floor(x / GPUs per learner) learners. A job moved in this call counts again: looser, still
        a bound. GPU counts are whole numbers, so every sum is exact in any order.

        The GPUs in all first (most answers on the 3k overload are a "no" they give), then the room; both
        counts only grow as candidates are released, so each walk stops once it reaches the gang, and the
        candidates are taken in any order: by_gain()'s first `k` are the same jobs as order()'s, without the
        victim order's sort (on Philly's cluster hundreds of jobs may gain more than a waiting job's work)."""
        spec = job.spec
        learners = spec.min_learners or spec.learners if spec.elastic else spec.learners
        per = spec.gpus_per_learner
        if per <= 0:
            return True  # a gang of no GPUs needs none
        jobs, released = memo.jobs, gate.released
        candidates = memo.by_gain(k)[:k]
        need = learners * per - 1e-9
        total = free.total_gpus
        if total < need:
            for i in candidates:
                v = jobs[i]
                a = v.allocation
                if a is not None and v.job_id not in released:
                    total += len(a.learner_nodes) * a.gpus_per_learner
                    if total >= need:
                        break
            else:
                return False
        point = (gate.changes, free.version)
        if gate.point != point:
            gate.point, gate.point_gpus, gate.point_room = point, free.gpus.tolist(), {}
        gpus = gate.point_gpus
        room = gate.point_room.get(per)
        if room is None:  # every server once per point (numpy's floor division is Python's)
            room = gate.point_room[per] = int(np.floor_divide(free.gpus + 1e-9, per).sum())
        if room >= learners:
            return True
        now: dict[int, float] = {}  # server -> its free GPUs with the candidates walked so far released
        for i in candidates:
            v = jobs[i]
            a = v.allocation
            if a is None or v.job_id in released:
                continue
            g = a.gpus_per_learner
            for node in a.learner_nodes:
                before = now.get(node)
                if before is None:
                    before = gpus[node]
                after = now[node] = before + g
                room += int((after + 1e-9) // per) - int((before + 1e-9) // per)
            if room >= learners:
                return True
        return False

    def _may_fit(self, gate: _DisplacementGate, job: JobView, memo: _Gains, k: int) -> bool:
        """Could `job`'s gang fit once the first `k` running jobs of the victim order are released? False only
        when it cannot: the GPUs free now, per server, are at most the snapshot's plus those of the victims
        released in this call and not given back (the jobs started since only took some), so with the
        candidates' added a server holds at most floor(x / GPUs per learner) learners. Most displacements
        of a long queue end here, without releasing anyone or asking the placer. With nobody released in
        this call (most of them), both counts come from the snapshot's prefix sums along the victim order
        (_Gains); else the candidates' and the released jobs' servers are counted again. GPU counts are
        whole numbers, so every sum is exact in any order."""
        spec = job.spec
        learners = spec.min_learners or spec.learners if spec.elastic else spec.learners
        per = spec.gpus_per_learner
        need = learners * per
        free_now, total, _ = memo.free()
        if not gate.released:
            # The GPUs in all first (a walk along the prefix without the servers), then the room, as far as it
            # takes to reach the gang (the count only grows along the prefix).
            now = total - gate.started_gpus
            if now + memo.gpus_of_first(k, need - now) + 1e-9 < need:
                return False
            return per <= 0 or memo.room_with_first(per, k, learners) >= learners
        jobs = memo.jobs
        released = [v.allocation for v in gate.released.values()]
        candidates = [jobs[i].allocation for i in memo.order()[:k]]
        total += sum(a.gpus for a in released if a is not None) - gate.started_gpus
        if total + sum(a.gpus for a in candidates if a is not None) + 1e-9 < need:
            return False
        if per <= 0:
            return True
        room = memo.room(per)
        added: dict[int, float] = {}
        for a in itertools.chain(released, candidates):
            assert a is not None
            g = a.gpus_per_learner
            for node in a.learner_nodes:
                added[node] = added.get(node, 0.0) + g
        for node, more in added.items():
            before = free_now[node]
            room += int((before + more + 1e-9) // per) - int((before + 1e-9) // per)
        return room >= learners
