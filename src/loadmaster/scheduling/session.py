"""A decide() kept between calls: the queue in the policy's order, so a decision costs what changed.

decide(snapshot, policy, placer) ranks the whole queue and answers every job each time. Most of that
is repetition: between two decisions a few jobs arrive or end, and jobs the policy and placer cannot
tell apart (one *alike key*: shape, placer cache key, decision class; decide.py) get one answer per
key until something starts. A Session keeps the queued jobs sorted, per alike key, by the policy's
order_key() and walks only the head of each key (a merge over keys): after a start, the keys already
answered resume at their first job ranked after it. What the walk learns is, per key, the reason of
each run of jobs between two starts; the Plan reports a Wait only for the jobs whose reason differs
from the one the previous plan gave them. The answers are decide()'s, call for call: the same
_Round does every placement and displacement in the same order (tests/scheduling/test_session.py
compares the two on random worlds, tests/sim/test_golden.py every simulation).

How a shell uses it (the simulator does; the control loop can do the same):
- `add(view)` when a job joins the queue (arrival, requeue after a preemption or failed attempt, a
  changed queued view such as a scale request), `remove(job_id)` when it leaves (started, rejected,
  cancelled). Running jobs, capacity and quotas come with each snapshot as before.
- `decide(snapshot)` with a snapshot whose `queued` is `session.queued` (a LazyJobs: nothing copies the
  queue unless a policy iterates it) and `queued_tenants=session.queued_tenants`. Apply the plan; a Wait
  in it is a *change* of reason.
- `tenants_changed()` after quotas change (a tenant's jobs may become impossible or possible).
- `next_change_s()`: the earliest clock at which time alone can change a queued job's order or class
  (LAS promotions); with Policy.next_change_s(snapshot, session.heads()) for the running jobs, a shell
  that decides on a timer may skip the rounds before it once a plan changed nothing.

A policy that ranks by something other than (class order, order key) gives its own walk (walk_order:
DRF's progressive filling, queue_index.WalkOrder). Policies that keep no order between decisions
(order_key None: themis) and placers whose cache key changes with time (locality) run through the same
interface in *full* mode: decide() on the whole queue, and a Wait for every job whose reason changed,
found by comparing all of them (decide_changes(): no Wait is made for the others).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from loadmaster.core.job import Allocation
from loadmaster.core.tally import tally
from loadmaster.scheduling.capacity import FreeCapacity
from loadmaster.scheduling.decide import _Round, beyond_free, decide_changes, start_alone
from loadmaster.scheduling.placement.base import Placer
from loadmaster.scheduling.plan import (
    LOCALITY_WAIT,
    LOWER_PRIORITY,
    NO_CAPACITY,
    OVER_QUOTA,
    Plan,
    Reject,
    Start,
    Wait,
    WaitReason,
)
from loadmaster.scheduling.policies.base import DENIED, Policy
from loadmaster.scheduling.queue_index import LOWEST, Group, JobClass, Key, WalkOrder, reason_at
from loadmaster.scheduling.snapshot import JobView, LazyJobs, Snapshot

# Waiting reasons that let decide() grow elastic jobs (decide._Round.grows_elastic).
_LETS_ELASTIC_GROW = (OVER_QUOTA, LOCALITY_WAIT)


@dataclass(slots=True)
class _Entry:
    cls: JobClass
    key: Key
    until: float
    group: Group | None


class Session:
    """One policy and one placer, and the queue they decide over, kept from one decision to the next."""

    def __init__(self, policy: Policy, placer: Placer, migrate: bool = False) -> None:
        self.policy = policy
        self.placer = placer
        self.migrate = migrate  # defragment by moving running jobs (decide()'s `migrate`)
        self.incremental = (type(policy).order_key is not Policy.order_key and not placer.time_dependent_key)
        self._uses_class_order = type(policy).class_order is not Policy.class_order
        self._jobs: dict[str, JobView] = {}
        # The provider `queued` hands every snapshot, made once (the dict is never replaced): a tuple of its
        # views as they are when a policy first iterates them.
        self._queued_tuple = partial(tuple, self._jobs.values())
        # Queued jobs per tenant: built at the first queued_tenants() and kept from then on; None until then, so
        # that add() and remove() count nothing for the policies that never ask (only DRF does).
        self._tenants: dict[str, int] | None = None
        # Incremental mode: the classified jobs, their classes, and jobs to (re)classify at the next decision
        # with the reason they had before (None: never given one).
        self._entries: dict[str, _Entry] = {}
        self._classes: dict[object, JobClass] = {}
        self._groups: dict[object, Group] = {}  # for policies that rank by group (Policy.order_group)
        self._pending: dict[str, WaitReason | None] = {}
        self._until: list[tuple[float, int, str]] = []  # (order_until, seq, job id): jobs to re-key then
        self._seq = itertools.count()
        self._ident = itertools.count()
        # Full mode: the reason each queued job was last given.
        self._reason: dict[str, WaitReason] = {}
        # Full mode, after a decision that started, displaced, resized, moved and rejected nobody, while nothing
        # joined or left the queue since: its snapshot, and the running tuple and free totals it saw (see
        # _repeats_last).
        self._unchanged: tuple[Snapshot, tuple[JobView, ...], tuple[float, ...]] | None = None
        self.repeated_decisions = 0  # decisions known to repeat that one (a figure for tests and benchmarks)
        # After a walk that started, displaced and rejected nothing: what its answers rest on (the running
        # jobs, the cluster, the quotas, the free totals) and until when the policy says they hold
        # (Policy.answers_hold_until); None when there is no such promise.
        self._quiet: tuple[tuple[JobView, ...], object, object, tuple[float, ...], float] | None = None
        self.quiet_decisions = 0  # decisions made by _Walk.run_quiet (a figure for tests and benchmarks)
        self.promises = policy.promises_answers  # ever quiet at all
        # Whether changes_nothing() may ever answer True (the policy knows when its walk settles every class).
        self.settles = self.incremental and type(policy).settles_every_class is not Policy.settles_every_class
        # The jobs Policy.marked_jobs() set apart at the last decision (their class depends on it); None while
        # no job is classified (no class rests on the marks: they are worked out before a walk classifies).
        self.marks = policy.marks_jobs
        self._marked: frozenset[str] | None = None
        # Incremental mode: the Waits made so far, per reason, per queued job (_wait()).
        self._waits: dict[WaitReason, dict[str, Wait]] = {}

    # -- what the shell tells it -------------------------------------------------------------------------
    @property
    def queued(self) -> LazyJobs:
        """The queued jobs, for the snapshot (copied only if a policy iterates them)."""
        return LazyJobs(self._queued_tuple, len(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def queued_tenants(self) -> list[str]:
        """Tenants with a queued job (a Snapshot.build provider)."""
        tenants = self._tenants
        if tenants is None:
            tenants = self._tenants = {}
            for view in self._jobs.values():
                tally(tenants, view.spec.tenant, 1)
        return list(tenants)

    def add(self, view: JobView) -> None:
        """A job joins the queue, or a queued job's view changed (it keeps its last reason)."""
        job_id = view.spec.job_id  # not the job_id property: a call per arrival and requeue
        self._unchanged = None
        old = self._jobs.get(job_id)
        if old is not None:
            self._quiet = None  # a changed view: its class's answer may change
        tenants = self._tenants
        if tenants is not None:
            if old is not None:
                tally(tenants, old.spec.tenant, -1)
            tally(tenants, view.spec.tenant, 1)
        self._jobs[job_id] = view
        if self.incremental:
            # A job new to the queue is in no class and not pending (both hold queued jobs only): _detach()
            # would find nothing, so it is called only for a changed view.
            self._pending[job_id] = None if old is None else self._detach(job_id)

    def remove(self, job_id: str) -> None:
        """A job left the queue (started, rejected or cancelled); unknown ids are ignored."""
        self._quiet = None
        self._unchanged = None
        if self.incremental:
            # _detach(job_id) without the call where it has nothing to do: a job started alone
            # (_decide_alone) is neither pending nor classified any more.
            if job_id in self._pending:
                del self._pending[job_id]
            elif job_id in self._entries:
                self._detach(job_id)
            for made in self._waits.values():
                made.pop(job_id, None)
        else:
            self._reason.pop(job_id, None)
        view = self._jobs.pop(job_id, None)
        if view is not None and self._tenants is not None:
            tally(self._tenants, view.spec.tenant, -1)

    def tenants_changed(self) -> None:
        """Quotas changed: every job is classified again (a rejection may now hold, or a class change)."""
        self._quiet = None
        self._unchanged = None
        for job_id in list(self._entries):
            self._pending[job_id] = self._detach(job_id)

    def _detach(self, job_id: str) -> WaitReason | None:
        """Take a job out of its class; returns the reason it had (None if it had none)."""
        if job_id in self._pending:
            return self._pending.pop(job_id)
        entry = self._entries.pop(job_id, None)
        if entry is None:
            return None
        cls = entry.cls
        reason = cls.reason_at(entry.key)
        cls.delete(entry.key)
        if not cls.keys:
            del self._classes[cls.alike]
        group = entry.group
        if group is not None:
            group.delete(entry.key)
            group.count_out(cls)
            if not group.keys:
                del self._groups[cls.group]
        return reason

    # -- deciding -----------------------------------------------------------------------------------------
    def decide(self, snap: Snapshot) -> Plan:
        """decide(snap) with the waits reduced to the reasons that changed. `snap.queued` must hold the
        session's queued jobs (pass `session.queued`)."""
        got = self._decide(snap)
        return Plan((Start(got[0], got[1]),)) if isinstance(got, tuple) else got  # starts, by position

    def start_or_decide(self, snap: Snapshot) -> Plan | tuple[str, Allocation]:
        """decide(snap) for a shell that carries out a lone start at once: where the plan would be one new
        job's start and nothing else (_decide_alone), that job's id and allocation, the job already out of the
        queue (remove()); any other plan as decide() gives it. Most arrivals on a cluster that is not
        overloaded start so, and the Plan and Start made for each were read once."""
        got = self._decide(snap)
        if isinstance(got, tuple):
            self.remove(got[0])
        return got

    def _decide(self, snap: Snapshot) -> Plan | tuple[str, Allocation]:
        if not self.incremental:
            return self._decide_full(snap)
        if self.marks:
            if self._entries or self._quiet is not None:
                self._remark(snap)
            else:
                # Nothing classified and nothing promised: no class rests on the marks. Most arrivals under
                # fair-fifo start alone, and working out the marks for them was ~5% of its 117k run.
                self._marked = None
        if self._quiet is not None:
            walk = _Walk(self, snap)
            plan = walk.run_quiet()
            if plan is not None:
                self.quiet_decisions += 1
                return plan
            self._quiet = None
            return _Walk(self, snap).run(walk.classified)
        if len(self._pending) == 1 and not self._entries and not self.migrate:
            alone = self._decide_alone(snap)
            if alone is not None:
                return alone
        if self.marks and self._marked is None:
            self._marked = frozenset(self.policy.marked_jobs(snap) or ())
        return _Walk(self, snap).run()

    def changes_nothing(self, snap: Snapshot) -> bool:
        """Would decide(snap) give an empty plan (no action and no Wait), known without deciding? True only
        where no job is pending (none new or requeued since the last decision), no job is due to be re-keyed,
        nothing may grow or move, and the policy settles every class without a visit
        (Policy.settles_every_class) with the one reason all its jobs have now: the walk would then attempt
        nothing and give no job another reason, and so would every decision until an event or the Session's
        next_change_s() (the policy's answers do not change with time alone). A shell that just carried out a
        plan that acted may so know that the timer rounds after it change nothing (the simulator's
        quiet_until)."""
        if (not self.settles or self._pending or self.migrate or self.marks or snap.running_elastic
                or self.next_change_s() <= snap.clock):
            return False
        # The one reason every job of each class has now (a run of no jobs, e.g. of jobs that started, counts for
        # nothing: the walk's Waits are per job).
        now: dict[JobClass, WaitReason] = {}
        for cls in self._classes.values():
            reasons = cls.reasons
            if len(reasons) == 1:
                now[cls] = reasons[0][1]
                continue
            found = {reason for lo, hi, reason in cls.runs() if lo < hi}
            if len(found) != 1:
                return False
            now[cls] = found.pop()
        answers = self.policy.settles_every_class(snap, self._groups)
        if answers is None or len(answers) != len(now):
            return False
        return all(answers.get(cls) is reason for cls, reason in now.items())

    def _remark(self, snap: Snapshot) -> None:
        """Classify again the jobs that gained or lost the policy's mark since the last decision (a tenant's
        new head under fair-fifo: the old one left, or a requeued job was submitted before it). Asked only
        while a job is classified or a promise holds (decide())."""
        assert self._marked is not None  # a walk classified the jobs (decide() works the marks out before it)
        marked = frozenset(self.policy.marked_jobs(snap) or ())
        if marked == self._marked:
            return
        for job_id in marked.symmetric_difference(self._marked):
            if job_id in self._entries:
                self._pending[job_id] = self._detach(job_id)
        self._quiet = None
        self._marked = marked

    def _decide_alone(self, snap: Snapshot) -> Plan | tuple[str, Allocation] | None:
        """The plan of a queue of one new job that starts at once without displacing anyone (most arrivals on
        a cluster that is not overloaded), or None; a job that is not elastic as its (id, allocation), the
        plan's one Start (decide() makes the Plan, start_or_decide() none). The walk would classify the job,
        hand it out first and make the same attempt on the same round; its class would be gone again once the
        job leaves. None (the job waits, or starts only by preempting, or running elastic jobs may grow after
        it): the walk decides, on a round of its own, as if this one had not been tried."""
        if snap.running_elastic:
            return None
        job_id = next(iter(self._pending))
        view = self._jobs[job_id]
        policy = self.policy
        # decide()'s steps for one job without a round; it answers for every job but an elastic one (None, at
        # its first check: asked first, the elastic test is made once per lone start, not twice).
        alloc = start_alone(snap, policy, self.placer, view)
        if alloc is not None:
            del self._pending[job_id]
            return job_id, alloc
        if not view.spec.elastic:
            return None
        rnd = _Round(snap, policy, self.placer, FreeCapacity(snap), policy.gate(snap))
        if rnd.why_never(view):
            return None
        result, _ = rnd.attempt(view)
        if type(result) is not Allocation or rnd.preempts or rnd.resizes or rnd.migrations:
            return None
        del self._pending[job_id]
        return rnd.plan([], [])

    def next_change_s(self) -> float:
        """The earliest clock at which a queued job's order or class may change with time alone."""
        heap = self._until
        while heap:
            until, _, job_id = heap[0]
            entry = self._entries.get(job_id)
            if entry is not None and entry.until == until:
                return until
            heapq.heappop(heap)  # the job left or was classified again since
        return float("inf")

    def heads(self) -> list[JobView]:
        """A queued job of each decision class (every queued job in full mode): who might act at all."""
        if not self.incremental:
            return list(self._jobs.values())
        return [cls.views[0] for cls in self._classes.values()] + [self._jobs[j] for j in self._pending]

    def waiting_for(self, reason: WaitReason) -> list[JobView]:
        """The queued jobs whose last reason is `reason`."""
        if not self.incremental:
            return [self._jobs[j] for j, r in self._reason.items() if r is reason]
        out: list[JobView] = []
        for cls in self._classes.values():
            for lo, hi, r in cls.runs():
                if r is reason:
                    out += cls.views[lo:hi]
        return out

    def _decide_full(self, snap: Snapshot) -> Plan | tuple[str, Allocation]:
        if self._unchanged is not None and self._repeats_last(snap):
            self.repeated_decisions += 1
            return Plan()
        if len(self._jobs) == 1 and not self.migrate:
            alone = self._start_one(snap)
            if alone is not None:
                self._unchanged = None
                return alone
        plan = self._decide_full_plan(snap)
        self._unchanged = None
        if not (plan.starts or plan.preempts or plan.resizes or plan.rejects or plan.migrations or self.migrate
                or snap.running_elastic or self.placer.time_dependent_key):
            # snap.running read now: a shell may provide it lazily, and later it would be a later tuple.
            self._unchanged = (snap, snap.running, _free_totals(snap))
        return plan

    def _repeats_last(self, snap: Snapshot) -> bool:
        """Whether a decision on `snap` is known to repeat the last one made (Session._unchanged), which acted
        on nobody: the queue (nothing joined or left it), the running tuple, the free capacity and the quotas
        are those it saw, only the clock is later, and the policy knows that time alone changes nothing
        before it (Policy.unchanged_by_time). Its reasons are the ones known, so the repeat reports no Wait: an empty
        plan. A shell's stale event (a preempted attempt's end) or a round then costs no walk."""
        assert self._unchanged is not None
        last, running, free = self._unchanged
        return (snap.running is running and snap.cluster is last.cluster and snap.tenants is last.tenants
                and snap.clock >= last.clock and _free_totals(snap) == free
                and self.policy.unchanged_by_time(last, snap))

    def _decide_full_plan(self, snap: Snapshot) -> Plan:
        plan = self._decide_one(snap) if len(self._jobs) == 1 and not self.migrate else None
        if plan is None:
            return decide_changes(snap, self.policy, self.placer, self.migrate, self._reason)
        known = self._reason
        changed = []
        for w in plan.waits:
            if known.get(w.job_id) is not w.reason:
                changed.append(w)
                known[w.job_id] = w.reason
        for s in plan.starts:
            known.pop(s.job_id, None)
        for r in plan.rejects:
            known.pop(r.job_id, None)
        return Plan(plan.starts, plan.preempts, plan.resizes, plan.rejects, tuple(changed), plan.migrations)

    def _start_one(self, snap: Snapshot) -> tuple[str, Allocation] | None:
        """Full mode's queue of one job that starts at once without displacing anyone (most arrivals on a
        cluster that is not overloaded, Themis' at 117k among them): its (id, allocation) from
        decide.start_alone, as _decide_alone gives it in incremental mode, without decide()'s round, its
        capacity copy and its plan; None where the walk (_decide_one) decides. The job's last reason, if it
        had one, goes when it leaves the queue (remove())."""
        if snap.running_elastic or len(snap.queued) != 1:
            return None
        view = next(iter(self._jobs.values()))
        alloc = start_alone(snap, self.policy, self.placer, view)
        return None if alloc is None else (view.job_id, alloc)

    def _decide_one(self, snap: Snapshot) -> Plan | None:
        """Full mode's lone arrival: decide() on a queue of one job, without what only a longer queue
        needs (the alike key that lets later jobs reuse an answer). The job is first in any ranking, and
        every policy in full mode offers it all it would offer any job (Themis: one queued job is the whole
        offered set). The steps are decide()'s for that job, in its order: reject, or attempt; elastic growth
        as decide() allows it. None where the snapshot's queue is not the session's one job."""
        if len(snap.queued) != 1:
            return None
        policy = self.policy
        rnd = _Round(snap, policy, self.placer, FreeCapacity(snap), policy.gate(snap))
        ranked = policy.rank(snap)  # asked first, as decide() does (a policy may build its round there)
        if len(ranked) != 1:
            return None
        view = ranked[0]
        why = rnd.why_never(view)
        rejects: list[Reject] = []
        waits: list[Wait] = []
        if why:
            rejects.append(Reject(view.job_id, why))
        else:
            result, _ = rnd.attempt(view)
            if not isinstance(result, Allocation):
                waits.append(Wait(view.job_id, result))
        rnd.grows_elastic(w.reason for w in waits)
        return rnd.plan(rejects, waits)

    def _wait(self, job_id: str, reason: WaitReason) -> Wait:
        """Wait(job_id, reason), made once per queued job and reason. A job's reason flips back and forth
        while it waits (fair-fifo: each time its VC's usage crosses what the VC's head needs, every other job
        of the VC turns OVER_QUOTA or back): a new Wait each time made thousands of objects per decision,
        which ran the garbage collector's young and full passes inside decide() (docs/benchmarks.md, h9ff)."""
        made = self._waits.get(reason)
        if made is None:
            made = self._waits[reason] = {}
        wait = made.get(job_id)
        if wait is None:
            wait = made[job_id] = Wait(job_id, reason)
        return wait

    def _entries_class(self, job_id: str) -> JobClass:
        return self._entries[job_id].cls

    # -- classes ------------------------------------------------------------------------------------------
    def _classify(self, rnd: _Round, job_id: str) -> None:
        """Put a pending job into its class (a class of its own if it is rejected or answered alone)."""
        view = self._jobs[job_id]
        snap = rnd.snap
        key = self.policy.order_key(snap, view)
        assert key is not None, f"{self.policy.name}: order_key() gave None for {job_id}"
        if rnd.why_never(view):
            alike: object = ("reject", job_id)
        else:
            alike = rnd.alike_key(view)
            if alike is None:
                alike = ("alone", job_id)
        cls = self._classes.get(alike)
        if cls is None:
            cls = self._classes[alike] = JobClass(next(self._ident), alike)
            if isinstance(alike, tuple) and alike and alike[0] in ("reject", "alone") and alike[1] == job_id:
                cls.solo = str(alike[0])
        cls.insert(key, view)
        group = None
        name = self.policy.order_group(snap, view)
        if name is not None:
            cls.group = name
            group = self._groups.get(name)
            if group is None:
                group = self._groups[name] = Group()
            group.insert(key, view)
            group.count_in(cls)
        until = self.policy.order_until(snap, view)
        self._entries[job_id] = _Entry(cls, key, until, group)
        if until != float("inf"):
            heapq.heappush(self._until, (until, next(self._seq), job_id))

    def _rekey_due(self, snap: Snapshot) -> None:
        """Jobs whose order or class may have changed with time alone since they were classified."""
        due = []
        heap = self._until
        while heap and heap[0][0] <= snap.clock:
            _, _, job_id = heapq.heappop(heap)
            entry = self._entries.get(job_id)
            if entry is not None and entry.until <= snap.clock:
                due.append(job_id)
        for job_id in due:
            self._pending[job_id] = self._detach(job_id)


