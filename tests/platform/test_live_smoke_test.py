"""Smoke test first on the live platform (`loadmaster server --smoke-test S`): a real server, real learners."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from loadmaster.platform.store.models import Attempt
from tests.platform.api_fixtures import manifest, start_platform
from tests.platform.control_fixtures import learner
from tests.platform.invariants import check_store
from tests.platform.test_live_migration import gpu_overlaps


def test_a_multi_gpu_job_runs_on_one_gpu_first_and_a_failure_there_costs_one_gpu(
        sqlite_url: str, tmp_path: Path) -> None:
    live = start_platform(sqlite_url, tmp_path / "data", smoke_test_s=1.0)
    try:
        token = live.tenant("vision")
        with live.client(token) as c:
            good = c.post("/api/v1/jobs", json=manifest(name="good", learners=2,
                                                        command=learner("train", 60, 0.05))).json()["id"]
            bad = c.post("/api/v1/jobs", json=manifest(
                name="bad", learners=2, resources={"gpus": 2},
                command=learner("fail", 0, 3, "ValueError: bad hyperparameter"))).json()["id"]
            one = c.post("/api/v1/jobs", json=manifest(name="one", command=learner("train", 5, 0.05))).json()["id"]
            done = live.wait(token, good, "COMPLETED", "FAILED", timeout_s=60)
            failed = live.wait(token, bad, "COMPLETED", "FAILED", timeout_s=60)
            single = live.wait(token, one, "COMPLETED", timeout_s=60)
        assert done["status"] == "COMPLETED", done["history"]
        reasons = [h["reason"] for h in done["history"]]
        assert "smoke test passed (ran 1 s on one GPU); queued for its whole gang" in reasons, reasons
        assert done["attempts"] == 2 and done["failures"] == 0 and done["preemptions"] == 0
        assert failed["status"] == "FAILED" and failed["attempts"] == 1, failed["history"]
        assert single["attempts"] == 1 and single["status_reason"] == "all 1 learner(s) exited 0"
        with live.platform.store.session() as s:
            held = {(a.job_id, a.number): [len(x["gpu_ids"]) for x in a.allocation["learners"]]
                    for a in s.scalars(select(Attempt))}
        assert held[(good, 1)] == [1] and held[(good, 2)] == [1, 1]  # the test on one GPU, then the gang
        assert held[(bad, 1)] == [1]  # its failure held one GPU, not four
        assert held[(one, 1)] == [1]
        _, end, attempt = (live.platform.loop.ctx.dirs.results(good) / "out.txt").read_text().split()
        assert end == "60" and attempt == "2"
        assert gpu_overlaps(live) == []
        assert check_store(live.platform.store, settled=True) == []
    finally:
        live.platform.shutdown()


def test_a_bad_smoke_test_option_names_itself() -> None:
    from loadmaster.platform.server import ServerError, ServerOptions

    with pytest.raises(ServerError, match="--smoke-test -1: give the seconds"):
        ServerOptions(smoke_test_s=-1).check()
