from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.core.workload import LoadReport, Workload
from tests.helpers import job


def test_jobs_are_sorted_by_submit_time_then_id() -> None:
    w = Workload([job("b", submit=5.0), job("c", submit=1.0), job("a", submit=5.0)], LoadReport("t"))
    assert [j.job_id for j in w.jobs] == ["c", "a", "b"]


def test_duplicate_ids_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match=r"t\.csv: duplicate job ids: \['x'\]"):
        Workload([job("x"), job("y"), job("x", submit=2.0)], LoadReport("t.csv"))


@pytest.mark.parametrize(("change", "named"), [
    ({"job_id": ""}, "job_id is empty"),
    ({"learners": 0}, "learners must be >= 1"),
    ({"gpus": -1}, "gpus_per_learner must be >= 0"),
    ({"duration": float("nan")}, "duration_s must be a finite number"),
    ({"duration": float("inf")}, "duration_s must be a finite number"),
    ({"submit": -1.0}, "submit_time_s must be a finite number"),
    ({"cpus_per_learner": -2.0}, "cpus_per_learner and mem_gb_per_learner"),
    ({"failed_attempts_s": (5.0, float("nan"))}, "failed attempt runtimes"),
    ({"failed_attempts_s": (float("nan"), 5.0)}, "failed attempt runtimes"),
    ({"failed_attempts_s": (5.0, float("inf"))}, "failed attempt runtimes"),
    ({"failed_attempts_s": (5.0, -1.0)}, "failed attempt runtimes"),
    ({"learners": 2, "min_learners": 3}, "min_learners must be between 1 and learners"),
    ({"learners": 2, "max_learners": 1}, "max_learners must be >= learners"),
])
def test_a_bad_spec_is_refused_naming_the_field(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        job(str(change.pop("job_id", "j")), **change)  # type: ignore[arg-type]


def test_good_specs_pass_with_or_without_their_optional_parts() -> None:
    assert job("a").excluded_types == ()
    assert job("b", failed_attempts_s=(1.0,), learners=2, min_learners=1, max_learners=4,
               type_speed=(("k80", 0.0), ("v100", 1.0))).excluded_types == ("k80",)
    # Finite runtimes whose sum is not (the quick check passes them on to the rules, which find nothing wrong).
    assert job("c", failed_attempts_s=(1e308, 1e308)).attempts == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=12, unique_by=lambda t: t[0]))
def test_the_order_is_the_sorted_one_whether_or_not_the_sort_is_skipped(keys: list[tuple[int, int]]) -> None:
    """Workload skips its sort for jobs already in order (ties by id included): either way the jobs end up as
    sorted() by (submit time, id) puts them, in order or not, tied or not."""
    specs = [job(f"j{i:02d}", submit=float(t)) for i, t in keys]
    expected = sorted(specs, key=lambda j: (j.submit_time_s, j.job_id))
    for given_order in (specs, expected, expected[::-1]):
        assert Workload(list(given_order), LoadReport("t")).jobs == expected
