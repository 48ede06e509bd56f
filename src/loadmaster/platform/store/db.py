"""Open the store: an engine for a database URL, with the schema migrated to the newest revision.

SQLite (the default, a file under the user's data directory) and PostgreSQL pass the same tests. Schema
changes go only through the Alembic migrations in ./migrations, applied at every start.

A store that is busy (SQLite locked past its busy timeout, a PostgreSQL lock_timeout, a connection lost)
raises errors that transient() recognises: the control loop retries them at its next round, the API answers
503 with Retry-After. Both timeouts are bounded so that nobody waits on a lock for ever: SQLite's busy
timeout is 10 s (`?timeout=SECONDS` in the URL changes it), PostgreSQL's lock_timeout 5 s (`?options=-c
lock_timeout=MS` in the URL changes it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from loadmaster.platform.store.changes import track
from loadmaster.platform.store.plain_read import PlainRead

MIGRATIONS = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_S = 10.0
PG_LOCK_TIMEOUT_MS = 5000


def transient(err: BaseException) -> bool:
    """True for store errors that a later try may not meet: locks held too long, a lost connection, an
    exhausted pool, a serialisation failure. Not for errors in the statement itself."""
    if isinstance(err, OperationalError | InterfaceError | PoolTimeout):
        return True
    return isinstance(err, DBAPIError) and bool(err.connection_invalidated)


class StoreError(RuntimeError):
    """The store cannot be opened; the message says why and what to do."""


def default_url() -> str:
    import platformdirs

    path = Path(platformdirs.user_data_dir("loadmaster")) / "loadmaster.db"
    return f"sqlite:///{path}"


def normalise_url(url: str) -> str:
    """Accept the URLs people paste: postgresql:// means psycopg 3 here (SQLAlchemy's default is psycopg2)."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_pragmas(busy_timeout_s: float) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The driver's own transaction handling starts a transaction only at the first write, so a read-then-
        # write would read outside it and could act on a stale row. Take control: BEGIN is emitted in _begin().
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        # WAL: readers (the API) do not block the writer (the control loop); NORMAL is durable across a
        # process crash (kill -9), which is the failure the platform promises to survive.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    return on_connect


IMMEDIATE = "loadmaster_begin_immediate"


def _sqlite_begin(conn: Any) -> None:
    # A read-modify-write transaction takes the write lock up front (BEGIN IMMEDIATE) so that what it read
    # cannot change before it writes; plain reads stay deferred and never block the writer (WAL).
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(IMMEDIATE) else "BEGIN")


IDLE_PING_S = 1.0
_CHECKED_IN = "loadmaster_checked_in"  # a pooled connection's info key: when it was last handed back


def _ping_when_idle(engine: Engine) -> None:
    """A PostgreSQL connection that waited in the pool longer than IDLE_PING_S is pinged before it is used,
    and replaced if the ping fails (SQLAlchemy's pessimistic recipe, as pool_pre_ping, but not on every
    checkout): pool_pre_ping's round trip on each checkout was paid by every transaction, a group commit's
    and each control-loop step's, though a connection handed back a moment ago is there. One lost within
    that moment (the server restarted) fails its transaction as a transient() error, which the API and the
    loop try again, and SQLAlchemy then drops every connection older than the failure."""

    def checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_CHECKED_IN] = time.monotonic()

    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN)
        if since is None or time.monotonic() - since < IDLE_PING_S:  # just connected, or just used
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as err:  # the pool drops it and tries a new connection
            raise DisconnectionError(f"a pooled connection idle {time.monotonic() - since:.0f} s is gone: {err}"
                                     ) from err

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _pg_connect_args(url: URL) -> dict[str, str]:
    return {} if "options" in url.query else {"options": f"-c lock_timeout={PG_LOCK_TIMEOUT_MS}"}