def _free_totals(snap: Snapshot) -> tuple[float, ...]:
    return snap.free_gpu_total, snap.free_cpu_total, snap.free_mem_total, snap.max_free_gpus


class _HeadsOrder:
    """The WalkOrder of a policy whose ranking is (class order, order key): a merge over the heads of the
    classes (a heap), where a class answered since the last start leaves the merge until the next start,
    then resumes at its first job ranked after the one that started."""

    def __init__(self, classes: Iterable[JobClass], class_order: Callable[[JobClass], Key] | None,
                 no_capacity_above: float | None = None, rnd: _Round | None = None) -> None:
        """`class_order`: each class's class order (None: () for every class, a policy without one).
        `no_capacity_above`: where no job can move anyone, be refused by a gate or hold back the rest, the
        free GPUs: a class whose gang needs more is not handed out but settled as NO_CAPACITY (every visit
        would answer that while the free GPUs stay below its gang and no displacement can make room for
        it). None: every class is handed out.

        `rnd` (a preemptive policy's round; None: nobody may be displaced): a class whose first job may
        displace someone (Policy.preemptor) is handed out unless Policy.room_by_displacing() says that no
        displacement can make room for its gang before someone has been displaced in this decision. Both
        promises hold for the class's later jobs (the decision_class() promise: a subset of the victims).
        Until the first displacement the free GPUs only fall as jobs start; after each start that follows
        one, the classes settled on the bound, and those whose gang fits the free GPUs again (a displacement
        may release more than it takes), go back into the merge at their first job ranked after the start,
        as decide() would next visit them."""
        self.class_order = class_order
        self.cursor: dict[JobClass, int] = {}
        self.heap: list[tuple[Key, Key, int, JobClass]] = []
        self.settled: list[tuple[JobClass, WaitReason]] = []
        self.rnd = rnd
        # Settled classes whose first job may displace nobody, with their gangs' GPUs (looked at only after a
        # displacement, which most walks make none of); and those settled on room_by_displacing(), back in
        # once anyone is displaced.
        self.late: list[tuple[float, JobClass]] = []
        self.bound: list[JobClass] = []
        above = math.inf if no_capacity_above is None else no_capacity_above + 1e-9
        if rnd is not None:
            policy, snap, gate = rnd.policy, rnd.snap, rnd.gate
        for cls in classes:
            if above < math.inf and cls.solo is None:
                spec = cls.views[0].spec
                gang = spec.learners * spec.gpus_per_learner
                if gang > above:
                    if rnd is None:
                        self.settled.append((cls, NO_CAPACITY))
                        continue
                    head = cls.views[0]
                    if not policy.preemptor(snap, gate, head):
                        self.settled.append((cls, NO_CAPACITY))
                        self.late.append((gang, cls))
                        continue
                    if not policy.room_by_displacing(snap, gate, head):
                        self.settled.append((cls, NO_CAPACITY))
                        self.bound.append(cls)
                        continue
            self.cursor[cls] = 0
            self.heap.append((class_order(cls) if class_order is not None else (), cls.keys[0], cls.ident, cls))
        heapq.heapify(self.heap)
        self.answered_since: list[JobClass] = []  # classes answered since the last start

    def next(self) -> tuple[JobClass, int, Key, Key] | None:
        if not self.heap:
            return None
        rank, key, _, cls = heapq.heappop(self.heap)
        return cls, self.cursor[cls], rank, key

    def answered(self, cls: JobClass) -> None:
        self.answered_since.append(cls)

    def started(self, cls: JobClass, i: int, rank: Key, key: Key) -> None:
        heap = self.heap
        self.cursor[cls] = i + 1
        if i + 1 < len(cls.keys):
            heapq.heappush(heap, (rank, cls.keys[i + 1], cls.ident, cls))
        for other in self.answered_since:
            if self.class_order is not None and self.class_order(other) != rank:
                continue  # all its jobs rank before this one
            j = bisect_right(other.keys, key)
            if j < len(other.keys):
                self.cursor[other] = j
                heapq.heappush(heap, (rank, other.keys[j], other.ident, other))
        self.answered_since.clear()
        rnd = self.rnd
        if rnd is not None and (rnd.preempts or rnd.resizes) and (self.bound or self.late):
            self._let_in(rank, key)

    def _let_in(self, rank: Key, key: Key) -> None:
        """After a start that followed a displacement: the classes settled on the displacement bound, and
        those whose gang fits the free GPUs again (a displacement released more than it took), rejoin the
        merge at their first job ranked after the one that started at (rank, key)."""
        assert self.rnd is not None
        room = self.rnd.free.total_gpus + 1e-9
        back = self.bound + [cls for gang, cls in self.late if gang <= room]
        self.bound = []
        self.late = [(gang, cls) for gang, cls in self.late if gang > room]
        for cls in back:
            order = self.class_order(cls) if self.class_order is not None else ()
            if order < rank:
                continue  # all its jobs rank before this one: decide() visits none of them again
            j = 0 if order > rank else bisect_right(cls.keys, key)
            if j < len(cls.keys):
                self.cursor[cls] = j
                heapq.heappush(self.heap, (order, cls.keys[j], cls.ident, cls))


