"""Themis: finish-time fairness with leases (Mahajan et al., "Themis: Fair and Efficient GPU Cluster
Scheduling", NSDI'20).

Finish-time fairness of a job is rho = T_shared / T_ideal: its finish time in the shared cluster over its
finish time on a private 1/N share of the cluster (N contending jobs). rho <= 1 means the job does at least
as well as on its own slice. Themis' arbiter periodically offers the GPUs that are free or whose lease has
expired to the 1 - f fraction of jobs with the worst rho (f, the fairness knob, in [0, 1)); those jobs bid
their placement-aware valuation of each allocation, the winners get the GPUs for one lease, and what the
offered jobs cannot use goes to the others for efficiency.

Mapped onto the Policy interface (decide() does the placing and preempting):
- rho is estimated at snap.clock for every queued job, once per snapshot:
  T_shared_est = (clock - submit) + remaining work / expected speed (the job's best effective speed on a
  GPU type it bids for that could take its gang now; the best type's if none can),
  T_ideal = duration_s x max(1, gpus / (cluster_gpus / N)), N = queued + running jobs. The same definition
  as the rho in summary.json (docs/performance-model.md), with the instantaneous N instead of its average
  over the job's life.
- The offered set is the ceil((1 - f) x Q) queued jobs with the worst rho (Q queued jobs, at least one).
  The fraction is taken of the queued jobs because only they can bid: a running gang here is rigid and
  cannot use more GPUs, so a running job among "the worst 1 - f" would waste its offer.
- rank(): offered jobs first, worst rho first; then the rest by least remaining GPU-time (leftover GPUs go
  where they finish work soonest: efficiency).
- Leases: a job holds its GPUs for lease_s from its start. Only an offered job may preempt, and only a
  running job whose lease has expired and whose rho, counting what the preemption costs it (the work since
  its last checkpoint and a restart), stays below the offered job's rho: the swap then lowers the larger
  of the two rhos instead of trading places, and a fresh lease protects the winner from being displaced
  back at once. A job within its lease is never displaced. Victims: expired leases, lowest rho first.
- type_preference() is the job's bid: the GPU types it accepts, by the rho it would reach on each, i.e. by
  its effective speed (its own throughput on the type relative to its best, divided by its model family's
  cross-server slowdown when the gang cannot fit on one server of that type now). A slower type is bid
  for only once waiting has cost the job as much as the slowdown would (see _Round.bid). Where every type
  is worth the same to a job (one type; Philly's 12gb/24gb) there is no preference: the placer chooses.
- round_s = lease_s: the shell decides at least once a lease while jobs wait, so expired leases are
  re-offered even when no job arrives or ends.

Cost: everything derived from a snapshot is computed once per snapshot: rank() pays O(Q log Q) (nothing
with one job waiting, the common case on a big cluster); may_preempt() and victim_key() are dictionary
look-ups plus O(1) arithmetic; the victim list looks at each running job once per snapshot, and only when
an offered job does not fit, valuing only those a bound does not rule out (see _Round.victims).

Defaults and where they come from:
- fairness_knob f = 0.8 (offers go to the worst 20%): the value the Themis paper evaluates with, from our
  reading of it; the authors' own YARN integration (ThemisConfiguration, themis.fairness.knob = 0.2, the
  fraction offered) and their simulator (com.wisr.mlsched ThemisInterJobScheduler: jobs considered =
  max(1, floor(knob x jobs))) give the same 20%.
- lease_s = 600 (10 minutes): the paper's lease, from our reading; the authors' YARN integration defaults
  to 5 minutes (themis.lease.mins) and their simulator scripts sweep 5-80.
- checkpoint_interval_s = 900, restart_overhead_s = 30: the simulator's defaults (sim.simulator.SimConfig),
  repeated because scheduling may not import sim; they only shape the estimate of what a preemption costs.
See docs/policies.md (## themis) for measurements.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from operator import attrgetter, itemgetter
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import Allocation, JobSpec
from loadmaster.core.profiles import family_of, max_cpu_speed
from loadmaster.scheduling.policies.base import Gate, Policy
from loadmaster.scheduling.policies.themis_quiet import quiet_until
from loadmaster.scheduling.snapshot import JobView, Snapshot

DEFAULT_FAIRNESS_KNOB = 0.8
DEFAULT_LEASE_S = 600.0
DEFAULT_CHECKPOINT_INTERVAL_S = 900.0
DEFAULT_RESTART_OVERHEAD_S = 30.0

# Relative training throughput per GPU type, V100 = 1.0: the simulator's DEFAULT_TYPE_SPEED (sim/perf.py,
# medians over Gavel's models), repeated because scheduling may not import sim. Only used to value GPU
# types for jobs that carry no per-type speeds of their own; unknown types count as 1.0, as there.
DEFAULT_TYPE_SPEED: Mapping[str, float] = {"k80": 0.2, "p100": 0.76, "v100": 1.0}

_TINY = 1e-9

# A bid: GPU types in order of preference (None: any, the placer's choice) and the best effective speed.
_Bid = tuple[tuple[str, ...] | None, float]
_T = TypeVar("_T")


@dataclass(frozen=True)
class _ClusterFacts:
    """What Themis needs of a cluster, computed once per cluster (clusters are immutable)."""

    cluster: Cluster
    total_gpus: int
    uniform: bool  # every GPU type worth the same to a job without speeds of its own
    types: tuple[str, ...]
    order: npt.NDArray[np.intp]  # the GPU nodes grouped by type, in `types` order
    starts: npt.NDArray[np.intp]  # where each type's group begins in `order`
    largest: tuple[float, ...]  # the largest server of each type
    default_speed: Mapping[str, float]  # per type, for jobs without speeds of their own, best type = 1
    # _Round.type_speeds() by spec.type_speed: they depend on the cluster alone, so they outlive a snapshot.
    speeds: dict[tuple[tuple[str, float], ...] | None, dict[str, float]] = field(default_factory=dict,
                                                                                  compare=False)

    @classmethod
    def of(cls, cluster: Cluster, type_speed: Mapping[str, float]) -> _ClusterFacts:
        masks = cluster.type_masks
        groups = [np.flatnonzero(mask) for _, mask in masks]
        order = np.concatenate(groups) if groups else np.zeros(0, dtype=np.intp)
        starts = np.cumsum([0] + [len(g) for g in groups[:-1]]).astype(np.intp)
        caps = cluster.gpu_capacity
        types = tuple(t for t, _ in masks)
        raw = {t: type_speed.get(t, 1.0) for t in types}
        best = max(raw.values(), default=1.0)
        return cls(cluster, cluster.total_gpus, len(set(raw.values())) <= 1, types, order, starts,
                   tuple(float(caps[g].max()) for g in groups),
                   {t: s / best if best > 0 else 1.0 for t, s in raw.items()})


_VICTIM_ORDER = itemgetter(0, 1, 2)  # rho if preempted, then the latest started, then the id
_ANY_TYPE: _Bid = (None, 1.0)  # the bid of a job to which every GPU type is worth the same
# decision_class() of a job whose bid is _ANY_TYPE, with and without the offer.
_OFFERED_ANY_TYPE = (True, None)
_LEFT_OUT_ANY_TYPE = (False, None)
# _Round._rank_short's entries: worst rho first (their own order); least remaining GPU-time first (each then
# submit time, id); the id.
_THIRD = itemgetter(2)
_EFFICIENCY_ORDER = itemgetter(3, 1, 2)
# From this many queued jobs on, rho is computed for all of them at once with numpy (fewer, and numpy's
# fixed cost per call is more than the Python loop's).
_VECTOR_MIN = 64
_SPEC = attrgetter("spec")
_JOB_ID = attrgetter("job_id")
_SUBMIT = attrgetter("submit_time_s")
_DURATION = attrgetter("duration_s")
_GPUS = attrgetter("gpus")
_WORK_DONE = attrgetter("work_done_s")
_RATE = attrgetter("rate")
_AS_OF = attrgetter("as_of")
_TYPE_SPEED = attrgetter("type_speed")


def _lexsort_by_id(ids: Sequence[str], second: npt.NDArray[np.float64], first: npt.NDArray[np.float64],
                   among: list[int] | None = None) -> npt.NDArray[np.intp]:
    """Positions sorted by (first, second, id), as sorted() orders such tuples (`among`: the positions in
    `ids` of the entries of `first` and `second`; all by default). The ids, slow to compare as numpy
    strings, are only looked up and sorted on when two jobs tie on both numbers."""
    order = np.lexsort((second, first))
    a, b = first[order], second[order]
    if not ((a[1:] == a[:-1]) & (b[1:] == b[:-1])).any():
        return order
    return np.lexsort((np.array(ids if among is None else _pick(ids, among)), second, first))


def _pick(items: Sequence[_T], positions: list[int]) -> list[_T]:
    """[items[i] for i in positions], gathered by itemgetter (the queue's long lists at every decision)."""
    if len(positions) > 1:
        return list(itemgetter(*positions)(items))
    return [items[i] for i in positions]


def _any_type(spec: JobSpec, facts: _ClusterFacts) -> bool:
    """Whether every GPU type is worth the same to the job whatever the free room (_Round.valuation() is None,
    its bid _ANY_TYPE): it needs no GPU, or it has no speeds of its own on a cluster whose types are all worth
    the same to such a job."""
    return spec.gpus_per_learner == 0 or (facts.uniform and spec.type_speed is None)


def _ideal_s(spec: JobSpec, share: float) -> float:
    """Finish time on a private 1/N share: a gang wider than the share runs proportionally slower."""
    gpus = spec.learners * spec.gpus_per_learner
    slower = gpus / share if 0 < share < gpus else 1.0  # a GPU-less cluster: no share at all
    return max(spec.duration_s * slower, _TINY)


def _rho_if_preempted(victim: JobView, clock: float, share: float, ckpt: float, restart: float) -> float:
    """rho of a running job stopped at `clock` and restarted at once at its current rate: it redoes the
    work since its last checkpoint (all of it without checkpoints) and pays a restart."""
    # work_at() and _ideal_s() written out (the same operations): this runs for every running job a
    # displacement may take, at almost every decision. Each max(a, b) is written `b if a < b else a`, which
    # is what max() returns (the first argument unless the second is larger), without a call.
    spec = victim.spec
    rate = victim.rate
    elapsed = clock - victim.as_of
    work = victim.work_done_s + rate * (elapsed if elapsed > 0.0 else 0.0)
    lost = work % ckpt if ckpt > 0 else work
    remaining = spec.duration_s - work
    if not remaining > 0.0:
        remaining = 0.0
    shared = (clock - spec.submit_time_s) + restart + (remaining + lost) / (_TINY if rate < _TINY else rate)
    gpus = spec.learners * spec.gpus_per_learner
    slower = gpus / share if 0 < share < gpus else 1.0
    ideal = spec.duration_s * slower
    return shared / (_TINY if ideal < _TINY else ideal)


class _Round:
    """What one snapshot tells Themis: rho of every queued job, the offered set, bids, victims' rho."""

    __slots__ = ("_by_server", "_held", "_share", "_types", "_victim_rho", "_victims", "_victims_min_gpus",
                 "_victims_top", "again", "bids", "classes", "clock", "facts", "moved", "offered", "policy", "quiet",
                 "ranked", "rho", "snap", "uniform_bids", "valued", "walked")

    def __init__(self, policy: ThemisPolicy, snap: Snapshot) -> None:
        self.policy = policy
        self.snap = snap
        self.clock = snap.clock
        queued = snap.queued
        self.facts = policy.cluster_facts(snap.cluster)
        # A private 1/N slice, N = queued + running jobs: worked out on first use (the `share` property), since
        # counting the running jobs makes the shell list them, and a lone arrival that starts on free GPUs
        # (most decisions on a cluster that is not overloaded) never needs a rho.
        self._share: float | None = None
        self.valued: dict[tuple[object, ...], list[tuple[float, bool, str]] | None] = {}
        self.bids: dict[str, _Bid] = {}
        self._types: dict[str, tuple[float, float, float]] | None = None
        self.rho: dict[str, float] = {}
        self.classes: dict[str, tuple[bool, tuple[str, ...] | None]] = {}  # decision classes known already
        self._victims: list[tuple[float, float, str, JobView]] | None = None
        self._victims_min_gpus = math.inf
        self._victims_top = -math.inf  # the highest rho the list serves (victims())
        # For the victim list last built: each entry's rho if preempted, and the GPUs its prefixes hold.
        self._held: tuple[list[float], list[int]] | None = None
        self._by_server: dict[int, npt.NDArray[np.float64]] = {}  # the same prefixes' GPUs per server
        self._victim_rho: dict[str, float] = {}
        self.uniform_bids = False  # every queued job's bid is _ANY_TYPE (known without a look at each)
        # For next_change_s: the offered jobs whose victims decide() walked (victim_candidates), and whether
        # it asked about moving a running job (migration on), whose answers next_change_s does not follow.
        self.walked: set[str] = set()
        self.moved = False
        self.quiet: float | None = None  # next_change_s's answer, once asked
        # The last snapshot whose decision repeats this one's (unchanged_by_time()).
        self.again: Snapshot | None = None
        if len(queued) <= 1:
            # Most decisions on a large cluster see one waiting job: it gets the offer whatever its rho,
            # which is then only computed if it has to displace someone.
            self.ranked: list[JobView] = list(queued)
            # From the list just made: no second pass over a shell's lazy queue, no generator.
            self.offered = frozenset([self.ranked[0].spec.job_id] if self.ranked else ())
            return
        if len(queued) >= _VECTOR_MIN:
            self._rank_vectorized(queued)
            return
        self._rank_short(queued)

    def _rank_short(self, queued: Sequence[JobView]) -> None:
        """The ranking for a short queue, where it runs at almost every event: one pass computes each job's
        rho and both sort keys (as queued_rho, remaining_at and _ideal_s do, with the same float operations
        in the same order), then plain tuples are sorted (job ids are unique: views are never compared)."""
        clock, share = self.clock, self.share
        uniform = self.facts.uniform
        rho_of = self.rho
        bids = self.bids
        by_rho: list[tuple[float, float, str, float, JobView]] = []
        mixed = False  # some job's bid is not _ANY_TYPE
        for j in queued:
            spec = j.spec
            job_id = spec.job_id
            # max(a, b) written out as in _rho_if_preempted: the same value, without two calls per job.
            elapsed = clock - j.as_of
            remaining = spec.duration_s - (j.work_done_s + j.rate * (elapsed if elapsed > 0.0 else 0.0))
            if not remaining > 0.0:
                remaining = 0.0
            gpus = spec.learners * spec.gpus_per_learner
            if spec.gpus_per_learner == 0 or (uniform and spec.type_speed is None):
                speed = 1.0  # every type is worth the same to this job: bid() would say so
                bids[job_id] = _ANY_TYPE
            else:
                speed = max(self.bid(j)[1], _TINY)
                mixed = True
            slower = gpus / share if 0 < share < gpus else 1.0
            ideal = spec.duration_s * slower
            rho = ((clock - spec.submit_time_s) + remaining / speed) / (_TINY if ideal < _TINY else ideal)
            rho_of[job_id] = rho
            by_rho.append((-rho, spec.submit_time_s, job_id, remaining * gpus, j))
        self.uniform_bids = not mixed
        # Ids are unique: plain tuple order is (-rho, submit, id)'s, without a key tuple per job (views are
        # never compared).
        by_rho.sort()
        k = self.policy.offer_count(len(by_rho))
        self.offered = frozenset(map(_THIRD, by_rho[:k]))
        rest = sorted(by_rho[k:], key=_EFFICIENCY_ORDER)
        self.ranked = [e[4] for e in by_rho[:k]] + [e[4] for e in rest]
        if not self.uniform_bids:
            self._know_classes([e[2] for e in by_rho[:k]], [e[2] for e in rest])

    def _know_classes(self, offered: Iterable[str], rest: Iterable[str]) -> None:
        """Every ranked job's decision class, which decide() asks next (every job has its bid by now). Not
        needed where every bid is any type's (uniform_bids): decision_class() then tells the two classes
        apart by the offer alone."""
        bids = self.bids
        classes = self.classes
        for was_offered, ids in ((True, offered), (False, rest)):
            any_type = (was_offered, None)  # the common class: one tuple for all its jobs
            for job_id in ids:
                types = bids[job_id][0]
                classes[job_id] = any_type if types is None else (was_offered, types)

    def _rank_vectorized(self, queued: Sequence[JobView]) -> None:
        """The order above, for a long queue: every rho at once with the same float operations in the
        same order (queued_rho, remaining_at, _ideal_s), and the same sort keys (numpy's lexsort is stable
        and compares strings by code point, as Python does). Bit for bit the same ranking, offer and rho."""
        n = len(queued)
        clock, share = self.clock, self.share
        specs = list(map(_SPEC, queued))
        ids = list(map(_JOB_ID, specs))
        submit = np.fromiter(map(_SUBMIT, specs), np.float64, n)
        duration = np.fromiter(map(_DURATION, specs), np.float64, n)
        gpus = np.fromiter(map(_GPUS, specs), np.float64, n)
        done = np.fromiter(map(_WORK_DONE, queued), np.float64, n)
        rate = np.fromiter(map(_RATE, queued), np.float64, n)
        as_of = np.fromiter(map(_AS_OF, queued), np.float64, n)
        remaining = np.maximum(0.0, duration - (done + rate * np.maximum(0.0, clock - as_of)))
        # The bid's speed: 1 where every type is worth the same to the job (valuation() says None), which
        # on a uniform cluster is every job without speeds of its own: then no job needs a look of its own.
        speed = np.ones(n)
        if self.facts.uniform and list(map(_TYPE_SPEED, specs)).count(None) == n:
            self.bids = dict.fromkeys(ids, _ANY_TYPE)
            self.uniform_bids = True
        else:
            uniform = self.facts.uniform
            for i, spec in enumerate(specs):
                if spec.gpus_per_learner != 0 and not (uniform and spec.type_speed is None):
                    speed[i] = self.bid(queued[i])[1]
                else:
                    self.bids[ids[i]] = (None, 1.0)
        shared = (clock - submit) + remaining / np.maximum(speed, _TINY)
        slower = np.ones(n)
        if share > 0:
            wide = share < gpus
            slower[wide] = gpus[wide] / share
        rho = shared / np.maximum(duration * slower, _TINY)
        self.rho = dict(zip(ids, rho.tolist(), strict=True))
        order = _lexsort_by_id(ids, submit, -rho)
        k = self.policy.offer_count(n)
        top, rest = order[:k].tolist(), order[k:]
        rest_list = rest.tolist()
        rest_list = rest[_lexsort_by_id(ids, submit[rest], (remaining * gpus)[rest], rest_list)].tolist()
        top_ids = _pick(ids, top)
        self.offered = frozenset(top_ids)
        self.ranked = _pick(queued, top) + _pick(queued, rest_list)
        if not self.uniform_bids:
            self._know_classes(top_ids, _pick(ids, rest_list))

    # -- rho ------------------------------------------------------------------------------------------
    @property
    def share(self) -> float:
        """GPUs per contending job: the cluster's GPUs over the queued and running jobs (at least one)."""
        share = self._share
        if share is None:
            snap = self.snap
            share = self._share = self.facts.total_gpus / max(len(snap.queued) + len(snap.running), 1)
        return share

    def ideal_s(self, spec: JobSpec) -> float:
        return _ideal_s(spec, self.share)

    def queued_rho(self, job: JobView) -> float:
        """rho if the job started now on the best GPU type that could take it."""
        speed = self.bid(job)[1]
        shared = (self.clock - job.spec.submit_time_s) + job.remaining_at(self.clock) / max(speed, _TINY)
        rho = shared / self.ideal_s(job.spec)
        self.rho[job.job_id] = rho
        return rho

    def rho_of(self, job: JobView) -> float:
        rho = self.rho.get(job.job_id)
        return self.queued_rho(job) if rho is None else rho

    def rho_if_preempted(self, victim: JobView) -> float:
        """A running job's rho if it were stopped now and restarted at once at its current speed: it redoes
        the work since its last checkpoint and pays a restart."""
        rho = self._victim_rho.get(victim.job_id)
        if rho is None:
            p = self.policy
            rho = _rho_if_preempted(victim, self.clock, self.share, p.checkpoint_interval_s, p.restart_overhead_s)
            self._victim_rho[victim.job_id] = rho
        return rho

    def lease_expired(self, victim: JobView) -> bool:
        # A running job without a recorded start holds no lease the policy knows of.
        started = victim.started_at
        return started is None or self.clock >= started + self.policy.lease_s

    def victims(self, rho: float) -> list[tuple[float, float, str, JobView]]:
        """Running jobs whose lease has expired and that a job of this `rho` might displace, by rising
        rho-if-preempted (then the latest started). Protected jobs are never valued.

        This is the policy's hot spot on a large cluster (it looks at every running job), so it skips
        those that provably stay at or above `rho`. A job that can never run faster than its nominal gang
        at its request on its best placement (rate <= 1: it cannot grow, and no CPU-aware placer can give it
        CPUs that speed it up, core.profiles.max_cpu_speed) has done no more work than the time since it was
        submitted, so if preempted, T_shared >= duration + restart and rho_if_preempted > min(1, share /
        gpus). With rho <= 1
        (typically a wide job waiting for room) only gangs wider than share / rho can qualify, usually none
        or a few. Built once per snapshot for the lowest such width asked for (the worst-rho job asks
        first); a list built for a lower width serves every later ask, since the caller stops at the first
        victim whose rho is not below its own. For the same reason the list holds only the victims below the
        worst offered rho (no offered job asks above it): under overload about a third of those valued."""
        min_gpus = -1.0 if rho > 1.0 else (self.share / rho if rho > 0 else math.inf)
        if self._victims is None or min_gpus < self._victims_min_gpus or rho > self._victims_top:
            p = self.policy
            clock, share = self.clock, self.share
            cutoff = clock - p.lease_s
            ckpt, restart = p.checkpoint_interval_s, p.restart_overhead_s
            # Only offered jobs ask, so no ask of this snapshot exceeds the worst rho (ranked first): a victim
            # at or above it is never taken, counted or walked, and is left out of the list, its prefix sums
            # and its sort.
            top = self.rho_of(self.ranked[0]) if self.ranked else rho
            if top < rho:
                top = rho
            known = self._victim_rho
            # Valued before in this snapshot (an earlier, narrower list; rho_if_preempted()): else no look-up.
            get = known.get if known else None
            narrow = min_gpus >= 0  # else no gang is narrow enough to skip
            entries = []
            for v in self.snap.running:
                started = v.started_at
                if started is not None and started > cutoff:
                    continue
                spec = v.spec
                gpus = spec.learners * spec.gpus_per_learner
                # A job that asked for no CPUs gets no speed-up from them (max_cpu_speed() is 1.0 then): no call
                # for it (on Philly-like traces, every running job at almost every decision).
                if (narrow and gpus <= min_gpus
                        and (spec.max_learners or 0) <= spec.learners  # may not grow
                        and (spec.cpus_per_learner <= 0
                             or max_cpu_speed(spec.model, spec.gpus_per_learner, spec.cpus_per_learner) <= 1.0)):
                    continue
                job_id = spec.job_id
                victim_rho = None if get is None else get(job_id)
                if victim_rho is None:
                    # _rho_if_preempted() written out (the same operations in the same order): a call per
                    # running job at almost every decision was a tenth of this loop.
                    rate = v.rate
                    elapsed = clock - v.as_of
                    work = v.work_done_s + rate * (elapsed if elapsed > 0.0 else 0.0)
                    lost = work % ckpt if ckpt > 0 else work
                    remaining = spec.duration_s - work
                    if not remaining > 0.0:
                        remaining = 0.0
                    shared = ((clock - spec.submit_time_s) + restart
                              + (remaining + lost) / (_TINY if rate < _TINY else rate))
                    ideal = spec.duration_s * (gpus / share if 0 < share < gpus else 1.0)
                    victim_rho = known[job_id] = shared / (_TINY if ideal < _TINY else ideal)
                if victim_rho >= top:
                    continue  # the list ends before it for every ask (a third of the list, or less, is below)
                entries.append((victim_rho, -(started or 0.0), job_id, v))
            # Ids are unique: plain tuple order is _VICTIM_ORDER's, and the views are never compared.
            entries.sort()
            self._victims = entries
            self._victims_min_gpus = min_gpus
            self._victims_top = top
            self._held = None
            self._by_server = {}
        return self._victims

    def releasable(self, rho: float) -> int:
        """The GPUs held by every job a job of this `rho` may displace (victim_candidates' takewhile), from
        prefix sums kept with the victim list: a displacement that cannot free enough skips the walk."""
        entries = self.victims(rho)
        held = self._held
        if held is None:
            keys = [e[0] for e in entries]
            sums = [0]
            total = 0
            for e in entries:
                alloc = e[3].allocation
                assert alloc is not None
                total += len(alloc.learner_nodes) * alloc.gpus_per_learner
                sums.append(total)
            held = self._held = (keys, sums)
        return held[1][bisect_left(held[0], rho)]

    def releasable_by_server(self, rho: float) -> npt.NDArray[np.float64]:
        """releasable()'s GPUs per server: where a gang could find room once those jobs are displaced."""
        self.releasable(rho)  # the victim list for this rho, and its keys
        assert self._held is not None and self._victims is not None
        k = bisect_left(self._held[0], rho)
        found = self._by_server.get(k)
        if found is None:
            nodes: list[int] = []
            gpus: list[float] = []
            for e in self._victims[:k]:
                alloc = e[3].allocation
                assert alloc is not None
                nodes += alloc.learner_nodes
                gpus += [alloc.gpus_per_learner] * len(alloc.learner_nodes)
            found = self._by_server[k] = np.bincount(nodes, gpus, minlength=len(self.snap.free_gpus)).astype(
                np.float64, copy=False)  # float64 already with weights: no copy
        return found

    # -- bids ------------------------------------------------------------------------------------------
    def type_room(self) -> dict[str, tuple[float, float, float]]:
        """Per GPU type: free GPUs, the most free on one server, the largest server (computed on first use)."""
        if self._types is None:
            facts = self.facts
            free = self.snap.free_gpus[facts.order]
            totals = np.add.reduceat(free, facts.starts).tolist() if free.size else []
            most = np.maximum.reduceat(free, facts.starts).tolist() if free.size else []
            self._types = {t: (totals[i], most[i], facts.largest[i]) for i, t in enumerate(facts.types)}
        return self._types

    def bid(self, job: JobView) -> _Bid:
        """The job's bid: the GPU types it accepts now, best first, and the speed it expects to start at.

        Types are valued by the job's effective speed there (see valuation()); the rho it would reach on a
        type falls as the speed rises, so this is the order of its valuations. A slower type is accepted
        only once waiting has cost the job as much as running there would (ski rental: wait for the better
        type while the wait is cheaper than the slowdown, at least one lease, since the arbiter re-offers
        GPUs every lease), so a job never settles for a 5x slower GPU that a short wait would have spared
        it, and never waits more than about twice the better of the two choices.
        """
        found = self.bids.get(job.job_id)
        if found is not None:
            return found
        valued = self.valuation(job.spec)
        if valued is None:
            found = (None, 1.0)
        else:
            best = valued[0][0]
            remaining = job.remaining_at(self.clock)
            patience = max(self.policy.lease_s, self.clock - job.queued_since)
            accepted = [(e, ok, t) for e, ok, t in valued if remaining * (1.0 / e - 1.0 / best) <= patience]
            # The best accepted type that could take the gang now sets the expected speed; if none can, the
            # best type will, once GPUs free up there.
            speed = next((e for e, ok, _ in accepted if ok), best)
            found = (tuple(t for _, _, t in accepted), speed)
        self.bids[job.job_id] = found
        return found

    def valuation(self, spec: JobSpec) -> list[tuple[float, bool, str]] | None:
        """(effective speed, could take the gang now, type) for each type the job runs on, fastest first;
        None when every type is worth the same to it (or it needs no GPU): then the placer chooses."""
        if _any_type(spec, self.facts):
            return None
        family = family_of(spec.model) if spec.learners > 1 else None
        key = (spec.learners, spec.gpus_per_learner, spec.type_speed, family)
        if key not in self.valued:
            self.valued[key] = self._value_types(spec, family.cross_node_slowdown if family else 0.0)
        return self.valued[key]

    def _value_types(self, spec: JobSpec, cross_node_slowdown: float) -> list[tuple[float, bool, str]] | None:
        gpus = spec.learners * spec.gpus_per_learner
        per = spec.gpus_per_learner
        room = self.type_room()
        speeds = self.type_speeds(spec)
        valued: list[tuple[float, bool, str]] = []
        for t, (free_total, free_node, node_cap) in room.items():
            speed = speeds[t]
            if speed <= 0:
                continue  # the job does not run there at all
            available = free_total >= gpus and free_node >= per
            # One server keeps the gang's all-reduce local; spanning servers costs its family's slowdown.
            one_server = (free_node if available else node_cap) >= gpus
            effective = speed if one_server else speed / (1.0 + cross_node_slowdown)
            valued.append((effective, available, t))
        if not valued or max(v[0] for v in valued) - min(v[0] for v in valued) < 1e-12:
            return None
        valued.sort(key=lambda v: -v[0])
        return valued

    def type_speeds(self, spec: JobSpec) -> dict[str, float]:
        """The job's speed on each GPU type of the cluster relative to its best type here, as the simulator's
        performance model counts them (the cluster's defaults for a job without speeds of its own)."""
        known = self.facts.speeds.get(spec.type_speed)
        if known is not None:
            return known
        listed = dict(spec.type_speed or ())
        types = self.facts.types
        best_listed = max((s for t, s in listed.items() if t in types), default=1.0)
        defaults = self.facts.default_speed
        out = {}
        for t in types:
            raw = listed.get(t)
            out[t] = defaults[t] if raw is None else raw / best_listed if best_listed > 0 else 1.0
        self.facts.speeds[spec.type_speed] = out
        return out

    # -- the re-auction (migration on) -------------------------------------------------------------------
    def speed_at(self, spec: JobSpec, alloc: Allocation) -> float:
        """The job's effective speed on `alloc` relative to its best (type speed, and its family's
        cross-server slowdown for a gang that spans servers): the bids' valuation of a placement."""
        nodes = self.snap.cluster.nodes
        speed = self.type_speeds(spec)[nodes[alloc.learner_nodes[0]].gpu_type]
        if spec.learners > 1 and len(set(alloc.learner_nodes)) > 1:
            speed /= 1.0 + family_of(spec.model).cross_node_slowdown
        return speed

    def rho_staying(self, job: JobView) -> float:
        """A running job's rho if it keeps running where it is, at its current rate."""
        shared = (self.clock - job.spec.submit_time_s) + job.remaining_at(self.clock) / max(job.rate, _TINY)
        return shared / self.ideal_s(job.spec)

    def moves_wanted(self) -> list[tuple[JobView, tuple[str, ...]]]:
        """Running jobs whose lease has expired re-enter the auction: the worst 1 - f of them by rho (as the
        queued offer), each with the GPU types it would run faster on than where it is, fastest first (every
        type for a gang spread over servers, where the placer may find it one). Only gangs that cannot be
        resized; jobs that run nowhere faster are left out."""
        entries = []
        for v in self.snap.running:
            spec = v.spec
            if v.allocation is None or spec.elastic or spec.gpus_per_learner == 0 or v.rate <= _TINY:
                continue
            if self.lease_expired(v):
                entries.append((-self.rho_staying(v), -(v.started_at or 0.0), v.job_id, v))
        entries.sort(key=_VICTIM_ORDER)
        wanted = []
        for _, _, _, v in entries[:self.policy.offer_count(len(entries))]:
            assert v.allocation is not None
            now = self.speed_at(v.spec, v.allocation)
            speeds = self.type_speeds(v.spec)
            spread = v.spec.learners > 1 and len(set(v.allocation.learner_nodes)) > 1
            faster = sorted((t for t, x in speeds.items() if x > now + 1e-12 or (spread and x >= now - 1e-12)),
                            key=lambda t: -speeds[t])
            if faster:
                wanted.append((v, tuple(faster)))
        return wanted

    def worth_moving(self, job: JobView, to: Allocation) -> bool:
        """Moving pays when the job, restarted at once on `to` (its restart and the work since its last
        checkpoint redone, at its current rate scaled by the placements' valuations), finishes sooner than
        if it stays: its rho then falls."""
        assert job.allocation is not None
        now, then = self.speed_at(job.spec, job.allocation), self.speed_at(job.spec, to)
        if then <= now + 1e-12:
            return False
        p = self.policy
        work = job.work_at(self.clock)
        lost = work % p.checkpoint_interval_s if p.checkpoint_interval_s > 0 else work
        remaining = max(0.0, job.spec.duration_s - work)
        rate = max(job.rate, _TINY)
        return p.restart_overhead_s + (remaining + lost) / (rate * then / now) < remaining / rate


class ThemisPolicy(Policy):
    name = "themis"
    preemptive = True

    def __init__(self, fairness_knob: float = DEFAULT_FAIRNESS_KNOB, lease_s: float = DEFAULT_LEASE_S,
                 checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
                 restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S,
                 type_speed: Mapping[str, float] | None = None) -> None:
        if not 0.0 <= fairness_knob < 1.0:
            raise ValueError(f"fairness_knob must be in [0, 1), got {fairness_knob}")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.fairness_knob = fairness_knob
        self.lease_s = float(lease_s)
        self.round_s = self.lease_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        self.type_speed: Mapping[str, float] = dict(DEFAULT_TYPE_SPEED if type_speed is None else type_speed)
        self._last: _Round | None = None
        self._facts: _ClusterFacts | None = None

    def offer_count(self, queued: int) -> int:
        """How many of `queued` waiting jobs get the offer: the worst 1 - f fraction, at least one."""
        if queued == 0:
            return 0
        return min(queued, max(1, math.ceil((1.0 - self.fairness_knob) * queued - 1e-9)))

    def cluster_facts(self, cluster: Cluster) -> _ClusterFacts:
        """The cluster's GPUs and types, kept for the last cluster seen. `uniform` marks clusters whose GPU
        types are all worth the same to a job without speeds of its own (one type, or types the speed
        table does not tell apart, like Philly's 12gb/24gb): type preferences then say nothing."""
        facts = self._facts
        if facts is None or facts.cluster is not cluster:
            facts = _ClusterFacts.of(cluster, self.type_speed)
            self._facts = facts
        return facts

    def _round(self, snap: Snapshot) -> _Round:
        # One _Round per snapshot: decide() calls rank() once, then may_preempt()/victim_key() many times.
        last = self._last
        if last is None or last.snap is not snap:
            last = _Round(self, snap)
            self._last = last
        return last

    # -- the Policy interface ----------------------------------------------------------------------------
    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        return self._round(snap).ranked

    def rho(self, snap: Snapshot, job: JobView) -> float:
        """The estimated rho of a queued job at snap.clock (what the ranking uses)."""
        return self._round(snap).rho_of(job)

    def offered(self, snap: Snapshot) -> frozenset[str]:
        """Ids of the queued jobs that get this round's offer."""
        return self._round(snap).offered

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        # Asked of every queued job too wide for the free GPUs at every decision: _round() inlined.
        last = self._last
        if last is None or last.snap is not snap:
            last = self._round(snap)
        return job.spec.job_id in last.offered

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        rnd = self._round(snap)
        return (job.job_id in rnd.offered and rnd.lease_expired(victim)
                and rnd.rho_if_preempted(victim) < rnd.rho_of(job))

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        # Expired leases first, the job that stays best off after preemption first among them.
        rnd = self._round(snap)
        if not rnd.lease_expired(victim):
            return (1.0, 0.0, 0.0)
        return (0.0, rnd.rho_if_preempted(victim), -(victim.started_at or 0.0))

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        # Our own list, not decide's victims(): that one values every running job, this one only those
        # whose lease has expired. It is sorted by rising rho-if-preempted, so once one may not be
        # displaced, none after it may.
        rnd = self._round(snap)
        if job.job_id not in rnd.offered:
            return ()
        rnd.walked.add(job.job_id)
        rho = rnd.rho_of(job)
        return (e[3] for e in takewhile(lambda e: e[0] < rho, rnd.victims(rho)))

    def releasable_gpus(self, snap: Snapshot, gate: Gate, job: JobView) -> float | None:
        # An upper bound: an elastic victim keeps its minimum, and decide() skips jobs acted on in the round.
        rnd = self._round(snap)
        if job.job_id not in rnd.offered:
            return 0.0
        return float(rnd.releasable(rnd.rho_of(job)))

    def releasable_by_server(self, snap: Snapshot, gate: Gate, job: JobView) -> npt.NDArray[np.float64] | None:
        rnd = self._round(snap)
        if job.job_id not in rnd.offered:
            return None  # releasable_gpus() said 0: never asked
        return rnd.releasable_by_server(rnd.rho_of(job))

    def type_preference(self, snap: Snapshot, job: JobView) -> Sequence[str] | None:
        if job.allocation is None and _any_type(job.spec, self.cluster_facts(snap.cluster)):
            # The bid says "any type" without a round: a lone arrival that starts on free GPUs
            # (decide.start_alone asks only this, most decisions at 117k) needs no round at all.
            return None
        rnd = self._round(snap)
        if job.allocation is not None:
            rnd.moved = True  # a running job's bid (migration: decide re-homes it), which changes with its work
        return rnd.bid(job)[0]

    # -- the re-auction: with migration on, decide() offers running jobs the GPUs left free (Reauctions) ---
    def moves_wanted(self, snap: Snapshot) -> Sequence[tuple[JobView, Sequence[str]]]:
        rnd = self._round(snap)
        rnd.moved = True
        return rnd.moves_wanted()

    def worth_moving(self, snap: Snapshot, job: JobView, to: Allocation) -> bool:
        rnd = self._round(snap)
        rnd.moved = True
        return rnd.worth_moving(job, to)

    def next_change_s(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        # See themis_quiet.quiet_until for what time alone changes in a decision and why each bound holds.
        rnd = self._last
        if rnd is None or (rnd.snap is not snap and rnd.again is not snap) or rnd.moved or not snap.queued:
            # Not the round decide() just made on `snap` (what it walked is unknown) or one a Session found to
            # repeat it (unchanged_by_time()), or it asked about migrating running jobs (their rho, bids and
            # checkpoints, which quiet_until does not follow).
            return snap.clock
        if rnd.quiet is None:
            rnd.quiet = quiet_until(rnd)  # kept for unchanged_by_time()
        return rnd.quiet

    def unchanged_by_time(self, snap: Snapshot, again: Snapshot) -> bool:
        # Only from an answer the shell asked for already: working one out costs about what a decision does,
        # and most decisions that repeat one come before the next round, where the shell does not ask.
        rnd = self._last
        if rnd is None or rnd.snap is not snap or rnd.quiet is None or not again.clock < rnd.quiet:
            return False
        rnd.again = again
        return True

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        # The bid, and whether the job got the offer (jobs left out of it displace nobody). An offered job's
        # rho bounds whom it may displace, but offered jobs are ranked by falling rho, so a later one of the
        # same shape may displace a subset of an earlier one's victims: if that one found no room, neither
        # does this one (decide's own memo of failed displacements relies on the same order).
        # Asked of every queued job the walk does not answer by its size alone: _round() inlined, as in preemptor().
        rnd = self._last
        if rnd is None or rnd.snap is not snap:
            rnd = self._round(snap)
        job_id = job.spec.job_id
        if rnd.uniform_bids:
            return _OFFERED_ANY_TYPE if job_id in rnd.offered else _LEFT_OUT_ANY_TYPE
        known = rnd.classes.get(job_id)
        return known if known is not None else (job.job_id in rnd.offered, rnd.bid(job)[0])

