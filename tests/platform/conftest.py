"""Store fixtures: every store test runs on a real SQLite file and on the real PostgreSQL server
(127.0.0.1:5432, trust auth). Each PostgreSQL test gets a database of its own, created and dropped here,
so tests and concurrent runs never see each other's rows."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.platform.control_fixtures import Env

PG_ADMIN_URL = os.environ.get("LOADMASTER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_admin() -> object:
    import psycopg

    return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = f"lm_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = _pg_admin()
    except Exception as err:  # the suite requires PostgreSQL: .ci/run starts it
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is not reachable ({err}); start it (see .ci/run)")
    with admin:  # type: ignore[attr-defined]
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with _pg_admin() as admin:  # type: ignore[attr-defined]
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'loadmaster.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Both backends: tests taking db_url run twice."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    """A store (both backends), a LocalExecutor and a ControlLoop driven by hand (control_fixtures.Env).
    Modules whose tests need another cluster or policy define their own `env`."""
    from tests.platform.control_fixtures import make_env

    e = make_env(db_url, tmp_path)
    yield e
    e.close()


@pytest.fixture
def lite(sqlite_url: str, tmp_path: Path) -> Iterator[Env]:
    """`env` on SQLite only, for tests whose point is not the backend."""
    from tests.platform.control_fixtures import make_env

    e = make_env(sqlite_url, tmp_path)
    yield e
    e.close()
