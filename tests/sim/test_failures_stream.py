"""FailureModel draws its uniforms ahead in chunks: the categories it picks must be those of one NumPy call
per draw (the stream the golden digests were made with), whatever the number of draws."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.sim.failures import FailureModel, RetryPolicy


def _spec(i: int, failed: int, final: FinalStatus) -> JobSpec:
    return JobSpec(job_id=f"j{i}", tenant="t", submit_time_s=float(i), learners=1, gpus_per_learner=1,
                   duration_s=100.0, final_status=final, failed_attempts_s=tuple(10.0 * (k + 1) for k in range(failed)))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=1500),
       st.sampled_from(list(RetryPolicy)))
def test_categories_are_one_draw_per_call(seed: int, jobs: list[tuple[int, bool]], retry: RetryPolicy) -> None:
    model = FailureModel(retry, 3, seed)
    reference = np.random.default_rng(seed)

    def draw(pool: tuple[list[object], list[float]]) -> object:
        cats, cumulative = pool
        return cats[min(bisect_right(cumulative, reference.random()), len(cats) - 1)]

    for i, (failed, ends_failed) in enumerate(jobs):
        spec = _spec(i, failed, FinalStatus.FAILED if ends_failed else FinalStatus.PASS)
        got = model.plan(spec)
        transient = [draw(model._transient) for _ in range(failed)]
        terminal = [draw(model._all)] if ends_failed else []
        assert set(got.categories) <= set(transient + terminal)
        if retry is RetryPolicy.TRACE:
            assert list(got.categories) == (transient + terminal)[:failed]
