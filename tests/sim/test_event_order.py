"""The simulator's attempt ends (a heap of plain floats, per time a list in scheduling order) come out in the
order a heap of (time, seq, job index, token) tuples gives: time, then the order they were scheduled."""

from __future__ import annotations

import heapq
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.sim.simulator import _Run

# Steps: ("push", time offset from the clock, job index) or ("pop", time offset); few distinct times, so
# ties are common; -0.0 and 0.0 (equal, one key) both appear.
STEP = st.one_of(st.tuples(st.just("push"), st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.0]), st.integers(0, 9)),
                 st.tuples(st.just("pop"), st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0]), st.just(0)))


def drain(events: list[float], events_at: dict[float, list[tuple[int, int]]], t: float) -> list[tuple[int, int]]:
    """_Run.run()'s pop loop: every event at or before t."""
    out = []
    while events and events[0] <= t:
        out.extend(events_at.pop(heapq.heappop(events)))
    return out


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(STEP, max_size=60))
def test_same_order_as_a_tuple_heap(steps: list[tuple[str, float, int]]) -> None:
    run = SimpleNamespace(events=[], events_at={})
    tuples: list[tuple[float, int, int, int]] = []
    clock = 0.0
    seq = token = 0
    for kind, dt, idx in steps:
        if kind == "push":
            token += 1
            seq += 1
            _Run.push_event(run, clock + dt, idx, token)  # type: ignore[arg-type]
            heapq.heappush(tuples, (clock + dt, seq, idx, token))
        else:
            clock += dt
            expected = []
            while tuples and tuples[0][0] <= clock:
                _, _, i, tok = heapq.heappop(tuples)
                expected.append((i, tok))
            assert drain(run.events, run.events_at, clock) == expected
            assert (run.events[0] if run.events else None) == (tuples[0][0] if tuples else None)
    assert sorted(run.events) == sorted({t for t, _, _, _ in tuples})
    assert set(run.events_at) == set(run.events)
