"""Hypothesis runs derandomized: CI sees the same examples on every run (no flaky submissions), and a
developer explores new ones with HYPOTHESIS_PROFILE=explore."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
