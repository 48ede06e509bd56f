"""Writes of many rows as Core statements, for the control loop's batches: the ORM's flush emits one UPDATE per
distinct set of changed columns (a round that ends some jobs and starts others sent 6-8 UPDATEs of jobs) and
an INSERT with RETURNING for new rows, and spends more CPU in its unit of work than the statements cost.

update_changed() writes what was changed on ORM objects of one table in ONE executemany UPDATE (the union of
their changed columns; an object's unchanged columns in that union are written with the values it holds,
which are the row's own: the caller read the rows under lock in the same transaction), then takes the
objects out of the session, so that the ORM's flush does not write them again. insert_rows() writes plain
rows in one INSERT without RETURNING."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, inspect, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.base import NO_VALUE
from sqlalchemy.sql.dml import Update

from loadmaster.platform.store.models import Base

_KEY = "w_key"  # the bound name of the primary key (a bound name may not be a column's name in SET)
_STATEMENTS: dict[tuple[str, tuple[str, ...]], Update] = {}


def changed_columns(obj: Base) -> list[str]:
    """The column attributes of `obj` whose value differs from the one loaded (net changes only: a column set
    to the value it had is not written, as the ORM's flush would not)."""
    state = inspect(obj)
    now = state.dict
    # committed_state: the loaded value of every attribute set since (NO_VALUE when it was not loaded).
    return [key for key, was in state.committed_state.items() if was is NO_VALUE or was != now.get(key, NO_VALUE)]


def update_changed(s: Session, objs: Iterable[Base], extra: Mapping[str, Any] | None = None) -> int:
    """Write the net changes of these ORM objects (all of one mapped class, primary key `id`, not new) in
    one UPDATE executemany, with `extra` column values on every row (the change number), and expunge them.
    Objects without a net change are left in the session as they are. Returns the rows written."""
    changed: list[tuple[Base, list[str]]] = []
    keys: set[str] = set()
    for obj in objs:
        found = changed_columns(obj)
        if found:
            changed.append((obj, found))
            keys.update(found)
    if not changed:
        return 0
    table = cast(Table, type(changed[0][0]).__table__)
    extra = dict(extra or {})
    columns = tuple(sorted(keys | set(extra)))
    stmt = _statement(table, columns)
    rows = []
    for obj, _ in changed:
        row = {f"v_{key}": getattr(obj, key) for key in keys}
        row.update({f"v_{key}": value for key, value in extra.items()})
        row[_KEY] = obj.id  # type: ignore[attr-defined]
        rows.append(row)
    s.connection().execute(stmt, rows)
    for obj, _ in changed:
        s.expunge(obj)
    return len(rows)


def _statement(table: Table, columns: tuple[str, ...]) -> Update:
    """UPDATE table SET c = :v_c, ... WHERE id = :w_key, built once per table and set of columns."""
    key = (table.name, columns)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = update(table).where(table.c.id == bindparam(_KEY)).values(
            {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in columns})
        _STATEMENTS[key] = stmt
    return stmt


def insert_rows(s: Session, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """The rows (every one with the same keys) in one INSERT, no RETURNING."""
    if rows:
        s.connection().execute(insert(table), list(rows))
