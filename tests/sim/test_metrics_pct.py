"""summary.json's percentiles and the CDF figures' picks, computed without np.percentile/np.unique (whose
np.unique imports numpy.ma at a short run's end), equal NumPy's bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.sim.figures import CDF_POINTS, cdf
from loadmaster.sim.metrics import _pct

_floats = st.floats(allow_nan=False, allow_infinity=True, width=64)
_values = st.one_of(
    st.lists(_floats, min_size=1, max_size=60),
    st.lists(st.sampled_from([0.0, 1.5, 2.5, 1e300, -1e300, 3.0]), min_size=1, max_size=60),  # many ties
    st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=60),
    st.lists(st.floats(0, 1e6), min_size=200, max_size=3000),
)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@settings(max_examples=400, deadline=None)
@given(_values, st.one_of(st.sampled_from([0, 1, 50, 99, 100]), st.integers(0, 100)))
def test_pct_is_numpys_percentile(values: list[float], q: int) -> None:
    kept = list(values)
    with np.errstate(all="ignore"):
        expected = float(np.percentile(values, q))
    assert _same(_pct(values, q), expected)
    assert values == kept  # the caller's list is left alone


@given(st.lists(_floats, min_size=1, max_size=20), st.integers(0, 19), st.sampled_from([50, 99]))
def test_pct_with_a_nan_is_nan_like_numpy(values: list[float], where: int, q: int) -> None:
    values.insert(where % (len(values) + 1), math.nan)
    assert math.isnan(_pct(values, q)) and math.isnan(float(np.percentile(values, q)))


def test_pct_of_nothing_is_zero() -> None:
    assert _pct([], 50) == 0.0


@settings(deadline=None)
@given(st.integers(1, 40_000))
def test_cdf_picks_are_np_unique_of_the_even_positions(n: int) -> None:
    values = [float((i * 7919) % 1000) for i in range(n)]
    series = cdf(values, "x", floor=0.0)
    assert series is not None
    x = np.sort(np.asarray(values))
    y = np.arange(1, n + 1) / n
    if n > CDF_POINTS:
        pick = np.unique(np.linspace(0, n - 1, CDF_POINTS).astype(np.int64))
        x, y = x[pick], y[pick]
    assert np.array_equal(series.x, np.maximum(x, 0.0)) and np.array_equal(series.y, y)
