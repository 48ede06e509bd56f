"""The one policy interface: who goes first, who may displace whom, and how much each tenant may hold."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from enum import Enum
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.plan import WaitReason
from loadmaster.scheduling.queue_index import Group, JobClass, WalkOrder
from loadmaster.scheduling.snapshot import JobView, Snapshot


class Admission(Enum):
    GUARANTEED = "guaranteed"  # within the tenant's own quota
    BORROWED = "borrowed"  # on idle GPUs lent by other tenants; may be reclaimed
    DENIED = "denied"  # the tenant is at its limit


DENIED = Admission.DENIED  # read at every admit() of a walk: a module global, as plan.py's reasons


class Gate:
    """Per-tenant admission during one decide() call. This default admits everything and keeps no books;
    quota-aware policies subclass it (see fair.QuotaGate)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def admit(self, job: JobView, gpus: int) -> Admission:
        return Admission.GUARANTEED

    @classmethod
    def may_deny(cls) -> bool:
        """Whether admit() may ever answer DENIED: a gate that overrides admit() is taken to, unless it says
        otherwise (a Session's walk answers a job without attempt() only where nothing can refuse it)."""
        return cls.admit is not Gate.admit

    def add(self, job: JobView, learners: int | None = None) -> None:
        """Count `learners` learners of the job (default: its current allocation) against its tenant.

        Counted in learners, not GPUs: a learner may hold no GPU (CPU-only jobs), and per-resource gates
        (DRF) must still know how many CPUs and how much memory that is."""

    def remove(self, job: JobView) -> None:
        """Stop counting a running job's allocation (it is being preempted)."""

    def watch(self, free: FreeCapacity) -> None:
        """The free capacity of the decide() call this gate serves, as it changes (decide() tells every gate
        once, before anything is placed): a gate may read it to bound what a displacement can find (srtf).
        Default: not kept."""

    def never_admits(self, job: JobView) -> str | None:
        """A reason why this job can never run under the tenant's limits, or None."""
        return None

    def victims_of(self, tenant: str, key: Callable[[JobView], tuple[float, ...]]
                   ) -> list[tuple[tuple[float, ...], JobView]]:
        """A tenant's running jobs in victim order, with their keys (sorted once a round, on first use)."""
        cache: dict[str, list[tuple[tuple[float, ...], JobView]]] = self.__dict__.setdefault("_victims_cache", {})
        if tenant not in cache:
            jobs = self.snap.running_by_tenant.get(tenant, ())
            cache[tenant] = sorted(((key(j), j) for j in jobs), key=lambda kv: kv[0])
        return cache[tenant]


