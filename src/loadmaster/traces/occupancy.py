"""The cluster's GPU occupancy over time, rebuilt from the attempts a trace records.

The state is piecewise constant between change points (attempt starts and ends), so it is kept per
segment: busy GPUs in the cluster and per virtual cluster, and, per server, how many servers had at least
c GPUs free. Questions about an interval (how long was this VC at its share while that job waited?) are
then answered with prefix integrals over segments, never by stepping through time.

What is inferred, and how (`Occupancy.notes` counts each case for the trace at hand):
- An attempt without a recorded placement (Philly logs machines for the last attempt only) holds the
  job's GPU count in the cluster and VC totals, on no particular server: per-server free GPUs are then
  over-estimated while it runs.
- An attempt without a start or an end is left out (it cannot be placed in time).
- A server is taken to have max(its listed GPUs, the GPUs the log shows in use on it): Philly's
  official machine list gives 2 GPUs to servers the log shows running 8. A server the list lacks gets
  the GPUs the log shows.
- Occupancy only counts the trace's own jobs. A sample of a cluster's jobs leaves the rest of the load
  out, so free GPUs are over-estimated; `coverage` says how much of the capacity the trace accounts for.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.traces.history import History, Placement

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_GPU_NAME = re.compile(r"gpu(\d+)$")


@dataclass(frozen=True)
class Occupancy:
    """Segment k is [t[k], t[k+1]); every array indexed by segment has len(t) - 1 entries."""

    t: FloatArray
    busy: IntArray  # GPUs held in the whole cluster
    vc_busy: dict[str, IntArray]  # GPUs held per virtual cluster (tenant)
    servers_free: IntArray  # [c, k]: servers with at least c GPUs free (c = 0..max_server_gpus)
    server_gpus: dict[str, int]  # capacity per server, after the corrections in `notes`
    notes: list[str] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)

    @property
    def capacity(self) -> int:
        return sum(self.server_gpus.values())

    @property
    def max_server_gpus(self) -> int:
        return int(self.servers_free.shape[0]) - 1

    @property
    def dt(self) -> FloatArray:
        return np.diff(self.t)

    def fits(self, shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
        """Per segment: could a gang of this shape (GPUs per server, largest first) be placed on free GPUs,
        one part per distinct server? By Hall's theorem for these nested sets, yes iff for every part size
        c, the parts needing >= c GPUs are no more than the servers with >= c free."""
        ok = np.ones(len(self.t) - 1, dtype=bool)
        for c in set(shape):
            if c > self.max_server_gpus:
                return np.zeros_like(ok)
            ok &= self.servers_free[c] >= sum(1 for part in shape if part >= c)
        return ok

    def integral(self, values: npt.ArrayLike) -> FloatArray:
        """Prefix integral of a per-segment value: P[k] = sum over segments before k of value * duration."""
        return np.concatenate(([0.0], np.cumsum(np.asarray(values, dtype=float) * self.dt)))

    def integrate(self, values: npt.ArrayLike, start: FloatArray, end: FloatArray) -> FloatArray:
        """Integral of a per-segment value over [start_i, end_i) for each i (clamped to the timeline)."""
        v = np.asarray(values, dtype=float)
        prefix = self.integral(v)
        return self._at(prefix, v, np.asarray(end, dtype=float)) - self._at(prefix, v, np.asarray(start, dtype=float))

    def _at(self, prefix: FloatArray, v: FloatArray, x: FloatArray) -> FloatArray:
        x = np.clip(x, self.t[0], self.t[-1])
        k = np.clip(np.searchsorted(self.t, x, side="right") - 1, 0, len(v) - 1)
        return prefix[k] + v[k] * (x - self.t[k])


def packed_shape(gpus: int, server_gpus: int) -> tuple[int, ...]:
    """The tightest placement of a gang: as few servers as possible, largest part first."""
    if server_gpus <= 0 or gpus <= 0:
        return ()
    full, rest = divmod(gpus, server_gpus)
    return (server_gpus,) * full + ((rest,) if rest else ())


def shape_of(placement: Iterable[Placement]) -> tuple[int, ...]:
    return tuple(sorted((len(p.gpus) for p in placement), reverse=True))


def rebuild(history: History, cluster: Cluster | None) -> Occupancy:
    """Occupancy of the trace's recorded attempts on `cluster` (or on the servers the log names)."""
    notes: list[str] = []
    server_gpus = _server_capacity(history, cluster, notes)
    t0 = min((j.submit_time_s for j in history.workload.jobs), default=0.0)
    events: list[tuple[float, int, str, tuple[Placement, ...]]] = []  # (time, +/-gpus, vc, placement)
    untimed = unplaced = 0
    for job in history.jobs:
        for a in job.attempts:
            if a.start_s is None or a.end_s is None:
                untimed += 1
                continue
            if a.end_s <= a.start_s:
                continue
            gpus = a.gpus if a.placement else job.spec.gpus
            unplaced += not a.placement
            events.append((a.start_s, gpus, job.spec.tenant, a.placement))
            events.append((a.end_s, -gpus, job.spec.tenant, a.placement))
    if untimed:
        notes.append(f"{untimed} attempts lack a start or an end time: left out of the occupancy")
    if unplaced:
        notes.append(f"{unplaced} attempts have no recorded machines: counted in the cluster and VC totals "
                     "with the job's GPU count, on no particular server (per-server free GPUs are "
                     "over-estimated while they run)")
    # Ends sort before starts at the same instant: a GPU freed at t is free for a start at t.
    events.sort(key=lambda e: (e[0], e[1]))
    t_end = max((e[0] for e in events), default=t0)
    points = np.unique(np.array([t0, t_end, *(e[0] for e in events)], dtype=float))
    if len(points) == 1:
        points = np.array([t0, t0 + 1.0])
    busy, vc_busy = _totals(events, points, history)
    servers_free, overbooked = _servers_free(events, points, server_gpus)
    checks = {"gpus_double_booked": _double_booked(history), "server_overbooked_events": overbooked}
    if checks["gpus_double_booked"]:
        notes.append(f"{checks['gpus_double_booked']} times an attempt was logged on a GPU another attempt "
                     "held at the same time (the log is inconsistent there)")
    return Occupancy(points, busy, vc_busy, servers_free, server_gpus, notes, checks)


