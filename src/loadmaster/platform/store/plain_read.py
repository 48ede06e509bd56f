"""One prebuilt SELECT run straight on a driver connection of its own, in autocommit.

For a read made on every request (the API's token check): an Engine connection costs more than the read
itself (the pool's checkout, on PostgreSQL its ping of an idle connection, a BEGIN, the result machinery). Here the
statement is compiled once and its rows converted by the column types' own result processors, so a row
reads as it would through SQLAlchemy. Autocommit: no transaction outlives a read, so each read sees every
commit made before it (a token revoked fails at its next request). Driver errors are raised as SQLAlchemy's
(a lost or busy store is a transient() error, answered 503 by the API); after a lost connection the read is
tried once more on a new one, as the pool's pre-ping would have.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, Select
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.pool import PoolProxiedConnection


class PlainRead:
    def __init__(self, engine: Engine, statement: Select[Any]) -> None:
        self.engine = engine
        dialect = engine.dialect
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self._positional = tuple(compiled.positiontup or ()) if compiled.positional else None
        self._types = [c.type.dialect_impl(dialect) for c in statement.selected_columns]
        self._convert: list[Any] | None = None  # each column's processor, for the driver's type codes
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        self._conn: PoolProxiedConnection | None = None

    def first(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """The first row for these bound parameters (every one the statement names), or None."""
        args: Any = tuple(params[name] for name in self._positional) if self._positional is not None else params
        with self._lock:
            try:
                row = self._fetch(args)
            except self.engine.dialect.loaded_dbapi.Error as err:
                if not self._lost(err):
                    raise self._wrapped(err, args) from err
                try:  # the connection was lost (the database restarted): once more on a new one
                    row = self._fetch(args)
                except self.engine.dialect.loaded_dbapi.Error as again:
                    self._lost(again)
                    raise self._wrapped(again, args) from again
        if row is None:
            return None
        assert self._convert is not None
        return tuple(value if convert is None else convert(value) for convert, value in zip(self._convert, row,
                                                                                            strict=True))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.invalidate()  # closed, never handed back to the pool in autocommit
                self._conn = None

    def _fetch(self, args: Any) -> Any:
        if self._conn is None:
            self._conn = self._open()
        cur = self._conn.cursor()
        try:
            cur.execute(self.sql, args)
            rows = cur.fetchall()  # to the end: SQLite holds its read snapshot while a statement is open
            if self._convert is None:  # as SQLAlchemy's result does: by the type codes the driver reports
                dialect = self.engine.dialect
                self._convert = [t.result_processor(dialect, d[1])
                                 for t, d in zip(self._types, cur.description, strict=True)]
        finally:
            cur.close()
        return rows[0] if rows else None

    def _open(self) -> PoolProxiedConnection:
        conn = self.engine.raw_connection()
        try:
            driver: Any = conn.driver_connection
            if self.engine.dialect.name == "postgresql":
                driver.rollback()  # the pool's ping (store/db.py) may have opened a transaction
                driver.autocommit = True
            # SQLite's connections are in autocommit already (store/db.py: isolation_level None, BEGIN by hand).
        except BaseException:
            conn.invalidate()
            raise
        return conn

    def _lost(self, err: BaseException) -> bool:
        """Drop the connection after an error; whether the error was the connection's loss."""
        conn, self._conn = self._conn, None
        if conn is None:
            return False
        lost = self.engine.dialect.is_disconnect(err, conn.driver_connection, None)  # type: ignore[arg-type]
        conn.invalidate()
        return bool(lost)

    def _wrapped(self, err: Exception, args: Any) -> StatementError:
        return DBAPIError.instance(self.sql, args, err, self.engine.dialect.loaded_dbapi.Error,
                                   dialect=self.engine.dialect)
