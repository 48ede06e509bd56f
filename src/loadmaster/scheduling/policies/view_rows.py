"""Numbers of running job views kept as columns of one matrix, each view's computed once.

A shell such as the simulator hands a policy a new tuple of running views after every plan that started or
ended a job, but most views in it are the same objects as in the tuple before (a view is immutable while
its job runs unchanged). Building per-job arrays afresh for each tuple costs a pass over every view per
column; here a view's column is computed once, when it is first seen, and a tuple's arrays are one gather
of the kept columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.scheduling.snapshot import JobView

# The numbers of a view not seen before (`rows` of them).
Fill = Callable[[JobView], Sequence[float]]


class ViewRows:
    """Per-view columns of `rows` numbers, by view identity (an entry holds its view, so the id cannot be
    reused by another object while the entry lives). When full it starts afresh: the views of a run come
    and go, and a stale one is never asked for again."""

    def __init__(self, rows: int, fill: Fill, capacity: int = 4096) -> None:
        if rows <= 0 or capacity <= 0:
            raise ValueError(f"ViewRows needs rows and capacity > 0, got rows={rows} capacity={capacity}")
        self._fill = fill
        self._m = np.empty((rows, capacity))
        self._slots: dict[int, int] = {}  # id(view) -> its column
        self._views: list[JobView] = []  # the views of the columns handed out: held, so their ids stay theirs
        self._used = 0  # columns handed out (a view listed twice takes two; the first is then unused)

    def gather(self, views: Sequence[JobView]) -> npt.NDArray[np.float64]:
        """The columns of `views`, in their order: shape (rows, len(views))."""
        slots = self._slots
        # Iterated in C (map), not in Python: this runs over every running view whenever they change. A view
        # not seen yet has no slot: None, which fromiter refuses.
        try:
            cols = np.fromiter(map(slots.get, map(id, views)), np.intp, len(views))
        except TypeError:
            # A hit is always this view: its entry keeps the view alive, so no other object has its id.
            self._add(views, [v for v in views if id(v) not in slots])
            cols = np.fromiter(map(slots.get, map(id, views)), np.intp, len(views))
        out: npt.NDArray[np.float64] = self._m.take(cols, axis=1)
        return out

    def _add(self, views: Sequence[JobView], missing: list[JobView]) -> None:
        slots = self._slots
        used = self._used
        if used + len(missing) > self._m.shape[1]:
            # Full: start afresh with this tuple's views only (growing when they alone do not fit).
            slots.clear()
            self._views.clear()
            used = 0
            missing = list(views)
            if len(missing) > self._m.shape[1]:
                self._m = np.empty((self._m.shape[0], 2 * len(missing)))
        m, fill = self._m, self._fill
        for k, v in enumerate(missing):
            slots[id(v)] = used + k
            self._views.append(v)
            m[:, used + k] = fill(v)
        self._used = used + len(missing)
