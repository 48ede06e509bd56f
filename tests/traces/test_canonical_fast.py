"""The canonical reader's fast path reads every row as the careful reader does: same jobs, or it hands the
row over (never a different job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.traces.canonical import _fast_reader, _row_to_job, read_csv
from loadmaster.traces.errors import TraceFormatError

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
        fast = _fast_reader(idx)(list(row))  # it appends to the row it is given (the csv reader's own)
    except (ValueError, KeyError):
        return  # handed over to the careful reader
    assert fast == _row_to_job("t.csv", 2, dict(zip(header, row, strict=True)))


def test_read_csv_hands_rows_over_and_names_irregular_ones(tmp_path: Path) -> None:
    """A row the fast reader turns down after it appended its spare field (a type_speed here) is read by the
    careful reader from the row's own fields; a row with a field too many or too few is named as such."""
    head = "job_id,tenant,submit_time_s,learners,gpus_per_learner,duration_s,type_speed\n"
    path = tmp_path / "t.csv"
    path.write_text(head + "a,t,1,1,2,10,\nb,t,2,1,2,20,v100=1;k80=0\n")
    jobs = read_csv(path).jobs
    assert [j.job_id for j in jobs] == ["a", "b"]
    assert jobs[1].type_speed == (("v100", 1.0), ("k80", 0.0)) and jobs[1].excluded_types == ("k80",)
    for bad in ("c,t,3,1,2,30\n", "c,t,3,1,2,30,,x\n"):
        path.write_text(head + "a,t,1,1,2,10,\n" + bad)
        with pytest.raises(TraceFormatError, match=r"line 3.*fields, the header has 7"):
            read_csv(path)
