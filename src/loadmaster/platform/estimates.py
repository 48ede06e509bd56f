"""Queue-wait estimates: when will each queued job start?

The simulator is run forward from the live snapshot (sim/forecast.py): running jobs end after their
remaining expected time, queued jobs wait in the policy's order, nothing new arrives, and the same policy
and placer decide. Each queued job's simulated start is its estimate.

A forecast costs one decide() per simulated event, too much for every round, so it runs in a child process
on a copy of the policy and placer (the child dies with the server, however the server dies): at most once
every `interval_s`, and only when the queue changed since the last one. Its cost grows with the queue (the
copy taken in the loop's thread, the forecast in the child), so the pause after a forecast also grows with
what the last one cost: at least cost / `duty`, so that estimating takes at most about that share of a
core however long the queue (with a stream of tiny jobs the queue changes every round). To bound the number
of events, the remaining time of every job is rounded to a quantum (a twentieth of the median remaining
time, between 0.1 s and 5 minutes): jobs then end together on a grid, and estimates are good to about that quantum.

Estimates are recorded in the Estimate table when they first exist and when they move by more than a tenth
of the time still to wait (at least `min_record_delta_s`), so that the error against the actual start can
be reported (estimation_error(), docs/benchmarks.md) without a row per job per forecast.
"""

from __future__ import annotations

import copyreg
import ctypes
import dataclasses
import io
import logging
import math
import multiprocessing
import os
import pickle
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sqlalchemy import select

from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Estimate, Job
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.policies.base import Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot
from loadmaster.sim.forecast import DEFAULT_HORIZON_S, forecast

log = logging.getLogger("loadmaster.estimates")


def quantum_of(snap: Snapshot) -> float:
    remaining = [v.remaining_at(snap.clock) for v in (*snap.queued, *snap.running)]
    if not remaining:
        return 1.0
    return min(300.0, max(0.1, statistics.median(remaining) / 20))


def coarsen(snap: Snapshot, quantum: float) -> Snapshot:
    """The same snapshot with every job's remaining time rounded to a multiple of `quantum` (at least one)."""

    def rounded(view: JobView) -> JobView:
        done = view.work_at(snap.clock)
        left = max(quantum, quantum * round(view.remaining_at(snap.clock) / quantum))
        spec = dataclasses.replace(view.spec, duration_s=done + left)
        if view.allocation is None:
            return dataclasses.replace(view, spec=spec)
        return dataclasses.replace(view, spec=spec, work_done_s=done, as_of=snap.clock)

    return Snapshot.build(snap.clock, snap.cluster, snap.free_gpus, snap.free_cpus, snap.free_mem,
                          tuple(rounded(v) for v in snap.queued), tuple(rounded(v) for v in snap.running),
                          snap.tenants)


def _proxy(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def dumps(snap: Snapshot, policy: Policy, placer: Placer) -> bytes:
    """The forecast's input as bytes: a copy of the live policy and placer, state and memos included,
    taken in the caller's thread (the loop's, between two decisions). Snapshots hold read-only mappings,
    which pickle does not know: they travel as dicts."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: lambda m: (_proxy, (dict(m),))}
    pickler.dump((snap, policy, placer))
    return buffer.getvalue()


@dataclass(frozen=True)
class Forecasted:
    starts: dict[str, float | None]
    decisions: int
    took_s: float
    loaded_s: float = 0.0  # of took_s, reading the payload (the first in a new process imports the scheduler)


def forecast_payload(payload: bytes, horizon_s: float, max_decisions: int | None,
                     between: Callable[[], None] | None = None) -> Forecasted:
    """Run one forecast from dumps()'s bytes (in the estimator's process, or in this one)."""
    started = time.perf_counter()
    snap, policy, placer = pickle.loads(payload)
    loaded = time.perf_counter()
    result = forecast(coarsen(snap, quantum_of(snap)), policy, placer, horizon_s=horizon_s,
                      max_decisions=max_decisions, between=between)
    return Forecasted(dict(result.starts), result.decisions, time.perf_counter() - started, loaded - started)


def _die_with(parent: int) -> None:
    """In the forecast's child process, first thing: die when the server does, however it dies (a kill -9
    gives it no chance to stop its children). Linux: the kernel sends SIGKILL (PR_SET_PDEATHSIG); elsewhere,
    and as a backstop, a thread watches for the child being re-parented."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it died before the line above
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(parent,), name="loadmaster-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


