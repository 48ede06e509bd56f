"""A fault-injecting wrapper around a real store: the statements and commits of chosen threads fail as a
busy store's do (SQLite's "database is locked" past its busy timeout, PostgreSQL's lock_timeout), at random
or every time, while it is armed. Nothing else about the store changes: the same SQLite file or PostgreSQL
database, the same driver, the same transactions (a failed statement or commit rolls its transaction back,
as the real error does)."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from loadmaster.platform.store.db import Store

WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class StoreFaults:
    store: Store
    rate: float = 1.0  # the chance that an eligible statement or commit fails while armed
    seed: int = 0
    writes_only: bool = True  # reads go through (a busy SQLite answers reads in WAL mode)
    injected: int = 0
    seen: int = 0  # eligible statements and commits met while armed
    _armed: set[int] = field(default_factory=set)  # thread idents
    _everywhere: bool = False
    _spared: set[int] = field(default_factory=set)
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        for engine in self._engines():
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "commit", self._commit)

    def _engines(self) -> list[Any]:
        # The store's reads without a transaction go through an engine of their own on PostgreSQL (Store.reader)
        reader = self.store.reader
        return [self.store.engine] if reader is None or reader is self.store.engine else [self.store.engine, reader]

    def close(self) -> None:
        for engine in self._engines():
            event.remove(engine, "before_cursor_execute", self._statement)
            event.remove(engine, "commit", self._commit)

    @contextmanager
    def armed(self, rate: float | None = None) -> Iterator[None]:
        """Faults in this thread while the block runs."""
        before = self.rate
        if rate is not None:
            self.rate = rate
        self._armed.add(threading.get_ident())
        try:
            yield
        finally:
            self._armed.discard(threading.get_ident())
            self.rate = before

    @contextmanager
    def everywhere(self, rate: float | None = None, spare: tuple[int | None, ...] = ()) -> Iterator[None]:
        """Faults in every thread but `spare` (and this one) while the block runs: the API's workers."""
        before = self.rate
        if rate is not None:
            self.rate = rate
        self._spared = {i for i in spare if i is not None} | {threading.get_ident()}
        self._everywhere = True
        try:
            yield
        finally:
            self._everywhere = False
            self.rate = before

    def _fire(self) -> bool:
        me = threading.get_ident()
        if me not in self._armed and not (self._everywhere and me not in self._spared):
            return False
        with self._lock:
            self.seen += 1
            if self._rng.random() >= self.rate:
                return False
            self.injected += 1
            return True

    def _error(self, statement: str) -> OperationalError:
        return OperationalError(statement, None, sqlite3.OperationalError(
            "database is locked (injected by the fault wrapper)"))

    def _statement(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
        verb = statement.lstrip().split(" ", 1)[0].upper()
        if (not self.writes_only or verb in WRITES) and self._fire():
            raise self._error(statement)

    def _commit(self, conn: Any) -> None:
        if self._fire():
            raise self._error("COMMIT")