class _Walk:
    """One incremental decision: the merge over classes, the reasons it finds, and the plan."""

    # Whether a visit whose answer needs no placement (a gate's refusal, a gang larger than the free GPUs)
    # is answered without attempt(). Always, but for the tests that compare the walk with and without it.
    quick_answers = True

    def __init__(self, session: Session, snap: Snapshot) -> None:
        self.session = session
        self.snap = snap
        policy = session.policy
        self.rnd = _Round(snap, policy, session.placer, FreeCapacity(snap), policy.gate(snap), session.migrate)
        self.rejects: list[Reject] = []
        self.leaving: set[str] = set()  # started or rejected in this plan
        # Per class visited: the reasons found, as (key, reason) runs in rank order.
        self.found: dict[JobClass, list[tuple[Key, WaitReason]]] = {}
        self.order: dict[JobClass, tuple[object, ...]] = {}

    def run(self, classified: list[str] | None = None) -> Plan:
        """The decision. `classified`: pending jobs run_quiet() put into their classes already."""
        session = self.session
        session._rekey_due(self.snap)
        new_ids = list(session._pending)
        done = set(classified) if classified else ()
        for job_id in new_ids:
            if job_id not in done:
                session._classify(self.rnd, job_id)
        blocked = self._walk()
        waits = self._changes(blocked, new_ids)
        rnd = self.rnd
        if session.migrate:
            rnd.reauction()
        if self.snap.running_elastic and self._only_reasons(_LETS_ELASTIC_GROW):
            rnd.grow_elastic()
        session._quiet = None
        if (session.promises and blocked is None
                and not (rnd.starts or rnd.preempts or rnd.resizes or rnd.migrations or self.rejects)
                and not session.migrate and not self.snap.running_elastic):
            snap = self.snap
            until = session.policy.answers_hold_until(snap, session.heads())
            if until > snap.clock:
                # snap.running read now: a shell may provide it lazily, and later it would be a later tuple.
                session._quiet = (snap.running, snap.cluster, snap.tenants, _free_totals(snap), until)
        return rnd.plan(self.rejects, waits)

    def run_quiet(self) -> Plan | None:
        """The decision after a walk that changed nothing (Session._quiet), while its answers hold: the same
        running jobs and free capacity (the shell passes the same running tuple while nobody starts, ends or
        moves), before the policy's answers_hold_until, and only new jobs since. Every class keeps the one
        answer that walk (or a quiet decision since) gave it: the walk would give it again, since it starts
        nobody and each visit finds what the last one found. Only a class whose first job is new is visited,
        in rank order, on a round of its own, as the walk would visit it (no class visited before it starts
        anyone); a new job behind the first of its class gets that class's answer. None (nothing changed
        in the session but the classes of the new jobs, `classified`): a new job starts, or it is one the
        walk answers on its own (elastic), or the conditions do not hold; the caller then walks."""
        session = self.session
        assert session._quiet is not None
        running, cluster, tenants, free, until = session._quiet
        snap = self.snap
        self.classified: list[str] = []
        if not (snap.clock < until and snap.running is running and snap.cluster is cluster and snap.tenants is tenants
                and _free_totals(snap) == free and not snap.running_elastic and not session.migrate):
            return None
        if session._until and session._until[0][0] <= snap.clock:
            return None  # a job to re-key: its order or class may have changed with time
        pending = session._pending
        if any(before is not None for before in pending.values()):
            return None  # a job given a reason before (requeued): not new
        new_ids = list(pending)
        rnd = self.rnd
        for job_id in new_ids:
            session._classify(rnd, job_id)
            self.classified.append(job_id)
        heads: list[tuple[Key, Key, int, JobClass]] = []  # in rank order, as the walk hands them out
        for job_id in new_ids:
            cls = session._entries[job_id].cls
            if cls.solo == "alone":
                return None
            if cls.views[0].job_id == job_id:  # a reject's class is its own
                heads.append((self._class_order(cls), cls.keys[0], cls.ident, cls))
        visited: list[JobView] = []
        preemptive = session.policy.preemptive
        for _, _, _, cls in sorted(heads):
            view = cls.views[0]
            if cls.solo == "reject":
                self._reject(view)
                continue
            if preemptive and self._searches_victims(view):
                return None
            result, _ = rnd.attempt(view)
            if isinstance(result, Allocation):
                return None
            self.found[cls] = [(LOWEST, result)]
            visited.append(view)
        if len(self.rejects) > 1 and type(session.policy).walk_order is not Policy.walk_order:
            return None  # the policy's own order may reject them in another order than this one's
        if visited:
            # The answers given now hold from now on, for as long as the policy says they do.
            until = min(until, session.policy.answers_hold_until(snap, visited))
            session._quiet = (running, cluster, tenants, free, until)
        waits = self._changes(None, new_ids, keep=True)
        return rnd.plan(self.rejects, waits)

    def _searches_victims(self, view: JobView) -> bool:
        """Would attempt() go straight to a displacement search for `view` (a preemptive policy's job), before
        anything happened in this decision: the walk's quick answer would send it to attempt() for one (its gang
        exceeds the free GPUs, or its learner every server's, and the policy says it may displace someone and
        find room). Such a search mostly starts the job, after which run_quiet() gave up and the walk searched
        again: under srtf on the 3k overload all 665 such searches in quiet decisions started their job (~2.5%
        of the run's instructions)."""
        policy, rnd, spec = self.session.policy, self.rnd, view.spec
        if spec.elastic or type(rnd.gate).may_deny():
            return False  # attempt() answers as the walk would (the walk attempts these too)
        if beyond_free(rnd.free, spec.learners, spec.gpus_per_learner) is None:
            return False  # a placement is tried first
        snap, gate = self.snap, rnd.gate
        return policy.preemptor(snap, gate, view) and policy.room_by_displacing(snap, gate, view)

    def _class_order(self, cls: JobClass) -> Key:
        order = self.order.get(cls)
        if order is None:
            order = self.order[cls] = (self.session.policy.class_order(self.snap, cls.views[0])
                                       if self.session._uses_class_order else ())
        return order

    def _walk(self) -> tuple[Key, Key] | None:
        """Answer the jobs the order hands out, one per class between starts. Returns where a strict policy
        stopped (class order, key), or None if every class was answered."""
        rnd = self.rnd
        session = self.session
        policy = session.policy
        strict = policy.blocks_others
        may_block = policy.may_block_others
        # Whether the gate may refuse anyone (Gate.may_deny): asked once, for the settling below and the visits
        # answered without attempt().
        may_deny = type(rnd.gate).may_deny()
        order = policy.walk_order(rnd.gate, session._groups, session._entries_class, session.migrate)
        if order is None:
            # A class of gangs larger than the free GPUs waits for capacity, visit after visit, unless someone
            # may be displaced or moved for it (then the free GPUs may grow), a gate may refuse it first or it
            # may hold back the rest: what decide()'s short cut asks. A class's jobs are treated alike (the
            # decision_class() promise): if its first job may displace nobody and holds back nobody, neither
            # does a later one. Under overload that is most classes at most decisions.
            classes = session._classes.values()
            settle = (not session.migrate and not may_deny
                      and (not may_block or not any(strict(c.views[0]) for c in classes)))
            order = _HeadsOrder(classes, self._class_order if session._uses_class_order else None,
                                rnd.free.total_gpus if settle else None,
                                rnd if policy.preemptive else None)
        walk: WalkOrder = order
        settled = walk.settled
        # Where nobody moves: a gang larger than the free GPUs, or a learner larger than any server's free GPUs,
        # gets attempt()'s answer (place_at()'s first two checks) without the call, unless the job may displace
        # someone (then attempt() searches). Under overload most visits after a start are these (DRF: 33,000
        # of 38,000 on the 3,000-job trace). A gate that may refuse is asked first, as attempt() asks it: under
        # fair-fifo half the visits are refused for quota.
        quick = self.quick_answers and not session.migrate
        denied, over_quota = DENIED, OVER_QUOTA
        free, snap, gate, preemptive = rnd.free, self.snap, rnd.gate, policy.preemptive
        # Only a policy that knows a bound (srtf) is asked it here; the default's True changes nothing.
        bounded = type(policy).room_by_displacing is not Policy.room_by_displacing
        while (step := walk.next()) is not None:
            if settled:
                self._settle(settled)
            cls, i, rank, key = step
            view = cls.views[i]
            if cls.solo == "reject":
                self._reject(view)
                continue
            spec = view.spec
            result: Allocation | WaitReason | None = None
            placed = True
            if quick and not spec.elastic:
                if may_deny and gate.admit(view, spec.gpus) is denied:
                    result, placed = over_quota, False  # attempt()'s refusal: no placement tried
                else:
                    result = beyond_free(free, spec.learners, spec.gpus_per_learner)
                    if (result is not None and preemptive and policy.preemptor(snap, gate, view)
                            and (not bounded or policy.room_by_displacing(snap, gate, view))):
                        result = None  # attempt() searches: no answer without it
                    if result is None:
                        result = rnd.attempt_admitted(view)  # the gate has answered above
            if result is None:
                result, placed = rnd.attempt(view)
            if isinstance(result, Allocation):
                self.leaving.add(view.job_id)
                walk.started(cls, i, rank, key)
                continue
            runs = self.found.get(cls)
            if runs is None:
                # The first job visited is the class's first: its run covers everything before it too, so
                # it starts at () (below every key) and stays equal from one decision to the next.
                self.found[cls] = [(LOWEST, result)]
            else:
                runs.append((key, result))
            if cls.solo is None:
                walk.answered(cls)
            if placed and may_block and strict(view):
                self._settle(settled)
                return rank, key
        self._settle(settled)
        return None

    def _reject(self, view: JobView) -> None:
        """A job classified as never fitting leaves the queue, with why."""
        why = self.rnd.why_never(view)
        assert why, f"{view.job_id} was classified as never fitting"
        self.rejects.append(Reject(view.job_id, why))
        self.leaving.add(view.job_id)

    def _settle(self, settled: list[tuple[JobClass, WaitReason]]) -> None:
        """Classes the walk order answered without handing out a job (WalkOrder.settled)."""
        for cls, reason in settled:
            self.found.setdefault(cls, [(LOWEST, reason)])
        settled.clear()

    def _changes(self, blocked: tuple[Key, Key] | None, new_ids: list[str], keep: bool = False) -> list[Wait]:
        """The Waits of jobs whose reason differs from their last one; each class keeps its new runs (`keep`:
        a class not visited keeps its old ones)."""
        session = self.session
        pending = session._pending
        waits: list[Wait] = []
        found = self.found
        uses_class_order = session._uses_class_order  # else every class's order is (): no call per class
        for cls in session._classes.values():
            runs = found.get(cls, cls.reasons if keep else [])
            if blocked is not None:
                order = self._class_order(cls) if uses_class_order else ()
                if order > blocked[0]:
                    runs = [(LOWEST, LOWER_PRIORITY)]
                elif order == blocked[0]:
                    j = bisect_right(cls.keys, blocked[1])
                    if j == 0:
                        runs = [(LOWEST, LOWER_PRIORITY)]
                    elif j < len(cls.keys):
                        runs = [*runs, (cls.keys[j], LOWER_PRIORITY)]
            if runs != cls.reasons:
                self._diff(cls, cls.reasons, runs, waits)
            cls.reasons = runs
        for job_id in new_ids:
            before = pending.pop(job_id, None)
            if job_id in self.leaving:
                continue
            entry = session._entries[job_id]
            now = entry.cls.reason_at(entry.key)
            assert now is not None
            if now is not before:
                waits.append(self.session._wait(job_id, now))
        return waits

    def _diff(self, cls: JobClass, old: list[tuple[Key, WaitReason]], new: list[tuple[Key, WaitReason]],
              waits: list[Wait]) -> None:
        """Waits for the jobs of `cls` (other than new ones and those leaving) whose run changed reason."""
        pending = self.session._pending
        leaving = self.leaving
        wait = self.session._wait
        bounds = sorted({k for k, _ in old} | {k for k, _ in new})
        keys = cls.keys
        for a, b in zip(bounds, [*bounds[1:], None], strict=True):
            before = reason_at(old, a)
            now = reason_at(new, a)
            if before is now or now is None:
                continue
            lo = bisect_left(keys, a)
            hi = len(keys) if b is None else bisect_left(keys, b)
            for view in cls.views[lo:hi]:
                job_id = view.job_id
                if job_id not in pending and job_id not in leaving:
                    waits.append(wait(job_id, now))

    def _only_reasons(self, allowed: tuple[WaitReason, ...]) -> bool:
        """Does every job still waiting after this plan wait for one of `allowed`?"""
        leaving = self.leaving
        for cls in self.session._classes.values():
            for lo, hi, reason in cls.runs():
                if reason not in allowed and any(v.job_id not in leaving for v in cls.views[lo:hi]):
                    return False
        return True