_PR_SET_PDEATHSIG = 1


class _Stopped(Exception):
    """The estimator is stopping: the forecast under way is abandoned."""


@dataclass(frozen=True)
class _Offer:
    clock: float
    payload: bytes


class Estimator:
    """Forecasts beside the loop; `latest` holds the newest estimates (job id -> UNIX time or None).

    By default a forecast runs in a child process of its own (started on first use): it is CPU-bound
    Python, and in a thread it would share the interpreter lock with the loop and slow its rounds down.
    `in_process=True` runs it in a thread of this process instead, holding still during rounds (pause()).
    """

    def __init__(self, store: Store, *, interval_s: float = 5.0, horizon_s: float = DEFAULT_HORIZON_S,
                 max_decisions: int | None = 5000, min_record_delta_s: float = 1.0,
                 clock: Callable[[], float] = time.time, in_process: bool = False, duty: float = 0.1) -> None:
        if not 0 < duty <= 1:
            raise ValueError(f"duty must be in (0, 1], got {duty!r}")
        self.store = store
        self.interval_s = interval_s
        self.duty = duty  # the share of a core forecasts may take: the pause after one is at least its cost / duty
        self.horizon_s = horizon_s
        self.max_decisions = max_decisions
        self.min_record_delta_s = min_record_delta_s
        self.clock = clock
        self.in_process = in_process
        self.latest: Mapping[str, float | None] = MappingProxyType({})
        self.forecasts = 0
        self.last_forecast_s = 0.0  # how long the last forecast took where it ran
        # What the last forecast cost, for the pause after it: the copy in the loop's thread and the forecast
        # itself (not the child's reading of the copy: its first one imports the scheduler, once).
        self.last_cost_s = 0.0
        self._dump_s = 0.0
        self._recorded: dict[str, float | None] = {}
        self._stale = False
        self._ran_at = -math.inf
        self._offer: _Offer | None = None
        self._busy = False
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._stopping = False
        # Cleared while the control loop runs a round: an in-process forecast waits between two of its
        # decisions, so that a round shares the interpreter lock with it for one decision at most.
        self._go = threading.Event()
        self._go.set()

    # -- the loop's side ----------------------------------------------------------------------------------
    def pause(self) -> None:
        """A round begins: an in-process forecast holds still at its next decision."""
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def mark_stale(self) -> None:
        """The queue changed: a new forecast is wanted."""
        with self._cv:
            self._stale = True

    def wants(self, now: float) -> bool:
        """True if the loop should offer a snapshot now (stale, idle, and the interval has passed)."""
        with self._cv:
            pause = max(self.interval_s, self.last_cost_s / self.duty)
            return self._stale and not self._busy and self._offer is None and now - self._ran_at >= pause

    def offer(self, snap: Snapshot, policy: Policy, placer: Placer) -> None:
        """Forecast from `snap` with the policy and placer as they are now (copied here, in the caller's
        thread, while nothing else uses them)."""
        started = time.perf_counter()
        payload = dumps(snap, policy, placer)
        with self._cv:
            self._dump_s = time.perf_counter() - started
            self._stale = False
            self._offer = _Offer(snap.clock, payload)
            self._cv.notify()
        self.start()  # the worker starts with the first offer (a loop driven by tick() alone needs it too)

    def clear(self) -> None:
        """Nothing is queued: no estimates."""
        with self._cv:
            self._stale = False
            self.latest = MappingProxyType({})

    def run_now(self, snap: Snapshot, policy: Policy, placer: Placer) -> Mapping[str, float | None]:
        """Forecast and record in the caller's thread (tests, benchmarks)."""
        self._forecast(_Offer(snap.clock, dumps(snap, policy, placer)), in_process=True)
        return self.latest

    # -- the worker ---------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="loadmaster-estimates", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._go.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _work(self) -> None:
        while True:
            with self._cv:
                while self._offer is None and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                offer, self._offer = self._offer, None
                self._busy = True
            try:
                assert offer is not None
                self._forecast(offer, in_process=self.in_process)
            except _Stopped:
                return
            except Exception:  # a forecast that fails must not take the estimates down for good
                log.exception("queue forecast failed; keeping the previous estimates")
                with self._cv:
                    if self._pool is not None and not self._stopping:
                        self._pool.shutdown(wait=False, cancel_futures=True)
                        self._pool = None  # a broken child is replaced at the next forecast
            finally:
                with self._cv:
                    self._busy = False

    def _between(self) -> None:
        self._go.wait()
        if self._stopping:
            raise _Stopped

    def _forecast(self, offer: _Offer, *, in_process: bool) -> None:
        if in_process:
            between = self._between if threading.current_thread() is self._thread else None
            done = forecast_payload(offer.payload, self.horizon_s, self.max_decisions, between)
        else:
            with self._cv:
                if self._stopping:
                    return
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=_die_with, initargs=(os.getpid(),))
                pool = self._pool
            done = pool.submit(forecast_payload, offer.payload, self.horizon_s, self.max_decisions).result()
        self.latest = MappingProxyType(done.starts)
        self.forecasts += 1
        self._ran_at = self.clock()
        self.last_forecast_s = done.took_s
        with self._cv:
            self.last_cost_s = self._dump_s + done.took_s - done.loaded_s
        self._record(offer.clock, done.starts)

    def _record(self, made_at: float, starts: Mapping[str, float | None]) -> None:
        rows = []
        for job_id, at in starts.items():
            if job_id in self._recorded:
                before = self._recorded[job_id]
                if before is None or at is None:
                    same = before is at
                else:
                    same = abs(at - before) <= max(self.min_record_delta_s, 0.1 * (before - made_at))
                if same:
                    continue
            self._recorded[job_id] = at
            rows.append(Estimate(job_id=job_id, made_at=made_at, estimated_start_at=at))
        for job_id in [j for j in self._recorded if j not in starts]:
            del self._recorded[job_id]  # started or gone: its record is complete
        if rows:
            with self.store.session() as s:
                s.add_all(rows)


