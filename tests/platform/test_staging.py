"""Data in and results out through fsspec, with local paths and file:// URLs (real files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.platform.staging import StagingError, stage_in, stage_out


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "dataset"
    (src / "train").mkdir(parents=True)
    (src / "train" / "a.csv").write_text("1,2\n")
    (src / "labels.txt").write_text("cat\ndog\n")
    return src


@pytest.mark.parametrize("as_url", [False, True])
def test_a_directory_is_staged_with_its_contents(tmp_path: Path, source: Path, as_url: bool) -> None:
    dest = tmp_path / "job" / "data"
    staged = stage_in(source.as_uri() if as_url else str(source), dest)
    assert _tree(dest) == {"labels.txt": "cat\ndog\n", "train/a.csv": "1,2\n"}
    assert staged.files == 2 and staged.bytes == len("cat\ndog\n") + len("1,2\n")


def test_a_single_file_lands_under_its_own_name(tmp_path: Path, source: Path) -> None:
    dest = tmp_path / "data"
    stage_in((source / "labels.txt").as_uri(), dest)
    assert _tree(dest) == {"labels.txt": "cat\ndog\n"}


def test_a_second_try_replaces_what_the_first_left(tmp_path: Path, source: Path) -> None:
    dest = tmp_path / "data"
    dest.mkdir()
    (dest / "partial.tmp").write_text("half a file")
    stage_in(str(source), dest)
    assert "partial.tmp" not in _tree(dest)


def test_a_missing_source_is_the_users_input_and_says_so(tmp_path: Path) -> None:
    with pytest.raises(StagingError, match="does not exist; check the manifest's data field") as err:
        stage_in((tmp_path / "nope").as_uri(), tmp_path / "data")
    assert err.value.missing


def test_unknown_and_uninstalled_protocols_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(StagingError, match="Protocol not known") as err:
        stage_in("nosuchproto://bucket/x", tmp_path / "d")
    assert err.value.missing
    with pytest.raises(StagingError, match="pip install the fsspec backend"):
        stage_out(tmp_path, "s3://bucket/results")


def test_results_are_copied_into_the_target_directory(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "plots").mkdir(parents=True)
    (results / "metrics.json").write_text('{"acc": 0.9}')
    (results / "plots" / "loss.txt").write_text("0.1")
    target = tmp_path / "out" / "run-1"
    staged = stage_out(results, target.as_uri())
    assert _tree(target) == {"metrics.json": '{"acc": 0.9}', "plots/loss.txt": "0.1"}
    assert staged.files == 2


def test_empty_results_still_create_the_target(tmp_path: Path) -> None:
    target = tmp_path / "out"
    stage_out(tmp_path / "results", str(target))
    assert target.is_dir() and not any(target.iterdir())
