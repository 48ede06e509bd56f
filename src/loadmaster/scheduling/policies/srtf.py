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
from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.policies.base import Gate
from loadmaster.scheduling.policies.keyed import Key, KeyedPolicy
from loadmaster.scheduling.snapshot import JobView, Snapshot

# The simulator's defaults (sim.simulator.SimConfig); scheduling may not import sim, so they are repeated
# here. They only shape the estimate of what a preemption costs, never what the simulator charges.
DEFAULT_CHECKPOINT_INTERVAL_S = 900.0
DEFAULT_RESTART_OVERHEAD_S = 30.0

_WORK_DONE = attrgetter("work_done_s")
_RATE = attrgetter("rate")
_AS_OF = attrgetter("as_of")
_DURATION = attrgetter("spec.duration_s")
_STARTED = attrgetter("started_at")


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
    given back, i.e. preempted or scaled down. decide() tells a gate of every start and release."""

    def __init__(self, snap: Snapshot) -> None:
        super().__init__(snap)
        self.started_gpus = 0
        self.released: dict[str, JobView] = {}

    def add(self, job: JobView, learners: int | None = None) -> None:
        a = job.allocation
        if a is None:  # a queued job starts
            self.started_gpus += (job.spec.learners if learners is None else learners) * job.spec.gpus_per_learner
        elif learners is None or learners >= a.learners:  # a victim given back all it held
            self.released.pop(job.job_id, None)

    def remove(self, job: JobView) -> None:
        self.released[job.job_id] = job


class SrtfPolicy(KeyedPolicy):
    name = "srtf"

    def __init__(self, checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S) -> None:
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        # Running jobs by displaceable() at one snapshot, highest first (see _by_gain()).
        self._ranked: tuple[Snapshot, npt.NDArray[np.float64], list[int], Sequence[JobView]] | None = None
        self._held_memo: tuple[Snapshot, npt.NDArray[np.float64]] | None = None
        self._free_memo: tuple[Snapshot, list[float], float] | None = None  # free GPUs per node, in all

    def gate(self, snap: Snapshot) -> Gate:
        return _DisplacementGate(snap)

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

    def _by_gain(self, snap: Snapshot) -> tuple[npt.NDArray[np.float64], list[int], Sequence[JobView]]:
        """Every running job's displaceable(), negated and sorted (highest gain first; ties: the most
        recently started first, then snapshot order), the running jobs' positions in that order, and the
        running jobs. Computed once per snapshot: decide() may try to preempt for many queued jobs in one
        round, and this walks every running job."""
        ranked = self._ranked
        if ranked is None or ranked[0] is not snap:
            jobs = snap.running
            gains = self._gains(snap.clock, jobs)
            started = list(map(_STARTED, jobs))
            if None in started:
                started = [0.0 if t is None else t for t in started]
            # A stable sort of the negated keys: what sorted(..., reverse=True) on the keys gives.
            order = np.lexsort((-np.array(started, dtype=np.float64), -gains))
            ranked = self._ranked = (snap, -gains[order], order.tolist(), jobs)
        return ranked[1], ranked[2], ranked[3]

    def _gains(self, clock: float, jobs: Sequence[JobView]) -> npt.NDArray[np.float64]:
        """displaceable() of every job at once, with the same float operations in the same order."""
        n = len(jobs)
        done = np.fromiter(map(_WORK_DONE, jobs), np.float64, n)
        rate = np.fromiter(map(_RATE, jobs), np.float64, n)
        as_of = np.fromiter(map(_AS_OF, jobs), np.float64, n)
        duration = np.fromiter(map(_DURATION, jobs), np.float64, n)
        work = done + rate * np.maximum(0.0, clock - as_of)
        ckpt = self.checkpoint_interval_s
        lost = np.remainder(work, ckpt) if ckpt > 0 else work
        gains: npt.NDArray[np.float64] = np.maximum(0.0, duration - work) - lost - self.restart_overhead_s
        return gains

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        # Jobs are ranked by rising remaining work, and a job may displace those whose gain exceeds its own
        # remaining work: a later job of the same shape may displace a subset of an earlier one's victims,
        # so if that one found no room, neither does this one. The exact remaining work adds nothing.
        return ()

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        neg_gains, _, _ = self._by_gain(snap)
        return neg_gains.size > 0 and -float(neg_gains[0]) > job.remaining_at(snap.clock)

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # In victim_key order, from this policy's own per-snapshot ranking (decide()'s victims() would
        # recompute every key): the prefix whose gain exceeds the job's remaining work. None at all when
        # releasing every one of them cannot make room for the gang (decide() then gives up at once).
        neg_gains, order, jobs = self._by_gain(snap)
        k = int(np.searchsorted(neg_gains, -job.remaining_at(snap.clock), side="left"))
        if isinstance(gate, _DisplacementGate) and not self._may_fit(snap, gate, job, k):
            return ()
        return (jobs[i] for i in order[:k])

    def _may_fit(self, snap: Snapshot, gate: _DisplacementGate, job: JobView, k: int) -> bool:
        """Could `job`'s gang fit once the first k victims in _by_gain order are released? False only when it
        cannot: the GPUs free now, per server, are at most the snapshot's plus those of the victims released
        in this call and not given back (the jobs started since only took some), so with the k victims'
        added a server holds at most floor(x / GPUs per learner) learners. Most displacements of a long
        queue end here, without releasing anyone or asking the placer."""
        spec = job.spec
        learners = spec.min_learners or spec.learners if spec.elastic else spec.learners
        per = spec.gpus_per_learner
        released = gate.released.values()
        free_now, total = self._free(snap)
        total += sum(v.allocation.gpus for v in released if v.allocation is not None) - gate.started_gpus
        if total + float(self._held(snap)[k]) + 1e-9 < learners * per:
            return False
        if per <= 0:
            return True
        free = free_now.copy()
        _, order, jobs = self._by_gain(snap)
        for view in itertools.chain(released, (jobs[i] for i in order[:k])):
            a = view.allocation
            assert a is not None
            g = a.gpus_per_learner
            for node in a.learner_nodes:
                free[node] += g
        room = 0
        for gpus in free:
            room += int((gpus + 1e-9) // per)
        return room >= learners

    def _free(self, snap: Snapshot) -> tuple[list[float], float]:
        """The snapshot's free GPUs per server, and in all (once per snapshot)."""
        memo = self._free_memo
        if memo is None or memo[0] is not snap:
            free = snap.free_gpus.tolist()
            memo = self._free_memo = (snap, free, float(snap.free_gpus.sum()))
        return memo[1], memo[2]

    def _held(self, snap: Snapshot) -> npt.NDArray[np.float64]:
        """GPUs held by each prefix of the running jobs in _by_gain order (once per snapshot)."""
        held = self._held_memo
        if held is None or held[0] is not snap:
            _, order, jobs = self._by_gain(snap)
            gpus = np.fromiter((jobs[i].allocation.gpus for i in order  # type: ignore[union-attr]
                                ), np.float64, len(order))
            held = self._held_memo = (snap, np.concatenate(([0.0], np.cumsum(gpus))))
        return held[1]
