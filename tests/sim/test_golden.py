"""Every policy x placement on the bundled traces gives the stored summary.json and jobs.csv digests
(tests/sim/golden.py says how they are made and regenerated). The full matrix is slow; the default run
covers every case of the two bundled samples on their own clusters and a cross-section of the two loaded
workloads."""

from __future__ import annotations

import pytest

from tests.sim import golden

_CHEAP_LOADED = {"fifo", "fifo-strict", "srtf", "priority", "fair"}


def _default(case: golden.Case) -> bool:
    if case.workload in ("gavel", "philly"):
        return True
    if case.workload == "overload":
        return case.placement == "pack" or case.policy == "fifo" or (case.policy, case.placement) == (
            "las", "synergy")
    return case.placement == "pack" and case.policy in _CHEAP_LOADED


CASES = list(golden.cases())


def _param(case: golden.Case) -> object:
    marks = () if _default(case) else (pytest.mark.slow,)
    return pytest.param(case, id=case.name, marks=marks)


def test_the_workloads_are_the_ones_the_digests_were_made_from() -> None:
    stored = golden.stored()
    for name in golden.WORKLOADS:
        assert stored[f"workload/{name}"]["csv"] == golden.workload_digest(name), (
            f"workload {name} changed (the generator or a loader): the run digests no longer say anything")


def test_every_case_has_a_stored_digest() -> None:
    stored = golden.stored()
    missing = [c.name for c in CASES if c.name not in stored]
    assert not missing, f"no digest for {missing}: run `python -m tests.sim.golden --write` and say why"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_outputs_match_the_golden_digests(case: golden.Case) -> None:
    want = golden.stored().get(case.name)
    assert want is not None
    assert golden.digests(case) == want, f"{case.name}: summary.json or jobs.csv changed"
