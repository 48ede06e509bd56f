"""The canonical reader's fast path reads every row as the careful reader does: same jobs, or it hands the
row over (never a different job)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.traces.canonical import _fast_reader, _row_to_job

HEADERS = ["job_id", "tenant", "submit_time_s", "learners", "gpus_per_learner", "duration_s", "user",
           "cpus_per_learner", "mem_gb_per_learner", "model", "priority", "final_status", "attempts",
           "failed_attempts_s"]
REQUIRED = {"job_id", "submit_time_s", "learners", "gpus_per_learner", "duration_s"}
NUMBER = st.sampled_from(["", "0", "1", "2", "8", "3.5", "1e3", " 4", "-1", "x"])
TEXT = st.sampled_from(["", "a", " b ", "c1"])
STATUS = st.sampled_from(["", "Pass", "Failed", "Killed", " Pass ", "pass"])
FIELD = {"job_id": TEXT, "tenant": TEXT, "user": TEXT, "model": TEXT, "final_status": STATUS,
         "failed_attempts_s": st.sampled_from(["", "10", "10;20", "x"])}


@settings(max_examples=400, deadline=None)
@given(data=st.data(), optional=st.sets(st.sampled_from(sorted(set(HEADERS) - REQUIRED))))
def test_fast_rows_are_the_careful_readers_jobs(data: st.DataObject, optional: set[str]) -> None:
    header = [h for h in HEADERS if h in REQUIRED or h in optional]
    row = [data.draw(FIELD.get(h, NUMBER)) for h in header]
    idx = {h: i for i, h in enumerate(header)}
    try:
        fast = _fast_reader(idx)(row)
    except (ValueError, KeyError):
        return  # handed over to the careful reader
    assert fast == _row_to_job("t.csv", 2, dict(zip(header, row, strict=True)))
