"""decide(Snapshot) -> Plan: the one scheduling core, shared by the simulator and the control loop.

It walks the policy's ranking, asks the placer for a whole-gang allocation on the tentative free
capacity, and, for preemptive policies, releases the policy's victims until the gang fits; victims whose
servers the new gang does not use are kept running. Every job it does not start gets a Wait with a
reason. It reads nothing but the snapshot: no clock, database or process.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import Allocation
from loadmaster.scheduling.capacity import FreeCapacity, SavedCapacity
from loadmaster.scheduling.feasibility import never_fits
from loadmaster.scheduling.placement.base import Placer, failure_reason, type_groups
from loadmaster.scheduling.plan import (
    CPU_MEMORY,
    FRAGMENTATION,
    LOCALITY_WAIT,
    LOWER_PRIORITY,
    NO_CAPACITY,
    OVER_QUOTA,
    Migrate,
    Plan,
    Preempt,
    Reject,
    Resize,
    Start,
    Wait,
    WaitReason,
)
from loadmaster.scheduling.policies.base import DENIED, Gate, Policy
from loadmaster.scheduling.snapshot import JobView, Snapshot

Shape = tuple[object, ...]
_MEMO_LIMIT = 32
# Defragmentation moves at most this many running jobs for one waiting gang: each move costs its job a
# restart and the work since its last checkpoint, and a search over more would cost a round dearly.
MAX_MOVES = 8
# Why a gang that does not fit may fit after smaller jobs move: free GPUs of the wrong shape.
_DEFRAGMENTABLE = (FRAGMENTATION, LOCALITY_WAIT)


@runtime_checkable
class Reauctions(Protocol):
    """A policy whose running jobs may win a better placement when their lease ends (Themis' re-auction):
    with migration on, each round offers them the GPUs left free after the queue was answered."""

    def moves_wanted(self, snap: Snapshot) -> Iterable[tuple[JobView, Sequence[str]]]:
        """Running jobs that might gain from moving, most urgent first, each with the GPU types to try."""
        ...

    def worth_moving(self, snap: Snapshot, job: JobView, to: Allocation) -> bool:
        """Does moving `job` to `to` pay for its restart and the work since its last checkpoint?"""
        ...


def _dominates(big: Shape, small: Shape) -> bool:
    """True if `big` needs at least what `small` needs in every number, with at least its exclusions.

    Shapes are placer cache keys: numbers first, the excluded GPU types (a hashable) last.
    """
    if len(big) != len(small):
        return False
    for b, s in zip(big[:-1], small[:-1], strict=True):
        if not (isinstance(b, int | float) and isinstance(s, int | float) and b >= s):
            return False
    bx, sx = big[-1], small[-1]
    if bx == sx:
        return True
    return isinstance(bx, tuple) and isinstance(sx, tuple) and set(bx) >= set(sx)


class _NoFitMemo:
    """Shapes that did not fit since capacity last grew: an exact table plus the frontier of minimal
    shapes (any shape at least as large as one of them cannot fit either). The frontier stays small
    because a new minimal shape evicts the larger ones it covers."""

    __slots__ = ("exact", "frontier", "version")

    def __init__(self) -> None:
        self.exact: dict[Shape, WaitReason] = {}
        self.frontier: list[tuple[Shape, WaitReason]] = []
        self.version = 0

    def sync(self, version: int) -> None:
        if version != self.version:
            self.exact.clear()
            self.frontier.clear()
            self.version = version

    def lookup(self, key: Shape) -> tuple[WaitReason, bool] | None:
        """(reason, exact) for a shape known not to fit, else None."""
        hit = self.exact.get(key)
        if hit is not None:
            return hit, True
        for shape, reason in self.frontier:
            if _dominates(key, shape):
                return reason, False
        return None

    def add(self, key: Shape, reason: WaitReason) -> None:
        self.exact[key] = reason
        if any(_dominates(key, shape) for shape, _ in self.frontier):
            return
        self.frontier = [(s, r) for s, r in self.frontier if not _dominates(s, key)]
        if len(self.frontier) < _MEMO_LIMIT:
            self.frontier.append((key, reason))


def elastic_sizes(low: int, high: int) -> list[int]:
    """Sizes to try for an elastic gang, largest first: high, then halving, then low."""
    sizes = [high]
    n = high // 2
    while n > low:
        sizes.append(n)
        n //= 2
    if low < high:
        sizes.append(low)
    return sizes


def shrink_to_minimum(job: JobView) -> Allocation | None:
    """The allocation an elastic running job keeps when scaled down to its minimum (None: cannot shrink)."""
    alloc = job.allocation
    low = job.spec.min_learners
    if alloc is None or not job.spec.elastic or low is None or alloc.learners <= low:
        return None
    return Allocation(job.job_id, alloc.learner_nodes[:low], alloc.gpus_per_learner, alloc.cpus_per_learner,
                      alloc.mem_gb_per_learner)


def _learners_room(gpus: npt.NDArray[np.float64], per_learner: float) -> int:
    """How many learners of `per_learner` GPUs servers with these free GPUs could hold at most."""
    # np.add.reduce is what ndarray.sum() calls, without its Python wrapper (asked at most displacements).
    return int(np.add.reduce((gpus + 1e-9) // per_learner))


def _learners_room_for(gpus: npt.NDArray[np.float64], per_learner: float, snap: Snapshot, job: JobView,
                       prefer: Sequence[str] | None) -> int:
    """_learners_room(), on the servers of one preferred GPU type at a time (the most) when the policy prefers
    types: a placer then uses only those, one type per gang (Placer.place)."""
    if prefer is None:
        return _learners_room(gpus, per_learner)
    return max((_learners_room(gpus[mask], per_learner) for mask in type_groups(snap, job, prefer)), default=0)


@dataclass
class _Round:
    snap: Snapshot
    policy: Policy
    placer: Placer
    free: FreeCapacity
    gate: Gate
    migrate: bool = False  # defragment: move smaller running jobs so that a gang waiting on fragmentation fits

    def __post_init__(self) -> None:
        self.gate.watch(self.free)
        self.gated = type(self.gate) is not Gate
        # The base placer's cache key is the job's shape: no need to ask for it per job.
        self.cache_key = None if type(self.placer).cache_key is Placer.cache_key else self.placer.cache_key
        self.starts: list[Start] = []
        self.preempts: list[Preempt] = []
        self.preempted: set[str] = set()
        self.resizes: list[Resize] = []
        self.resized: set[str] = set()
        self.victims: list[JobView] | None = None
        self.migrations: list[Migrate] = []
        self.moved: set[str] = set()
        self.no_migrate: dict[Shape, int] = {}
        # Shapes that did not fit at a capacity version: capacity only shrinks until the version changes,
        # so they (and any shape at least as large) still do not fit. A long queue costs few placements.
        self.no_fit = _NoFitMemo()
        self.no_preempt: dict[Shape, int] = {}

    def place(self, job: JobView) -> Allocation | WaitReason:
        """The whole gang; an elastic job at the largest size in [min, max] that fits (tried by halving)."""
        spec = job.spec
        if not spec.elastic:
            return self.place_at(job, spec.learners)
        result: Allocation | WaitReason = OVER_QUOTA
        for n in elastic_sizes(spec.min_learners or spec.learners, spec.max_learners or spec.learners):
            if self.gate.admit(job, n * spec.gpus_per_learner) is DENIED:
                continue  # this size would take the tenant past its limit
            result = self.place_at(job, n)
            if isinstance(result, Allocation):
                return result
        return result

    def place_at(self, job: JobView, learners: int) -> Allocation | WaitReason:
        spec = job.spec
        bound = beyond_free(self.free, learners, spec.gpus_per_learner)
        if bound is not None:
            return bound
        prefer = self.policy.type_preference(self.snap, job)
        key = self.placer.cache_key(job, learners, self.snap)
        if key is not None and prefer is not None:
            key = (*key[:-1], (key[-1], tuple(prefer)))
        if key is not None:
            self.no_fit.sync(self.free.version)
            hit = self.no_fit.lookup(key)
            if hit is not None:
                reason, exact = hit
                if exact or reason not in (CPU_MEMORY, LOCALITY_WAIT):
                    return reason
                if reason is CPU_MEMORY:
                    # A larger shape may fail on GPUs rather than CPUs: classify it for itself.
                    return failure_reason(job, learners, self.free, self.snap)
                # A larger shape may fit nowhere at all (not just not locally): ask the placer.
        result = self.placer.place(job, learners, self.free, self.snap, prefer)
        if isinstance(result, WaitReason) and key is not None:
            self.no_fit.add(key, result)
        return result

    def _unrelease(self, victim: JobView, kept: Allocation | None) -> None:
        """Undo a tentative release: give the victim back all it held, or raise ValueError (and change
        nothing) if that no longer fits. The gate counts `kept` (or nothing) for it until then."""
        alloc = victim.allocation
        assert alloc is not None
        if kept is not None:
            self.free.give(kept, grow=False)
        try:
            self.free.take(alloc)
        except ValueError:
            if kept is not None:
                self.free.take(kept)
            raise
        self.gate.add(victim, alloc.learners - (kept.learners if kept is not None else 0))

    def _release(self, pending: list[JobView], shrunk: dict[str, Allocation]) -> None:
        """Give the pending victims' resources back to the free arrays (an elastic one keeps its minimum)."""
        for victim in pending:
            assert victim.allocation is not None
            self.free.give(victim.allocation, grow=False)
            kept = shrunk.get(victim.job_id)
            if kept is not None:
                self.free.take(kept)
        pending.clear()

    def grow_elastic(self) -> None:
        """Scale running elastic jobs up into GPUs nobody is waiting for (checkpoint/restart each)."""
        for job in self.snap.running_elastic:
            spec = job.spec
            alloc = job.allocation
            if (alloc is None or not spec.elastic or job.job_id in self.preempted or job.job_id in self.resized
                    or alloc.learners >= (spec.max_learners or spec.learners)):
                continue
            same_type = (self.snap.cluster.nodes[alloc.learner_nodes[0]].gpu_type,)
            for extra in elastic_sizes(1, (spec.max_learners or spec.learners) - alloc.learners):
                if self.gate.admit(job, extra * spec.gpus_per_learner) is DENIED:
                    continue  # growing would take the tenant past its limit
                more = self.placer.place(job, extra, self.free, self.snap, same_type if spec.gpus_per_learner
                                         else None)
                if isinstance(more, Allocation):
                    self.free.take(more)
                    self.gate.add(job, more.learners)
                    grown = Allocation(job.job_id, alloc.learner_nodes + more.learner_nodes, alloc.gpus_per_learner,
                                       alloc.cpus_per_learner, alloc.mem_gb_per_learner)
                    self.resizes.append(Resize(job.job_id, grown))
                    self.resized.add(job.job_id)
                    break

    def victim_list(self) -> list[JobView]:
        if self.victims is None:
            self.victims = sorted(self.snap.running, key=lambda v: self.policy.victim_key(self.snap, v))
        return self.victims

    def place_by_preempting(self, job: JobView, reason: WaitReason) -> Allocation | WaitReason:
        """Release victims until the gang fits. Placement is tried only once enough GPUs are free, then
        again each time the released set doubles, so a big cluster costs O(log victims) attempts."""
        # Asked first, before the memo's key is made: most jobs of a long queue may displace nobody (both
        # checks only ever return `reason`, and neither changes anything the other reads).
        if not self.policy.preemptor(self.snap, self.gate, job):
            return reason
        learners = job.spec.min_learners or job.spec.learners if job.spec.elastic else job.spec.learners
        shape = self.placer.cache_key(job, learners, self.snap)
        key = None if shape is None else (*shape, self.policy.preemption_scope(job))
        if key is not None and self.no_preempt.get(key) == self.free.version:
            return reason
        per_learner = job.spec.gpus_per_learner
        need = learners * per_learner
        prefer = self.policy.type_preference(self.snap, job)
        released: list[JobView] = []
        shrunk: dict[str, Allocation] = {}  # elastic victims cut to their minimum: job id -> what they keep
        # Released victims go back to the free arrays only when a placement is about to be tried: a search
        # that never frees enough GPUs touches no array, and one that fails restores the state saved
        # before the first of them instead of taking every victim back one by one.
        pending: list[JobView] = []
        freed = 0  # GPUs the pending victims free
        saved: SavedCapacity | None = None
        alloc: Allocation | WaitReason = reason
        tried_with = 0  # how many victims were released at the last placement attempt
        free = self.free
        if not self.gated:
            # Walking the victims of a search that cannot free enough GPUs changes nothing but this memo.
            bound = self.policy.releasable_gpus(self.snap, self.gate, job)
            if bound is not None and free.total_gpus + bound + 1e-9 < need:
                if key is not None:
                    self.no_preempt[key] = free.version
                return reason
            # Enough GPUs in all, but maybe not on servers with room for a learner: most searches that got
            # this far under overload released every victim and then found no server that could take one.
            by_server = self.policy.releasable_by_server(self.snap, self.gate, job) if per_learner > 0 else None
            if by_server is not None and _learners_room_for(free.gpus + by_server, per_learner, self.snap, job,
                                                            prefer) < learners:
                if key is not None:
                    self.no_preempt[key] = free.version
                return reason
        for victim in self.policy.victim_candidates(self.snap, self.gate, job, self.victim_list):
            if victim.job_id in self.preempted or victim.job_id in self.resized or victim.job_id in self.moved:
                continue  # a moved job no longer holds what its view says
            assert victim.allocation is not None
            kept = shrink_to_minimum(victim)
            self.gate.remove(victim)
            freed += victim.allocation.gpus
            if kept is not None:
                # An elastic victim scales down to its minimum instead of stopping (DLaaS's elasticity).
                self.gate.add(victim, kept.learners)
                shrunk[victim.job_id] = kept
                freed -= kept.gpus
            released.append(victim)
            pending.append(victim)
            if free.total_gpus + freed + 1e-9 < need or len(released) < 2 * tried_with:
                continue
            tried_with = len(released)
            if saved is None:
                saved = free.save()
            self._release(pending, shrunk)
            freed = 0
            if per_learner > free.max_node_gpus + 1e-9:
                continue  # no server has room for one learner yet: the placer would fail
            alloc = self.placer.place(job, learners, free, self.snap, prefer)
            if isinstance(alloc, Allocation):
                break
        if (not isinstance(alloc, Allocation) and tried_with < len(released)
                and free.total_gpus + freed + 1e-9 >= need):
            if saved is None:
                saved = free.save()
            self._release(pending, shrunk)
            if per_learner <= free.max_node_gpus + 1e-9:
                alloc = self.placer.place(job, learners, free, self.snap, prefer)
        if not isinstance(alloc, Allocation):
            if saved is not None:
                free.restore(saved)
            for victim in reversed(released):
                assert victim.allocation is not None
                kept = shrunk.get(victim.job_id)
                self.gate.add(victim, victim.allocation.learners - (kept.learners if kept is not None else 0))
            if key is not None:
                self.no_preempt[key] = free.version
            return reason
        assert saved is not None  # a placement was tried, so the releases were applied
        self._keep_victims(job, alloc, released, shrunk, saved)
        self.free.version += 1
        return alloc

    def _keep_victims(self, job: JobView, alloc: Allocation, released: list[JobView],
                      shrunk: dict[str, Allocation], saved: SavedCapacity) -> None:
        """Take the gang, then keep every released victim that still fits beside it (least valuable victims
        were released first, so the most valuable ones are tried first here); preempt (or scale down) the
        rest. Only victims on the gang's servers can fail to fit: elsewhere taking every victim back ends
        where the search began. So the state saved before the search is restored, only the gang's
        neighbours are released again and re-taken one by one, and the others just keep what they hold."""
        free = self.free
        free.restore(saved)
        gang_nodes = alloc.nodes
        on_gang = [victim.allocation is not None and not gang_nodes.isdisjoint(victim.allocation.learner_nodes)
                   for victim in released]  # whether each released victim shares a server with the gang
        self._release([victim for victim, near in zip(released, on_gang, strict=True) if near], shrunk)
        free.take(alloc)
        for victim, near in zip(reversed(released), reversed(on_gang), strict=True):
            assert victim.allocation is not None
            kept = shrunk.get(victim.job_id) if shrunk else None
            if not near:
                self.gate.add(victim, victim.allocation.learners - (kept.learners if kept is not None else 0))
                continue
            try:
                self._unrelease(victim, kept)
            except ValueError:
                why = f"{'scaled down' if kept else 'preempted'} by {self.policy.name} for {job.job_id}"
                if kept is not None:
                    self.resizes.append(Resize(victim.job_id, kept))
                    self.resized.add(victim.job_id)
                else:
                    self.preempted.add(victim.job_id)
                    self.preempts.append(Preempt(victim.job_id, why, for_job=job.job_id))
        free.give(alloc, grow=False)

    def _movers(self, job: JobView) -> list[JobView]:
        """Running jobs that may move to make room for `job`: smaller than it, not acted on in this round,
        on servers with free GPUs, those of the servers closest to empty first (emptying them is what a
        wide gang needs), the smallest job of a server first."""
        free = self.free.gpus
        need = job.spec.gpus
        acted = self.preempted | self.resized | self.moved
        by_node: dict[int, list[JobView]] = {}
        for view in self.snap.running:
            alloc = view.allocation
            if alloc is None or alloc.gpus >= need or view.job_id in acted or view.spec.elastic:
                continue
            for node in set(alloc.learner_nodes):
                if free[node] > 1e-9:
                    by_node.setdefault(node, []).append(view)
        out: list[JobView] = []
        seen: set[str] = set()
        for node in sorted(by_node, key=lambda n: (-free[n], n)):
            for view in sorted(by_node[node], key=lambda v: (v.spec.gpus, v.job_id)):
                if view.job_id not in seen:
                    seen.add(view.job_id)
                    out.append(view)
        return out

    def _rehome(self, released: list[JobView], job_id: str) -> list[Migrate] | None:
        """Put each released job back where it was if that is still free, else elsewhere (the placer's
        choice): on the GPU types its policy prefers for it, or its own type first and then any other; the
        moves, or None (capacity then holds some of them) if one fits nowhere."""
        moves: list[Migrate] = []
        types = self.snap.cluster.gpu_types
        for view in sorted(released, key=lambda v: -v.spec.gpus):
            alloc = view.allocation
            assert alloc is not None
            try:
                self.free.take(alloc)
                continue
            except ValueError:
                pass
            prefer = self.policy.type_preference(self.snap, view)
            if prefer is None:
                own = self.snap.cluster.nodes[alloc.learner_nodes[0]].gpu_type
                prefer = (own, *(t for t in types if t != own))
            moved = self.placer.place(view, alloc.learners, self.free, self.snap, prefer)
            if not isinstance(moved, Allocation):
                return None
            self.free.take(moved)
            moves.append(Migrate(view.job_id, moved, for_job=job_id))
        return moves

    def place_by_migrating(self, job: JobView, reason: WaitReason) -> Allocation | WaitReason:
        """Free a whole-gang placement for `job` by moving smaller running jobs elsewhere (checkpoint, stop,
        restart elsewhere): released one at a time from the servers closest to empty, until the gang fits
        and every released job fits again somewhere (where it was, if it still can). Nothing changes if
        that takes more than MAX_MOVES moves."""
        spec = job.spec
        free = self.free
        if reason not in _DEFRAGMENTABLE or spec.elastic or spec.gpus > free.total_gpus + 1e-9:
            return reason
        shape = self.placer.cache_key(job, spec.learners, self.snap)
        if shape is not None and self.no_migrate.get(shape) == free.version:
            return reason
        prefer = self.policy.type_preference(self.snap, job)
        saved = free.save()
        released: list[JobView] = []
        for view in self._movers(job):
            assert view.allocation is not None
            free.give(view.allocation, grow=False)
            released.append(view)
            alloc = self.placer.place(job, spec.learners, free, self.snap, prefer)
            if not isinstance(alloc, Allocation):
                if len(released) >= 2 * MAX_MOVES:
                    break  # released jobs often stay where they are: look a little past MAX_MOVES
                continue
            before = free.save()
            free.take(alloc)
            moves = self._rehome(released, job.job_id)
            if moves is not None and len(moves) <= MAX_MOVES:
                free.give(alloc, grow=False)  # attempt() takes it with the start
                self.migrations += moves
                self.moved.update(m.job_id for m in moves)
                free.version += 1
                return alloc
            free.restore(before)
            if moves is not None:
                break  # too many moves already: releasing more only adds to them
        free.restore(saved)
        if shape is not None:
            self.no_migrate[shape] = free.version
        return reason

    def reauction(self) -> None:
        """Move running jobs into free GPUs where their policy says the move pays (Reauctions); only GPUs
        nobody queued could take in this round are offered, and a move never displaces anyone."""
        policy = self.policy
        if self.free.total_gpus < 1 or not isinstance(policy, Reauctions):
            return  # under overload the queue has taken every GPU: nothing to offer
        acted = self.preempted | self.resized | self.moved
        for job, prefer in policy.moves_wanted(self.snap):
            alloc = job.allocation
            if alloc is None or job.job_id in acted:
                continue
            to = self.placer.place(job, alloc.learners, self.free, self.snap, prefer)
            if isinstance(to, Allocation) and policy.worth_moving(self.snap, job, to):
                self.free.take(to)  # its old GPUs free up once the move is carried out
                self.migrations.append(Migrate(job.job_id, to))
                self.moved.add(job.job_id)

    def attempt(self, job: JobView) -> tuple[Allocation | WaitReason, bool]:
        """Try to start `job` now: the quota gate, a whole-gang placement, then displacement for a preemptive
        policy. A start is booked in the round (capacity, gate, starts). Returns the allocation or why it
        waits, and whether a placement was tried (a gate refusal holds nobody else back)."""
        spec = job.spec
        gate = self.gate
        if self.gated:
            elastic = (spec.min_learners is not None or spec.max_learners is not None) and spec.elastic
            smallest = (spec.min_learners or spec.learners) * spec.gpus_per_learner if elastic else spec.gpus
            if gate.admit(job, smallest) is DENIED:
                return OVER_QUOTA, False
        return self.attempt_admitted(job), True

    def attempt_admitted(self, job: JobView) -> Allocation | WaitReason:
        """attempt() for a job the gate has just admitted (or whose gate admits all): the caller asked the gate
        itself, so it is not asked twice."""
        result = self.place(job)
        if self.migrate and type(result) is not Allocation:
            assert isinstance(result, WaitReason)
            result = self.place_by_migrating(job, result)
        if type(result) is not Allocation and self.policy.preemptive and result is not LOCALITY_WAIT:
            assert isinstance(result, WaitReason)
            result = self.place_by_preempting(job, result)
        if isinstance(result, Allocation):
            self.free.take(result)
            self.gate.add(job, result.learners)
            self.starts.append(Start(job.spec.job_id, result))
        return result

    def why_never(self, job: JobView) -> str | None:
        """Why `job` can never run here (it is rejected), or None."""
        return why_never(job, self.snap, self.gate if self.gated else None)

    def alike_key(self, job: JobView) -> object:
        """What decides this job's answer besides capacity (its shape, the placer's cache key and the policy's
        decision class): jobs of one key ranked one after another get the same answer until something
        starts. None: the job is answered on its own (elastic, or no promise from the policy or placer)."""
        spec = job.spec
        if (spec.min_learners is not None or spec.max_learners is not None) and spec.elastic:
            return None
        cls = self.policy.decision_class(self.snap, job)
        if cls is None:
            return None
        shape = (spec.learners, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner,
                 spec.excluded_types)
        if self.cache_key is None:
            return (shape, cls)
        placed_as = self.cache_key(job, spec.learners, self.snap)
        return None if placed_as is None else (placed_as, shape, cls)

    def grows_elastic(self, reasons: Iterable[WaitReason]) -> None:
        """Idle GPUs go to elastic jobs only when no queued job is waiting for capacity (`reasons`: why the
        queued jobs wait)."""
        if all(r in (OVER_QUOTA, LOCALITY_WAIT) for r in reasons):
            self.grow_elastic()

    def plan(self, rejects: list[Reject], waits: list[Wait]) -> Plan:
        return Plan(starts=tuple(self.starts), preempts=tuple(self.preempts), resizes=tuple(self.resizes),
                    rejects=tuple(rejects), waits=tuple(waits), migrations=tuple(self.migrations))


def beyond_free(free: FreeCapacity, learners: int, gpus_per_learner: float) -> WaitReason | None:
    """place_at()'s first two answers, before any placement is tried: a gang larger than the free GPUs waits
    for capacity, a learner larger than every server's free GPUs for fragmentation to clear. None: a placement
    may fit."""
    if learners * gpus_per_learner > free.total_gpus + 1e-9:
        return NO_CAPACITY
    if gpus_per_learner > free.max_node_gpus + 1e-9:
        return FRAGMENTATION
    return None


def why_never(job: JobView, snap: Snapshot, gate: Gate | None) -> str | None:
    """Why `job` can never run on the snapshot's cluster, or under `gate` (None: a gate that admits all)."""
    spec = job.spec
    shape = (spec.learners, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner,
             spec.excluded_types)
    # One dictionary probe (a tuple key is hashed afresh on every probe): "" stands for a shape not
    # cached yet, which never_fits() then works out and caches.
    why = snap.cluster.fit_cache.get(shape, "")
    if why == "":
        why = never_fits(spec, snap.cluster)
    if why is None and gate is not None:
        why = gate.never_admits(job)
    return why or None


def start_alone(snap: Snapshot, policy: Policy, placer: Placer, job: JobView) -> Allocation | None:
    """Where decide() starts `job` when it is the one job queued and starts without displacing, resizing or
    moving anyone (most arrivals on a cluster that is not overloaded); None where decide() would do anything
    else for it (reject it, leave it waiting, displace someone) or might (an elastic job: sizes tried by
    halving). The caller decides in full then. Valid only without migration and without running elastic
    jobs (decide() might grow them after the start).

    decide()'s steps for the job, in its order, without its round: that round's bookkeeping (the no-fit
    memo, starts, the gate's counts, the copy of the free arrays a start makes) serves the jobs ranked after
    the first, and there are none. A placement that fails is not retried by displacement here: a start that
    displaces someone is not this case."""
    spec = job.spec
    if spec.elastic:
        return None
    # The default gate admits everything: not asked at all for a policy that keeps it.
    if why_never(job, snap, None) or (type(policy).gate is not Policy.gate and not policy.admits_alone(snap, job)):
        return None
    learners = spec.learners
    # place_at()'s bounds: a gang larger than the free GPUs, or a learner larger than any server's free GPUs;
    # the snapshot's figures, which a FreeCapacity made of it starts from (no property call, and none made
    # for a job that does not fit).
    if (learners * spec.gpus_per_learner > snap.free_gpu_total + 1e-9
            or spec.gpus_per_learner > snap.max_free_gpus + 1e-9):
        return None
    result = placer.place(job, learners, FreeCapacity(snap), snap, policy.type_preference(snap, job))
    return result if type(result) is Allocation else None


def decide(snap: Snapshot, policy: Policy, placer: Placer, migrate: bool = False) -> Plan:
    """Decide which queued jobs start where, which running jobs are preempted (or, with `migrate`, moved to
    other servers to defragment), and why the rest wait."""
    rnd, rejects, wait_ids, reasons = _walk(snap, policy, placer, migrate)
    return rnd.plan(rejects, list(map(Wait, wait_ids, reasons)))


def decide_changes(snap: Snapshot, policy: Policy, placer: Placer, migrate: bool,
                   known: dict[str, WaitReason]) -> Plan:
    """decide() with a Wait only for the jobs whose reason is not the one `known` holds for them (a shell
    that keeps the reasons it was last given: Session's full mode); `known` is brought up to date (jobs
    started or rejected leave it). A queue of thousands then costs no Wait per job and round: those tuples,
    all alive until the plan is made, were what set off the garbage collector in a long queue's rounds."""
    rnd, rejects, wait_ids, reasons = _walk(snap, policy, placer, migrate)
    changed = []
    get = known.get
    for job_id, reason in zip(wait_ids, reasons, strict=True):
        if get(job_id) is not reason:
            changed.append(Wait(job_id, reason))
            known[job_id] = reason
    for s in rnd.starts:
        known.pop(s.job_id, None)
    for r in rejects:
        known.pop(r.job_id, None)
    return rnd.plan(rejects, changed)


def _walk(snap: Snapshot, policy: Policy, placer: Placer, migrate: bool
          ) -> tuple[_Round, list[Reject], list[str], list[WaitReason]]:
    """decide()'s round: the round (starts, preemptions, resizes, migrations), the rejects, and each waiting
    job's id and reason in two lists, in rank order (plain lists of existing objects: nothing per job that
    the garbage collector has to track)."""
    rnd = _Round(snap, policy, placer, FreeCapacity(snap), policy.gate(snap), migrate)
    rejects: list[Reject] = []
    waiting: list[str] = []
    wait_for = waiting.append
    reasons: list[WaitReason] = []
    because = reasons.append
    blocked = False
    strict_order = policy.blocks_others
    # A policy that never holds anyone back (Policy.may_block_others): no need to ask per job.
    may_block = policy.may_block_others
    # Jobs the policy and the placer cannot tell apart (one alike key) get the same answer as long as
    # nothing has started and no capacity has grown in this round: a queue of thousands costs one attempt
    # per key between starts, not one per job. Values: (reason, whether it came from a placement attempt,
    # which may hold back the jobs ranked after it).
    alike: dict[object, tuple[WaitReason, bool]] = {}
    alike_version = alike_starts = 0
    starts = rnd.starts
    free = rnd.free
    # A gang larger than every free GPU waits for capacity whatever else is known of it, unless it may
    # displace someone: attempt() would answer NO_CAPACITY after the same checks (place_at's first test; no
    # defragmentation or displacement applies). Only where nothing else can come of the attempt: no quota
    # gate (it answers first), no strict order (an attempt may block the rest), not elastic (smaller sizes).
    # Under overload most of a long queue is this case once the free GPUs are gone.
    short_cut = not rnd.gated and not may_block
    preemptive = policy.preemptive
    preemptor = policy.preemptor
    gate = rnd.gate
    # why_never()'s first probe, made here: a shape known to fit on a cluster without a quota gate to ask (a
    # full-mode policy's common case, at every queued job of every round) needs no call.
    fits = snap.cluster.fit_cache
    gated = rnd.gated
    # The loop below runs once per queued job per round: keep its common path free of needless calls.
    for job in policy.rank(snap):
        if blocked:
            wait_for(job.spec.job_id)
            because(LOWER_PRIORITY)
            continue
        spec = job.spec
        if gated or fits.get((spec.learners, spec.gpus_per_learner, spec.cpus_per_learner, spec.mem_gb_per_learner,
                              spec.excluded_types), "") is not None:
            why_never = rnd.why_never(job)
            if why_never:
                rejects.append(Reject(job.spec.job_id, why_never))
                continue
        if (short_cut and spec.learners * spec.gpus_per_learner > free.total_gpus + 1e-9
                and ((spec.min_learners is None and spec.max_learners is None) or not spec.elastic)
                and not (preemptive and preemptor(snap, gate, job))):
            wait_for(spec.job_id)
            because(NO_CAPACITY)
            continue
        key = rnd.alike_key(job)
        if key is not None:
            if free.version != alike_version or len(starts) != alike_starts:
                alike.clear()
                alike_version, alike_starts = free.version, len(starts)
            hit = alike.get(key)
            if hit is not None:
                wait_for(job.spec.job_id)
                because(hit[0])
                if hit[1] and may_block:
                    blocked = strict_order(job)
                continue
        result, placed = rnd.attempt(job)
        if isinstance(result, Allocation):
            continue
        wait_for(job.spec.job_id)
        because(result)
        if placed:
            blocked = strict_order(job)
        if key is not None:
            alike[key] = (result, placed)
    if migrate:
        rnd.reauction()
    rnd.grows_elastic(reasons)
    return rnd, rejects, waiting, reasons
