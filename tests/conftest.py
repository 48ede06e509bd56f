"""Hypothesis runs derandomized: CI sees the same examples on every run (no flaky submissions), and a
developer explores new ones with HYPOTHESIS_PROFILE=explore."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long scenarios (@pytest.mark.slow) run only when asked for (`-m slow`): the default suite stays short."""
    if config.getoption("markexpr"):
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = kept
