"""The end-to-end tests' stores: a real SQLite file and a real PostgreSQL database of their own (the same
fixtures as the platform tests)."""

from __future__ import annotations

from tests.platform.conftest import pg_url, sqlite_url

__all__ = ["pg_url", "sqlite_url"]
