from __future__ import annotations

import pytest

from loadmaster.core.workload import LoadReport, Workload
from tests.helpers import job


def test_jobs_are_sorted_by_submit_time_then_id() -> None:
    w = Workload([job("b", submit=5.0), job("c", submit=1.0), job("a", submit=5.0)], LoadReport("t"))
    assert [j.job_id for j in w.jobs] == ["c", "a", "b"]


def test_duplicate_ids_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match=r"t\.csv: duplicate job ids: \['x'\]"):
        Workload([job("x"), job("y"), job("x", submit=2.0)], LoadReport("t.csv"))
