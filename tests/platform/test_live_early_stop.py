"""Early stop on the live platform (a manifest's `early_stop`): a real server, a real learner that reports a
loss which stops falling."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from loadmaster.platform.store.models import Attempt
from tests.platform.api_fixtures import manifest, start_platform
from tests.platform.control_fixtures import learner
from tests.platform.invariants import check_store


def test_a_job_whose_loss_plateaus_is_stopped_and_completes(db_url: str, tmp_path: Path) -> None:
    live = start_platform(db_url, tmp_path / "data")
    try:
        token = live.tenant("vision")
        rule = {"metric": "loss", "patience": 5, "min_delta": 0.01}
        with live.client(token) as c:
            # loss 4.5, 4.0, ... 1.0 by step 8, then flat: without early stop it would run 100 s.
            job = c.post("/api/v1/jobs", json=manifest(name="flat", early_stop=rule,
                                                       command=learner("plateau", 2000, 0.05, 1.0))).json()["id"]
            # A job without early_stop reporting the same loss is left alone.
            plain = c.post("/api/v1/jobs", json=manifest(name="plain", command=learner("plateau", 60, 0.05, 1.0))
                           ).json()["id"]
            done = live.wait(token, job, "COMPLETED", "FAILED", timeout_s=40)
            assert done["status"] == "COMPLETED", done["history"]
            assert done["status_reason"].startswith("early stop: loss plateaued at 1 "), done["status_reason"]
            assert done["attempts"] == 1 and done["failures"] == 0 and done["preemptions"] == 0
            [attempt] = done["attempt_history"]
            assert attempt["outcome"] == "stopped" and attempt["retry_decision"].startswith("not retried: early stop")
            assert done["progress"]["last_step"] < 100  # stopped soon after the plateau began (step 8)
            # Stopped with grace: the learner saw should_preempt() and checkpointed.
            assert done["progress"]["checkpoint_step"] is not None
            plain_done = live.wait(token, plain, "COMPLETED", timeout_s=40)
            assert plain_done["status_reason"] == "all 1 learner(s) exited 0"
        with live.platform.store.session() as s:
            assert [a.failure_category for a in s.scalars(select(Attempt).where(Attempt.job_id == job))] == [None]
        assert check_store(live.platform.store, settled=True) == []
    finally:
        live.platform.shutdown()


def test_a_bad_early_stop_is_refused_naming_the_field(sqlite_url: str, tmp_path: Path) -> None:
    live = start_platform(sqlite_url, tmp_path / "data")
    try:
        token = live.tenant("vision")
        with live.client(token) as c:
            r = c.post("/api/v1/jobs", json=manifest(early_stop={"metric": "loss", "patience": 0}))
            assert r.status_code == 422, r.text
            assert "early_stop.patience" in r.text and "greater than or equal to 1" in r.text
    finally:
        live.platform.shutdown()
