"""Hypothesis runs derandomized: CI sees the same examples on every run (no flaky submissions), and a
developer explores new ones with HYPOTHESIS_PROFILE=explore.

The suite runs on two pytest-xdist workers (pyproject's addopts: `-n 2 --dist loadgroup`; `-n 0` runs it in one
process). Every test makes its own ports (port 0), directories (tmp_path) and PostgreSQL database, and finds
its processes by markers of its own (job ids, its data directory), so tests may overlap. A test that uses a
module- or session-wide fixture heavier than data (a server, a Ray instance) is kept on one worker with the
rest of its module (xdist_group), so that fixture is still made once per module, not once per worker."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _module_wide(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (or package): its module's other tests share it."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in ("module", "package") for defs in info.name2fixturedefs.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long scenarios (@pytest.mark.slow) run only when asked for (`-m slow`): the default suite stays short.
    Under xdist, the tests sharing a module-wide fixture are one group (one worker; see the docstring above)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _module_wide(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    if config.getoption("markexpr"):
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = kept
