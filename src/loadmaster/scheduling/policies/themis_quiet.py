"""Themis' next_change_s: after a decision that changed nothing, until when time alone cannot change one.

While no event happens (the same queued and running jobs, the same free capacity), a Themis decision reads
the clock only through these (themis.py, decide.py's walk):
1. leases: a running job may be displaced once its lease has expired (victims(): started <= clock - lease);
2. bids: a queued job accepts a slower GPU type once it has waited as long as the slowdown would cost
   (_Round.bid: a threshold on clock - queued_since); a bid also sets the speed in the job's rho;
3. the ranking: the offered set (the worst rho) and its order. A queued job makes no progress (rate 0), so
   its rho = ((clock - submit) + remaining / speed) / ideal is a line of slope 1 / ideal; the rest of the
   queue is ordered by remaining GPU-time, which does not change;
4. which running jobs an offered job may displace: those whose rho if preempted is below its own. Between
   two checkpoints of a running job, remaining + lost work is constant (the work done moves from one to the
   other), so that rho is a line of slope 1 / ideal too, which drops by checkpoint / rate at each checkpoint.

The decision is the same as long as each of these answers is. Nothing started, so every queued job was
answered on the capacity of the snapshot alone; decide() tried the offered jobs in rank order, and one that
did not fit either
- failed a bound (releasable_gpus, releasable_by_server): the GPUs held by the running jobs it may displace,
  in all or per server, plus the free ones, leave no room. Those sums only grow when a running job joins
  the set it may displace: a job leaving it, or the set's order, cannot make the bound pass;
- or walked the victims (victim_candidates, recorded in _Round.walked): releasing them in order and trying
  the placer as it went. Only the same victims in the same order are known to give the same failure.
So the answer is: the first lease to expire, the first bid to change, the first change of the offered
set's membership or order, the first running job to join the set an offered job may displace, and, for
the victims of an offered job that walked them, the first change of their order (or of the set itself)
or a checkpoint among them.

Each time is worked out from the rho computed at the decision (the same floats decide() compared) along
the lines above, shortened by a margin far above the rounding of the floats compared (1e-9 relative,
against ~1e-15), so the answer can only be early: earlier is allowed, later would be a bug.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadmaster.scheduling.policies.themis import _Round
    from loadmaster.scheduling.snapshot import JobView

_TINY = 1e-9  # themis._TINY: the same guard against a zero speed, rate or ideal
_REL = 1e-9  # the margin, relative to the values compared (and to the clock, for a time)


def _margin(t: float) -> float:
    return _REL * (abs(t) + 1.0)


def stays_above(upper: float, s_upper: float, lower: float, s_lower: float, clock: float) -> float:
    """For how long a line at `upper` now (slope s_upper) stays above one at `lower` (slope s_lower) by
    more than the margin: at least _REL x (either value then + 1), plus _REL x the clock then times the
    steeper slope (the rounding of `clock - submit` in either rho). 0 when it is not above by that now;
    inf when the gap never closes to the margin."""
    steeper = s_upper if s_upper > s_lower else s_lower
    room = (upper - lower) - _REL * ((upper if upper > lower else lower) + 1.0) - _REL * (abs(clock) + 1.0) * steeper
    if not room > 0.0:
        return 0.0
    closing = (s_lower - s_upper) + 2.0 * _REL * steeper  # the gap's shrink, and the margin's growth, per second
    return room / closing if closing > 0.0 else math.inf


class _Victim:
    """A running job as a line: its rho if preempted `at` the decision, the slope, until when the line
    holds (its next checkpoint, its duration), and how it falls at each checkpoint (`drop`, every `period`)."""

    __slots__ = ("at", "drop", "ends", "job", "next_ckpt", "period", "slope")

    def __init__(self, job: JobView, at: float, slope: float) -> None:
        self.job, self.at, self.slope = job, at, slope
        self.drop = 0.0  # how far the line falls at the next checkpoint
        self.next_ckpt = self.period = self.ends = math.inf


def _victim(rnd: _Round, v: JobView) -> _Victim:
    """v as a line (before `as_of`, e.g. while it restarts, its work is as recorded: the same line)."""
    p = rnd.policy
    clock = rnd.clock
    spec = v.spec
    rate = v.rate
    elapsed = clock - v.as_of
    work = v.work_done_s + rate * (elapsed if elapsed > 0.0 else 0.0)
    ckpt = p.checkpoint_interval_s
    effective = _TINY if rate < _TINY else rate  # what _rho_if_preempted divides by
    ideal = rnd.ideal_s(spec)
    if spec.duration_s - work > 0.0:
        # remaining + lost is constant: slope 1 / ideal, until the work reaches the duration.
        line = _Victim(v, rnd.rho_if_preempted(v), 1.0 / ideal)
        if rate > 0.0:
            ends = v.as_of + (spec.duration_s - v.work_done_s) / rate
            line.ends = ends - _margin(ends) - _REL * spec.duration_s / rate
    else:
        # Past its duration (the view's estimate ran out before the job did): remaining is clamped at 0 and
        # lost work still grows with the work: slope (1 + rate / effective) / ideal.
        line = _Victim(v, rnd.rho_if_preempted(v), (1.0 + rate / effective) / ideal)
    if rate > 0.0 and ckpt > 0:
        # The next checkpoint (work crosses a multiple of the interval: `lost = work % interval` falls to
        # 0), the margin early. Floor division agrees with % (both from one fmod), where work / interval
        # may round up onto the next multiple and miss a checkpoint just ahead.
        crossed = work // ckpt + 1.0
        nxt = v.as_of + (ckpt * crossed - v.work_done_s) / rate
        slack = _margin(nxt) + _REL * ckpt * crossed / rate
        line.next_ckpt = nxt - slack
        line.period = ckpt / rate
        line.drop = ckpt / effective / ideal
    return line


def _enters_below(v: _Victim, rho: float, slope: float, clock: float) -> float:
    """The earliest clock at which victim `v`, above an offered job's line (`rho` now, `slope`), may fall
    below it: along its own line until its next checkpoint; from then on, it stays above the line through
    its value `drop` below at that checkpoint that falls by drop / period a second, since it falls by
    `drop` at each checkpoint, one every `period`, and climbs along its slope in between. At clock + x,
    x >= 0, that lower line is at - drop x (1 - (next_ckpt - clock - x) / period) + slope x, whose bracket is
    at least the checkpoints passed by then. Past its duration it climbs faster still (_victim)."""
    along = clock + stays_above(v.at, v.slope, rho, slope, clock)
    if v.next_ckpt == math.inf:
        return along
    low = v.at - v.drop * (1.0 - (v.next_ckpt - clock) / v.period)
    return min(along, max(v.next_ckpt, clock + stays_above(low, v.slope - v.drop / v.period, rho, slope, clock)))


def _bid_until(rnd: _Round, job: JobView, valued: list[tuple[float, bool, str]]) -> float:
    """When the job's bid next changes: a slower type is accepted once clock - queued_since reaches the
    cost of its slowdown (_Round.bid, the same floats), if that is more than a lease."""
    best = valued[0][0]
    remaining = job.remaining_at(rnd.clock)
    patience = max(rnd.policy.lease_s, rnd.clock - job.queued_since)
    until = math.inf
    for e, _, _ in valued:
        cost = remaining * (1.0 / e - 1.0 / best)
        if not cost <= patience:
            at = job.queued_since + cost
            until = min(until, at - _margin(at) - _REL * cost)
    return until


def _same_line(rnd: _Round, a: JobView, b: JobView) -> bool:
    """Whether two queued jobs' rho are the same floats at every clock (equal inputs to the same
    operations): then they never cross, and their tie-break (submit, id) keeps their order."""
    sa, sb = a.spec, b.spec
    if sa.submit_time_s != sb.submit_time_s or rnd.ideal_s(sa) != rnd.ideal_s(sb):
        return False
    speed_a = max(rnd.bids[sa.job_id][1], _TINY)
    speed_b = max(rnd.bids[sb.job_id][1], _TINY)
    return a.remaining_at(rnd.clock) / speed_a == b.remaining_at(rnd.clock) / speed_b


def quiet_until(rnd: _Round) -> float:
    """Policy.next_change_s for the decision on rnd.snap (see the module's docstring)."""
    snap = rnd.snap
    clock = rnd.clock
    lease = rnd.policy.lease_s
    queued = snap.queued
    until = math.inf
    # A shell that decides every round_s (Themis: the lease) makes its next round anyway before a change
    # sooner than that: the search stops at the first such bound and answers the clock (earlier is allowed).
    enough = clock + lease

    # 1. Leases, as victims() tests them: expired when started <= clock - lease (step 4 bounds the rest).
    expired: list[JobView] = []
    leased: list[tuple[float, JobView]] = []  # (when the lease expires, the job), the margin early
    cutoff = clock - lease
    for v in snap.running:
        started = v.started_at
        if started is None or not started > cutoff:
            expired.append(v)
        else:
            at = started + lease
            leased.append((at - _margin(at), v))
    # 2. Bids (a queued job that makes progress is not a line: no skip).
    for j in queued:
        if j.rate != 0.0:
            return clock
    if not rnd.uniform_bids:
        for j in queued:
            valued = rnd.valuation(j.spec)
            if valued is not None:
                until = min(until, _bid_until(rnd, j, valued))
    if until < enough:
        return clock

    # 3. The offered set and its order: adjacent offered jobs, and the last offered one against the rest
    # (a first change of order among lines is between two that are adjacent until then).
    ranked = rnd.ranked
    k = rnd.policy.offer_count(len(queued))
    offered = ranked[:k]
    rho = [rnd.rho_of(j) for j in offered]
    slope = [1.0 / rnd.ideal_s(j.spec) for j in offered]
    if len(queued) > 1:
        pairs = [(i, offered[i + 1], rho[i + 1], slope[i + 1]) for i in range(k - 1)]
        pairs += [(k - 1, j, rnd.rho_of(j), 1.0 / rnd.ideal_s(j.spec)) for j in ranked[k:]]
        for i, below, rho_below, slope_below in pairs:
            dt = stays_above(rho[i], slope[i], rho_below, slope_below, clock)
            if dt == 0.0 and rho[i] == rho_below and _same_line(rnd, offered[i], below):
                continue
            until = min(until, clock + dt)
            if until < enough:
                return clock

    if not snap.running:
        return until
    # 4. Victims (after the ranking: dearer to bound). A running job joins the set an offered job may
    # displace by falling below the lowest offered line it is above (the offered order holds until `until`,
    # so it falls below that one first), or, below an offered line already, when its lease expires.
    falling = [-r for r in rho]  # ascending, for bisect: offered[i] has -rho falling[i]
    walked = rnd.walked
    top = max((rho[i] for i, j in enumerate(offered) if j.job_id in walked), default=None)
    inside: list[tuple[float, float, int, _Victim | None]] = []
    for expires, v in leased:
        if expires >= until:
            continue  # it may be displaced from then on only: no earlier bound
        line = _victim(rnd, v)
        i = bisect_left(falling, -line.at)  # the first offered line at or below this job
        # Below an offered line, it joins that job's set when its lease expires; above them all, once its
        # lease has expired and it has fallen below the highest.
        until = min(until, expires if i > 0 else max(expires, _enters_below(line, rho[i], slope[i], clock)))
        if until < enough:
            return clock
    rho_if_preempted = rnd.rho_if_preempted
    for v in expired:
        at = rho_if_preempted(v)
        i = bisect_left(falling, -at)
        if i == k and top is None:
            continue  # below every offered line: in every set already (leaving one, or falling, changes no bound)
        line = _victim(rnd, v)
        if i < k:
            until = min(until, _enters_below(line, rho[i], slope[i], clock))
        if top is not None and line.at < top:
            # In a walked set: its order there (below) holds along its line, to its next checkpoint or
            # its duration (then it climbs faster).
            inside.append((line.at, line.slope, 0, line))
            until = min(until, line.next_ckpt, line.ends)
        if until < enough:
            return clock
    if top is not None:
        # The walked victims' order, and each walked offered job's place among them: every adjacent pair.
        inside += [(rho[i], slope[i], 1, None) for i, j in enumerate(offered) if j.job_id in walked]
        inside.sort(key=lambda e: (e[0], e[2]))
        for (lo, s_lo, _, _), (hi, s_hi, _, _) in pairwise(inside):
            until = min(until, clock + stays_above(hi, s_hi, lo, s_lo, clock))
            if until < enough:
                return clock
    return until
