"""The CLI tests' server: a whole platform (store, virtual nodes, local executor, control loop, API over HTTP) in
this process, one per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.platform.api_fixtures import Live, start_platform


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("cli")
    live = start_platform(f"sqlite:///{root / 'loadmaster.db'}", root / "data")
    try:
        yield live
    finally:
        live.platform.shutdown()
