"""Hypothesis runs derandomized: CI sees the same examples on every run (no flaky submissions), and a
developer explores new ones with HYPOTHESIS_PROFILE=explore.

The suite runs on two pytest-xdist workers, a whole file to a worker, in its order (pyproject's addopts:
`-n 2 --dist loadfile --no-loadscope-reorder`; `-n 0` runs it in one process). Every test makes its own ports
(port 0), directories (tmp_path) and PostgreSQL database, and finds its processes by markers of its own (job ids,
its data directory), so tests of different files may overlap. A file's tests share its module-wide fixtures (a
server, a Ray instance, a browser's platform) and may build on each other's state, as in one process: loadfile
keeps them together (not --dist loadgroup with xdist_group marks: pytest-xdist 3.8 cannot rename pytest 9.2's
node ids, so those marks group nothing)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Folders of few, long tests (real servers and learners, a browser): handed to the workers first, so that the
# suite does not end on one of them while the other worker idles (xdist's default order, most tests first, left
# the two chaos tests, 2 minutes, for last).
LONG_FIRST = ("e2e", "web", "scripts", "examples")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long scenarios (@pytest.mark.slow) run only when asked for (`-m slow`): the default suite stays short.
    The folders in LONG_FIRST come first, each file's tests in their order (a stable sort)."""
    items.sort(key=lambda item: item.nodeid.split("/")[1] not in LONG_FIRST if item.nodeid.startswith("tests/")
               else True)
    if config.getoption("markexpr"):
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = kept