def _server_capacity(history: History, cluster: Cluster | None, notes: list[str]) -> dict[str, int]:
    listed = {n.name: n.gpus for n in cluster.nodes} if cluster is not None else {}
    seen: dict[str, int] = defaultdict(int)
    for job in history.jobs:
        for a in job.attempts:
            for p in a.placement:
                seen[p.machine] = max(seen[p.machine], _gpus_needed(p.gpus))
    raised = sorted(m for m, g in seen.items() if m in listed and g > listed[m])
    missing = sorted(m for m in seen if m not in listed)
    if raised:
        notes.append(f"{len(raised)} servers are used with more GPUs than the machine list gives them "
                     f"(e.g. {raised[0]}: listed {listed[raised[0]]}, used {seen[raised[0]]}): their capacity "
                     "is taken from the log")
    if missing and cluster is not None:
        notes.append(f"{len(missing)} servers in the log are not in the cluster ({missing[0]}, ...): added "
                     "with the GPUs the log shows on them")
    return {**listed, **{m: max(g, listed.get(m, 0)) for m, g in seen.items()}}


def _gpus_needed(names: tuple[str, ...]) -> int:
    """A server's GPU count implied by the GPU names used on it: 'gpu7' means at least 8."""
    indices = [int(m.group(1)) for m in map(_GPU_NAME.match, names) if m]
    return max(len(set(names)), max(indices, default=-1) + 1)


def _totals(events: list[tuple[float, int, str, tuple[Placement, ...]]], points: FloatArray,
            history: History) -> tuple[IntArray, dict[str, IntArray]]:
    """Busy GPUs per segment, for the cluster and per VC (a cumulative sum of the deltas)."""
    k = np.searchsorted(points, np.array([e[0] for e in events], dtype=float)) if events else np.array([], int)
    deltas = np.array([e[1] for e in events], dtype=np.int64)
    vcs = np.array([e[2] for e in events], dtype=object)
    n = len(points) - 1

    def series(mask: npt.NDArray[np.bool_] | None) -> IntArray:
        acc = np.zeros(len(points), dtype=np.int64)
        np.add.at(acc, k if mask is None else k[mask], deltas if mask is None else deltas[mask])
        return np.cumsum(acc)[:n]

    per_vc = {vc: series(vcs == vc) for vc in sorted({j.tenant for j in history.workload.jobs})}
    return series(None), per_vc


def _servers_free(events: list[tuple[float, int, str, tuple[Placement, ...]]], points: FloatArray,
                  server_gpus: dict[str, int]) -> tuple[IntArray, int]:
    """[c, k] = servers with at least c free GPUs during segment k. One sweep over placement changes;
    each change moves one server between free-GPU counts of a histogram, so the cost follows the number
    of placements, not servers x time."""
    top = max(server_gpus.values(), default=0)
    free = dict(server_gpus)
    hist = np.zeros(top + 1, dtype=np.int64)
    for g in free.values():
        hist[g] += 1
    out = np.empty((top + 1, len(points) - 1), dtype=np.int64)  # [c, k]: servers with exactly c free
    overbooked = 0
    used: Counter[str] = Counter()
    i = 0
    for k in range(len(points) - 1):
        while i < len(events) and events[i][0] <= points[k]:
            _, delta, _, placement = events[i]
            sign = 1 if delta > 0 else -1
            for p in placement:
                before = max(0, server_gpus[p.machine] - used[p.machine])
                used[p.machine] += sign * len(p.gpus)
                after = max(0, server_gpus[p.machine] - used[p.machine])
                overbooked += used[p.machine] > server_gpus[p.machine]
                hist[before] -= 1
                hist[after] += 1
            i += 1
        out[:, k] = hist
    # Servers with exactly c free -> with at least c free: one cumulative sum over the whole table.
    return np.cumsum(out[::-1], axis=0)[::-1], overbooked


def _double_booked(history: History) -> int:
    """Times an attempt starts on a GPU (server, name) before the previous holder of that GPU ended."""
    held: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for job in history.jobs:
        for a in job.attempts:
            if a.start_s is None or a.end_s is None:
                continue
            for p in a.placement:
                for g in p.gpus:
                    held[(p.machine, g)].append((a.start_s, a.end_s))
    clashes = 0
    for spans in held.values():
        spans.sort()
        last_end = -np.inf
        for s, e in spans:
            clashes += s < last_end
            last_end = max(last_end, e)
    return clashes