def make_engine(url: str) -> Engine:
    url = normalise_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"--db {url!r} is not a database URL; use sqlite:///PATH or postgresql://HOST/DB") from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            busy = float(parsed.query.get("timeout", SQLITE_BUSY_TIMEOUT_S))  # type: ignore[arg-type]
        except ValueError:
            raise StoreError(f"--db {url!r}: timeout= must be a number of seconds") from None
        engine = create_engine(parsed.difference_update_query(["timeout"]),
                               connect_args={"check_same_thread": False, "timeout": busy})
        event.listen(engine, "connect", _sqlite_pragmas(busy))
        event.listen(engine, "begin", _sqlite_begin)
    elif parsed.get_backend_name() == "postgresql":
        # A lock held too long (a stuck transaction, an operator's LOCK TABLE) fails the waiting statement
        # instead of stalling the loop or an API worker for ever; the URL's own options win.
        engine = create_engine(url, pool_size=10, max_overflow=20, pool_timeout=10,
                               connect_args=_pg_connect_args(parsed))
        _ping_when_idle(engine)
    else:
        raise StoreError(f"--db {url!r}: only sqlite:// and postgresql:// databases are supported")
    return engine


def alembic_config(engine: Engine) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is there)."""
    from alembic import command

    command.upgrade(alembic_config(engine), "head")


@dataclass
class Store:
    engine: Engine
    sessions: sessionmaker[Session]
    # Sessions that take SQLite's write lock at BEGIN (read-modify-write); the same as `sessions` elsewhere.
    locking: sessionmaker[Session]
    # Reads on driver connections of their own (plain_read()), closed with the store.
    reads: list[PlainRead] = field(default_factory=list)
    # Reads that need no transaction of their own (reading()): each statement sees every commit made before
    # it, as a READ COMMITTED transaction's statements do anyway. On PostgreSQL an engine of its own whose
    # connections stay in autocommit: psycopg sends BEGIN as a round trip of its own and the pool a ROLLBACK
    # when a connection is handed back, two of the four round trips of the control loop's per-round sync
    # (switching a pooled connection to autocommit and back cost more than it saved). SQLite: the engine.
    reader: Engine | None = None

    @classmethod
    def open(cls, url: str | None = None, *, migrate_schema: bool = True) -> Store:
        engine = make_engine(url or default_url())
        try:
            if migrate_schema:
                migrate(engine)
        except Exception as err:  # connection refused, permissions, a newer schema...
            engine.dispose()
            raise StoreError(f"cannot open the store at {engine.url.render_as_string(hide_password=True)}: "
                             f"{err.__class__.__name__}: {err}") from err
        return cls.of(engine)

    @classmethod
    def of(cls, engine: Engine) -> Store:
        """A store over an engine whose schema is migrated."""
        sessions = sessionmaker(engine, expire_on_commit=False)
        locking = sessionmaker(engine.execution_options(**{IMMEDIATE: True}), expire_on_commit=False) \
            if engine.dialect.name == "sqlite" else sessions
        for factory in {id(sessions): sessions, id(locking): locking}.values():
            track(factory)
        reader = engine
        if engine.dialect.name == "postgresql":  # no connection is made until the first read
            # Its reads wait on the same lock_timeout (an operator's LOCK TABLE fails them, never stalls the loop).
            reader = create_engine(engine.url, isolation_level="AUTOCOMMIT", pool_size=2, max_overflow=8,
                                   pool_timeout=10, connect_args=_pg_connect_args(engine.url))
            _ping_when_idle(reader)
        return cls(engine, sessions, locking, reader=reader)

    @contextmanager
    def session(self, *, for_update: bool = False) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises.

        for_update: the block reads rows and then changes them depending on what it read. On SQLite the
        transaction then takes the write lock at its start; on PostgreSQL use select(...).with_for_update()
        for the rows themselves (row locks need no special transaction)."""
        with (self.locking if for_update else self.sessions).begin() as s:
            yield s

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads that need no transaction of their own (see `reader`)."""
        with (self.reader or self.engine).connect() as conn:
            yield conn

    def plain_read(self, make: Callable[[Engine], PlainRead]) -> PlainRead:
        """A PlainRead on this store's engine (`make`: e.g. tenants.token_reader), closed by close()."""
        read = make(self.engine)
        self.reads.append(read)
        return read

    def tables(self) -> list[str]:
        return sorted(inspect(self.engine).get_table_names())

    def close(self) -> None:
        for read in self.reads:
            read.close()
        if self.reader is not None and self.reader is not self.engine:
            self.reader.dispose()
        self.engine.dispose()