@dataclass(frozen=True)
class EstimateAccuracy:
    """How far estimates were from the actual first start (actual - estimated: > 0 means it started later)."""

    which: str  # "first": each job's first estimate; "last": its last one before it started
    jobs: int
    mean_abs_error_s: float | None
    median_abs_error_s: float | None
    p90_abs_error_s: float | None
    mean_error_s: float | None  # bias
    mean_wait_s: float | None  # actual queueing delay of the same jobs, for scale
    samples: list[tuple[str, float, float, float]] = field(default_factory=list)  # job, made, estimated, actual


def estimation_error(store: Store, which: str = "first") -> EstimateAccuracy:
    """Compare recorded estimates with the jobs' actual first start, over jobs that have started."""
    if which not in ("first", "last"):
        raise ValueError(f"which must be 'first' or 'last', got {which!r}")
    with store.session() as s:
        rows = s.execute(
            select(Estimate.job_id, Estimate.made_at, Estimate.estimated_start_at, Job.first_started_at,
                   Job.submitted_at)
            .join(Job, Job.id == Estimate.job_id)
            .where(Job.first_started_at.is_not(None), Estimate.estimated_start_at.is_not(None),
                   Estimate.made_at <= Job.first_started_at)
            .order_by(Estimate.job_id, Estimate.made_at, Estimate.id)).all()
    chosen: dict[str, tuple[float, float, float, float]] = {}
    for job_id, made, estimated, actual, submitted in rows:
        if estimated is not None and actual is not None and (which == "last" or job_id not in chosen):
            chosen[job_id] = (made, estimated, actual, submitted)
    samples = [(j, made, est, act) for j, (made, est, act, _) in chosen.items()]
    errors = [act - est for _, _, est, act in samples]
    absolute = sorted(abs(e) for e in errors)
    waits = [act - sub for (_, _, act, sub) in chosen.values()]
    if not errors:
        return EstimateAccuracy(which, 0, None, None, None, None, None, [])
    p90 = absolute[min(len(absolute) - 1, math.ceil(0.9 * len(absolute)) - 1)]
    return EstimateAccuracy(which, len(errors), statistics.fmean(absolute), statistics.median(absolute), p90,
                            statistics.fmean(errors), statistics.fmean(waits), samples)
