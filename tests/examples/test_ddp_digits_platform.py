"""examples/ddp_digits as shipped, the README's way: a real server, `loadmaster job submit job.yaml` (its
`workdir: .` uploads the example's directory), `job wait`, `job logs`. Nothing is edited first."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_platform_cli import run, tenant
from tests.platform.api_fixtures import Live, start_platform

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytestmark = pytest.mark.slow  # two learners starting torch: 15-40 s on a busy 2-core machine

EXAMPLE = Path(__file__).parents[2] / "examples" / "ddp_digits"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    # The README starts the server from the environment that has torch: its `python` comes first on PATH.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    live = start_platform(f"sqlite:///{tmp_path / 'lm.db'}", tmp_path / "data")
    try:
        yield live
    finally:
        live.platform.shutdown()


# The README's two ways: the manifest beside the script (`workdir: .`), and Ray Jobs' inline form.
FORMS = {
    "manifest": [str(EXAMPLE / "job.yaml")],
    "working-dir": ["--working-dir", str(EXAMPLE), "--learners", "2", "--gpus", "0", "--", "python", "train.py",
                    "--epochs", "10"],
}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_example_runs_as_shipped(server: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    token = tenant(server, "me", "--gpus", "4")
    monkeypatch.chdir(tmp_path)  # not the repository: the named directory is what is uploaded
    code, out = run(server, "job", "submit", "--json", *FORMS[form], token=token)
    assert code == 0, out
    job_id = json.loads(out)["id"]
    code, out = run(server, "job", "wait", job_id, "--timeout", "240", "--interval", "0.5", token=token)
    assert code == 0, out
    code, logs = run(server, "job", "logs", job_id, token=token)
    assert code == 0 and "epoch 10/10" in logs, logs
    metrics = json.loads((server.platform.dirs.results(job_id) / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.9
    assert not (EXAMPLE / "checkpoints").exists() and not (EXAMPLE / "results").exists()  # nothing written beside it
