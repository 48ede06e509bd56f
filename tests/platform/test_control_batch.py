"""control/batch.py on a real store: a batch's items are flushed together, and a batch whose flush fails is
made again item by item, so that only the item at fault is rolled back (with its effects) and the others
commit."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from loadmaster.platform.control.batch import Batch, commit
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Tenant


def _add_tenant(b: Batch, name: str) -> None:
    b.s.add(Tenant(name=name, gpu_quota=1, created_at=b.now))  # a name taken fails only when written
    b.after(lambda: ran.append(name))


ran: list[str] = []


def test_a_batch_whose_flush_fails_is_made_again_item_by_item(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'batch.db'}")
    try:
        commit(store, 0.0, lambda b: _add_tenant(b, "taken"))
        ran.clear()
        batch = commit(store, 1.0, lambda b: b.each(["x", "taken", "y"], _add_tenant))
        assert batch.careful and batch.failed == ["taken"]
        assert ran == ["x", "y"]  # the failed item's effect is dropped with it
        with store.session() as s:
            names = sorted(s.execute(select(Tenant.name)).scalars())
        assert names == ["taken", "x", "y"]
    finally:
        store.close()


def test_a_batch_of_good_items_is_made_once_without_savepoints(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'batch.db'}")
    try:
        ran.clear()
        batch = commit(store, 1.0, lambda b: b.each(["x", "y"], _add_tenant))
        assert not batch.careful and batch.failed == [] and ran == ["x", "y"]
    finally:
        store.close()
