"""DRF's walk leaves the tenants whose every class is pruned out of its heap (drf._SkippingProgressiveOrder) and
brings one back where the walk would have it when a class of it is unpruned: a Session walking so must give
decide()'s plans (the tenant-by-tenant progressive filling of _ProgressiveOrder) on random worlds."""

from __future__ import annotations

import pytest

from loadmaster.scheduling.policies import drf
from tests.scheduling.test_session import _check


@pytest.mark.parametrize("placement", ["pack", "spread", "proportional", "synergy"])  # (locality: walked in full)
def test_a_walk_without_the_wholly_pruned_tenants_gives_decides_plans(placement: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    back = drf._SkippingProgressiveOrder._back
    calls = [0]

    def counted(self: drf._SkippingProgressiveOrder, t: str, keys: list[drf.Key]) -> None:
        calls[0] += 1
        back(self, t, keys)

    monkeypatch.setattr(drf._SkippingProgressiveOrder, "_back", counted)
    for seed in range(40):
        _check(seed, "drf", placement, steps=40)
    assert calls[0] > 0  # tenants were left out and brought back, not only left out


def test_a_walk_gives_the_gate_the_snapshots_queued_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    # The gate's weights come from the active tenants; a Session's walk names the queued ones from its groups
    # (DrfGate.queued_tenants) instead of the snapshot's cached property: they must be the same set.
    walk_order = drf.DrfPolicy.walk_order
    walks = [0]

    def checked(self: drf.DrfPolicy, gate: drf.Gate, *args: object, **kwargs: object) -> object:
        order = walk_order(self, gate, *args, **kwargs)  # type: ignore[arg-type]
        assert isinstance(gate, drf.DrfGate) and gate.queued_tenants is not None
        assert frozenset(gate.queued_tenants) == frozenset(j.spec.tenant for j in gate.snap.queued)
        walks[0] += 1
        return order

    monkeypatch.setattr(drf.DrfPolicy, "walk_order", checked)
    for seed in range(20):
        _check(seed, "drf", "pack", steps=40)
    assert walks[0] > 0