class Policy(ABC):
    """Decides order and displacement; placement is left to a Placer.

    rank() orders the queued jobs, best first. A preemptive policy also answers may_preempt(): whether a
    queued job may displace a running one, and orders candidate victims with victim_key() (lowest first).
    round_s, when set, asks the shell to call decide() at least that often while jobs wait (for policies
    whose order changes with time alone, such as LAS or leases).
    """

    name: ClassVar[str]
    preemptive: ClassVar[bool] = False
    round_s: float | None = None

    @abstractmethod
    def rank(self, snap: Snapshot) -> Sequence[JobView]:
        """Queued jobs in the order they should be considered."""

    def gate(self, snap: Snapshot) -> Gate:
        return Gate(snap)

    def admits_alone(self, snap: Snapshot, job: JobView) -> bool:
        """Would gate(snap) let `job` (one of snap.queued) start as the first job of a decision: never_admits()
        gives no reason and admit() does not deny its whole gang? Asked of the one queued job, which starts
        without a round (decide.start_alone) at most arrivals. Default: asks a gate made for it; a policy whose
        gate keeps books may answer from the snapshot without making one (nothing is counted before the first
        job)."""
        if type(self).gate is Policy.gate:
            return True  # the default gate admits everything
        gate = self.gate(snap)
        if type(gate) is Gate:
            return True
        return not gate.never_admits(job) and gate.admit(job, job.spec.gpus) is not Admission.DENIED

    def may_preempt(self, snap: Snapshot, gate: Gate, job: JobView, victim: JobView) -> bool:
        return False

    def preemptor(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        """Cheap pre-check: may this job displace anyone at all? (Skips the victim scan when not.)"""
        return self.preemptive

    def room_by_displacing(self, snap: Snapshot, gate: Gate, job: JobView) -> bool:
        """Asked of a job that is a preemptor() and whose gang exceeds the free GPUs, before anything happened
        in the decision (`gate` as gate(snap) made it): may displacing the jobs it may displace make room for
        its gang at all? False only where that cannot happen in this decision before someone is displaced
        or resized in it (while jobs only start, the free GPUs only fall), for this job and for every later
        job of its decision class; a Session then answers the class NO_CAPACITY without a visit until then.
        A Session's walk also asks it later in the decision, of a job whose gang exceeds the free GPUs (or
        whose learner exceeds every server's) and would be attempted only to search for victims: False then
        means no displacement can make room for this job at this point of the decision (with `gate` as the
        decision left it), and the job gets attempt()'s answer without the search. Default: True (no such
        bound known)."""
        return True

    def victim_candidates(self, snap: Snapshot, gate: Gate, job: JobView,
                          victims: Callable[[], Sequence[JobView]]) -> Iterable[JobView]:
        """The running jobs `job` may displace, cheapest first. `victims()` gives every running job sorted
        by victim_key (computed once a round, on first call); the iterable is consumed lazily while victims
        are released, so may_preempt sees the gate as it changes."""
        return (v for v in victims() if self.may_preempt(snap, gate, job, v))

    def releasable_gpus(self, snap: Snapshot, gate: Gate, job: JobView) -> float | None:
        """At most how many GPUs displacing every job victim_candidates() may give `job` frees (None: not
        known). decide() gives up on a displacement that cannot free enough GPUs without walking the
        victims one by one, where the gate keeps no books (Gate itself)."""
        return None

    def releasable_by_server(self, snap: Snapshot, gate: Gate, job: JobView
                             ) -> npt.NDArray[np.float64] | None:
        """Per server (cluster node order), at most how many GPUs displacing every job victim_candidates()
        may give `job` frees there (None: not known). Asked only once releasable_gpus() let the search go on,
        where the gate keeps no books: decide() gives up when the gang cannot fit even then, since a server
        holds at most floor((free + releasable) / GPUs per learner) of its learners."""
        return None

    def victim_key(self, snap: Snapshot, victim: JobView) -> tuple[float, ...]:
        """Lower keys are preempted first. Default: the most recently started (least work to lose)."""
        return (-(victim.started_at or 0.0),)

    def preemption_scope(self, job: JobView) -> object:
        """Jobs of one shape and one scope have the same victims, or a subset for later-ranked ones."""
        return None

    def type_preference(self, snap: Snapshot, job: JobView) -> Sequence[str] | None:
        """GPU types to place `job` on, best first (heterogeneity-aware policies); None: any, placer's call."""
        return None

    def decision_class(self, snap: Snapshot, job: JobView) -> Hashable | None:
        """What this policy's treatment of a queued job depends on besides the job's shape (learners, GPUs,
        CPUs, memory per learner, excluded types) and the placer's cache key: its gate's admission, its
        type preference, whether it may displace anyone and whom. A job ranked after one of the same
        shape, placer key and class must be admitted alike, prefer the same types and be allowed to
        displace the same jobs or a subset of them (the promise preemption_scope makes too). decide()
        then gives it the earlier job's answer while nothing has started or grown in the round, so a long
        queue costs one attempt per class. None (the default): no such promise, every job is tried."""
        return None

    def marked_jobs(self, snap: Snapshot) -> Collection[str] | None:
        """The queued jobs whose decision class sets them apart by their place in the queue, not by anything
        of their own (fair-fifo: each tenant's head-of-queue job), so that a job's class changes when others
        join or leave the queue. A Session classifies a job again when it gains or loses the mark. None (the
        default): no class depends on the rest of the queue."""
        return None

    @property
    def marks_jobs(self) -> bool:
        """Whether marked_jobs() may ever mark anyone: a Session asks it at each decision only if so."""
        return type(self).marked_jobs is not Policy.marked_jobs

    def blocks_others(self, job: JobView) -> bool:
        """True if a job that cannot start should hold back every job ranked after it (strict order)."""
        return False

    @property
    def may_block_others(self) -> bool:
        """Whether blocks_others() may ever say True: a decision asks it per job only if so. Default: whether
        the policy overrides blocks_others()."""
        return type(self).blocks_others is not Policy.blocks_others

    # -- keeping the order between decisions (scheduling.session.Session) ------------------------------
    def order_key(self, snap: Snapshot, job: JobView) -> tuple[object, ...] | None:
        """The queued job's place in rank(), as a key that stays valid while it waits (until order_until):
        rank() must be the queue sorted by (class_order, order_key), every key distinct (end with the job
        id). A Session then keeps the queue sorted between decisions instead of ranking it at each one.
        None (the default): no such key; a Session ranks the whole queue at every decision."""
        return None

    def class_order(self, snap: Snapshot, job: JobView) -> tuple[object, ...]:
        """The part of the job's rank that every job of its decision class shares and that may change
        between decisions (fair: its tenant's share of its quota). Asked once per class per decision."""
        return ()

    def next_change_s(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """After a decision on `snap` that changed nothing (no action, no reason), the earliest clock at
        which time alone could make this policy decide differently, for a shell that decides on a timer
        (round_s) and may skip the rounds before it. `heads` holds a queued job of each decision class
        (any job of a class may stand for it: decision_class() promises they are treated alike). An
        earlier time than the exact one is allowed; a later one is a bug. Default: the snapshot's own
        clock, i.e. no round may be skipped. Changes of a queued job's order are the Session's
        (order_until), not this hook's."""
        return snap.clock

    def unchanged_by_time(self, snap: Snapshot, again: Snapshot) -> bool:
        """Whether a decision on `again` would change nothing, where `again` differs from `snap`, the
        snapshot of the decision just made (it started, displaced, resized, moved and rejected nobody), in
        its clock alone (a Session's full mode checks the queue, the running jobs, the free capacity and the
        quotas): known without working anything out, e.g. from a next_change_s() already asked for `snap`.
        True also makes next_change_s(again) answer what it answered for `snap` (the shell asks it after the
        decision on `again`). Default: False (the decision is made)."""
        return False

    def next_change_spans(self, snap: Snapshot, heads: Sequence[JobView]) -> Sequence[tuple[float, float]]:
        """next_change_s() in more detail: spans of clocks (first, last, both included; in order of first, the
        first first being next_change_s()) outside which time alone cannot make this policy decide differently
        before the last span's end, for a shell that decides on a timer and may skip every round outside them
        (the simulator's rounds: a decision at any clock in a span may change something, one between two
        spans may not). Default: one span, from next_change_s() on."""
        return ((self.next_change_s(snap, heads), math.inf),)

    def answers_hold_until(self, snap: Snapshot, heads: Sequence[JobView]) -> float:
        """After a decision on `snap` that started, displaced, resized, moved and rejected nobody, until when
        (clock, exclusive) every answer it gave a queued job stays the answer a decision would give, as long
        as the running jobs and the free capacity stay as they are and the queue only grows; a new job then
        changes only the answer of its own class, and only if it is the first of it. A Session then visits
        only such classes until an event (Session.decide's quiet decisions). `heads`: the first queued job of
        each decision class (the jobs those answers were given for). An earlier time than the exact one is
        allowed. Default: -inf, no such promise (every decision walks the queue)."""
        return -math.inf

    @property
    def promises_answers(self) -> bool:
        """Whether answers_hold_until() may ever promise anything: a Session asks it (and lists every class's
        first job for it) only if so."""
        return type(self).answers_hold_until is not Policy.answers_hold_until

    def order_group(self, snap: Snapshot, job: JobView) -> Hashable | None:
        """The group whose jobs a walk_order() takes in order_key order (DRF: the tenant); None: no groups."""
        return None

    def walk_order(self, gate: Gate, groups: Mapping[Hashable, Group], class_of: Callable[[str], JobClass],
                   migrate: bool = False) -> WalkOrder | None:
        """The queue in this policy's order for one Session decision, when it is not (class_order,
        order_key): DRF's progressive filling re-ranks tenants as their jobs start. `groups` are the queued
        jobs by order_group, `class_of` a job id's class; `migrate`: the decision may move running jobs (a
        gang waiting on fragmentation may then start). None (the default): the Session merges classes."""
        return None

    def settles_every_class(self, snap: Snapshot,
                            groups: Mapping[Hashable, Group]) -> Mapping[JobClass, WaitReason] | None:
        """Where this policy's walk_order() for a decision on `snap` without migration would hand out no job at
        all and settle every class of `groups` without a visit (no attempt, nothing started, displaced or
        rejected): the answer it settles each class with, which time alone does not change (only an event: a
        job arrives, starts or ends, capacity or quotas change). None where that is not known (the default). A
        Session uses it to know that a decision on a snapshot would change nothing without making it, until an
        event (Session.changes_nothing)."""
        return None

    def order_until(self, snap: Snapshot, job: JobView) -> float:
        """Until when (clock) the queued job's order_key and decision_class stay what they are now, with
        time alone; an earlier time than the exact one is allowed (the Session asks again then)."""
        return float("inf")
