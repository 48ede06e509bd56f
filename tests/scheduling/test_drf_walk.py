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
