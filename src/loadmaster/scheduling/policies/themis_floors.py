"""Themis' running jobs by a floor under their rho if preempted, kept across snapshots.

_Round.victims() needs the running jobs whose rho if preempted is below the worst offered rho; under overload
that is a fifth of them or less, yet valuing a job costs the same whether it makes the list or not. Between
two of its own events (start, checkpoint restart, end) a running job's view does not change, and its rho if
preempted at any clock at or after `as_of` is at least

    F / ideal,  F = (as_of - submit) + restart + (duration - work_done) / rate,

since T_shared = (clock - submit) + restart + (remaining + lost) / rate, remaining = duration - work_done -
rate x (clock - as_of) (or 0, which is more) and lost >= 0 (rate: the same guarded rate _rho_if_preempted
divides by). ideal = duration x max(1, gpus / share) (or a tiny floor), so F / ideal is at least F / duration
for a gang no wider than the share and F x share / (duration x gpus) for a wider one. Both are a number per
view times a factor common to all, so two lists sorted by them, kept in step with the running tuple, give by
bisection every job that may be below a given rho: the union of two prefixes. Only those are valued exactly.

A view whose `as_of` is still ahead (a job paying its restart) is not on the lists: its progress is clamped
until then, and F would be too high. It is a candidate at every ask until the clock reaches its `as_of`.

Floats: F and the exact value are sums of the same magnitudes; the margins (1e-9 of the static terms, 1e-8 of
the clock over the smallest ideal seen) are far above their rounding (~1e-16 relative), and only ever let more
jobs through to the exact test, never fewer.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from loadmaster.scheduling.snapshot import JobView

_TINY = 1e-9  # themis._TINY
_REL = 1e-9  # the margin on the static terms of F
_CLOCK_REL = 1e-8  # the margin on the terms that grow with the clock (clock - submit, rate x elapsed)


class VictimFloors:
    """Running views on two lists, sorted by F / duration and by F / (duration x gpus) (see the module).

    A view that stops running (its job ended, was stopped, or has a new view) is not taken off the lists at
    once: each ask passes over it (it is not among the running views any more), and the lists are swept
    when they hold as many such views as live ones. Most views start and end between two asks."""

    __slots__ = ("_a", "_b", "_ckpt", "_late", "_live", "_min_d", "_min_dg", "_restart", "_running", "_valid")

    def __init__(self) -> None:
        self._running: tuple[JobView, ...] | None = None  # the tuple last asked about
        self._valid = False  # whether every view of _live is on the lists or in _late
        self._live: dict[int, JobView] = {}  # id(view) -> view: the running views at the last ask
        # (floor, id, GPUs, view): ids are unique among live views, and a view's id is never reused while
        # it is on a list (the list holds it), so views are never compared.
        self._a: list[tuple[float, str, int, JobView]] = []  # by F / duration
        self._b: list[tuple[float, str, int, JobView]] = []  # by F / (duration x gpus), gangs of 1 GPU or more
        self._late: dict[int, JobView] = {}  # views whose as_of was ahead of the clock when seen
        self._min_d = float("inf")  # the smallest max(duration, tiny) ever put on _a (the margin's divisor)
        self._min_dg = float("inf")  # the same for duration x gpus on _b
        self._ckpt = self._restart = float("nan")

    def candidates(self, running: tuple[JobView, ...], clock: float, share: float, top: float, ckpt: float,
                   restart: float) -> list[JobView] | None:
        """The running views whose rho if preempted at `clock` may be below `top` (a superset), or None when
        the lists would cost more than they save (many views new since the last ask): then value them all."""
        if not self._sync(running, clock, ckpt, restart):
            return None
        live = self._live
        out: list[JobView] = []
        late = self._late
        if late:
            for key, v in list(late.items()):
                if live.get(key) is not v:
                    del late[key]
                elif v.as_of <= clock:
                    del late[key]
                    self._insert(v)
                else:
                    out.append(v)
        bound = top + _REL * abs(top)
        a = self._a
        cut = bound + _CLOCK_REL * (abs(clock) + 1.0) / self._min_d
        if not share > 0:  # no gang is wider than a share
            out += [e[3] for e in a[:bisect_left(a, (cut,))] if live.get(id(e[3])) is e[3]]
            return out
        # F / ideal is F / duration for a gang no wider than the share, F x share / (duration x gpus) for a
        # wider one: each job is taken from the list that holds its own floor, so none is taken twice.
        out += [e[3] for e in a[:bisect_left(a, (cut,))] if e[2] <= share and live.get(id(e[3])) is e[3]]
        b = self._b
        cut = bound / share + _CLOCK_REL * (abs(clock) + 1.0) / self._min_dg
        out += [e[3] for e in b[:bisect_left(b, (cut,))] if e[2] > share and live.get(id(e[3])) is e[3]]
        return out

    def _sync(self, running: tuple[JobView, ...], clock: float, ckpt: float, restart: float) -> bool:
        """Bring the lists up to `running`; False where they are not worth keeping for it."""
        if running is self._running and self._valid:
            return True
        if ckpt != self._ckpt or restart != self._restart:
            self._ckpt, self._restart = ckpt, restart
            self._valid = False
            self._live = {}
            self._running = None
        if self._running is None:
            # The first ask: nothing to compare with yet, and a shell that builds new views for every
            # decision (a fresh policy per call) should not pay for more than remembering the tuple.
            self._running = running
            return False
        current = dict(zip(map(id, running), running, strict=True))
        seen = self._live or dict(zip(map(id, self._running), self._running, strict=True))  # the first ask: its tuple
        new = current.keys() - seen.keys()
        self._live = current
        self._running = running
        # A new view costs about ten times what valuing it does: the lists pay only when few are new.
        if len(new) * 16 > len(current):
            self._valid = False
            return False
        if self._valid:
            if len(self._a) > 2 * len(current) + 64:
                self._a = [e for e in self._a if current.get(id(e[3])) is e[3]]
                self._b = [e for e in self._b if current.get(id(e[3])) is e[3]]
            for key in new:
                self._add(current[key], clock)
            return True
        # Few views new since the last ask, which did without the lists: the running set holds still from
        # here on (a simulator, a shell between events), so the lists are made.
        self._a, self._b, self._late = [], [], {}
        for v in running:
            self._add(v, clock)
        self._valid = True
        return True

    def _add(self, v: JobView, clock: float) -> None:
        if v.as_of > clock:
            self._late[id(v)] = v
        else:
            self._insert(v)

    def _insert(self, v: JobView) -> None:
        spec = v.spec
        rate = v.rate
        effective = _TINY if rate < _TINY else rate
        duration = spec.duration_s
        f = (v.as_of - spec.submit_time_s) + self._restart + (duration - v.work_done_s) / effective
        f -= _REL * (abs(v.as_of) + abs(spec.submit_time_s) + abs(self._restart)
                     + (abs(duration) + abs(v.work_done_s) + abs(self._ckpt)) / effective)
        d = _TINY if duration < _TINY else duration
        gpus = spec.learners * spec.gpus_per_learner
        job_id = spec.job_id
        insort(self._a, (f / d, job_id, gpus, v))
        if d < self._min_d:
            self._min_d = d
        if gpus > 0:
            insort(self._b, (f / (d * gpus), job_id, gpus, v))
            if d * gpus < self._min_dg:
                self._min_dg = d * gpus
