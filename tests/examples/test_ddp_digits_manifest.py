"""examples/ddp_digits/job.yaml is a manifest the platform accepts, with the shape the example expects."""

from __future__ import annotations

from pathlib import Path

from loadmaster.platform.manifest import load_manifest_text

JOB = Path(__file__).parents[2] / "examples" / "ddp_digits" / "job.yaml"


def test_job_yaml_is_a_valid_manifest() -> None:
    manifest = load_manifest_text(JOB.read_text())
    assert manifest.name == "ddp-digits"
    assert manifest.learners == 2 and manifest.resources.gpus == 0 and manifest.gpus == 0
    assert manifest.argv[:2] == ("python", "train.py")
    assert manifest.workdir == "."  # the manifest's directory is uploaded with the job
    assert (JOB.parent / manifest.argv[1]).is_file()
