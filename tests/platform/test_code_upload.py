"""Code packages: `job submit --working-dir` and `workdir: .` pack the directory (honouring .gitignore and
.loadmasterignore, within a size limit), the server keeps it by digest, and every attempt runs in a fresh
copy. Real directories, a real server over HTTP, real learner processes."""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from loadmaster.platform import code
from loadmaster.platform.code import CodeError, check_archive, pack
from tests.cli.test_platform_cli import run, run_json
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Live

sqlite_live = api_fixtures.sqlite_live
MB = 1 << 20


def _names(archive: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name for m in tar if m.isfile()}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_pack_honours_gitignore_and_loadmasterignore(tmp_path: Path) -> None:
    root = _tree(tmp_path / "proj", {
        "train.py": "print(1)", ".gitignore": "*.ckpt\noutputs/\n!keep.ckpt\n", ".loadmasterignore": "data/\n",
        "a.ckpt": "x", "keep.ckpt": "x", "outputs/run.log": "x", "data/big.bin": "x",
        "pkg/mod.py": "x", "pkg/.gitignore": "secret.py\n", "pkg/secret.py": "x", "secret.py": "x",
        ".git/HEAD": "ref", "pkg/sub/.loadmasterignore": "!*.ckpt\n", "pkg/sub/w.ckpt": "x",
    })
    package = pack(root, MB)
    assert _names(package.archive) == {"train.py", ".gitignore", ".loadmasterignore", "keep.ckpt", "pkg/mod.py",
                                       "pkg/.gitignore", "secret.py", "pkg/sub/.loadmasterignore", "pkg/sub/w.ckpt"}
    # deterministic: the same files give the same digest, whatever their times
    (root / "train.py").touch()
    assert pack(root, MB).digest == package.digest
    (root / "train.py").write_text("print(2)")
    assert pack(root, MB).digest != package.digest


def test_pack_refuses_too_much_naming_the_limit_and_the_fix(tmp_path: Path) -> None:
    root = _tree(tmp_path / "proj", {"train.py": "x"})
    (root / "weights.bin").write_bytes(b"\0" * (2 * MB))
    with pytest.raises(CodeError) as err:
        pack(root, MB)
    message = str(err.value)
    assert "2.0 MiB" in message and "limit of 1.0 MiB" in message and "weights.bin" in message
    assert ".loadmasterignore" in message and "--max-upload-mb" in message and code.MAX_MB_ENV in message
    (root / ".loadmasterignore").write_text("*.bin\n")
    assert _names(pack(root, MB).archive) == {"train.py", ".loadmasterignore"}


def test_links_inside_are_kept_relative_and_links_outside_left_out(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "datasets", {"big.bin": "x"})
    root = _tree(tmp_path / "proj", {"train.py": "x", "conf/base.yaml": "a: 1"})
    (root / "data").symlink_to(outside)  # a data mount: not code, and not on the server
    (root / "current.yaml").symlink_to(root / "conf" / "base.yaml")  # absolute, but inside
    (root / "conf" / "up.py").symlink_to("../train.py")
    package = pack(root, MB)
    assert package.links_out == (f"data -> {outside}",)
    with tarfile.open(fileobj=io.BytesIO(package.archive), mode="r:gz") as tar:
        links = {m.name: m.linkname for m in tar if m.issym()}
    assert links == {"current.yaml": "conf/base.yaml", "conf/up.py": "../train.py"}
    check_archive(package.archive, MB)  # the server accepts it
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(package.archive)
    code.unpack(archive, tmp_path / "copy")
    assert (tmp_path / "copy" / "current.yaml").read_text() == "a: 1"


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_archives_that_would_escape_or_explode_are_refused() -> None:
    with pytest.raises(CodeError, match="cannot be unpacked safely"):
        check_archive(_tar((tarfile.TarInfo("../evil.py"), b"x")), MB)
    link = tarfile.TarInfo("out")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(CodeError, match="cannot be unpacked safely"):
        check_archive(_tar((link, b"")), MB)
    with pytest.raises(CodeError, match="more than the server's limit"):
        check_archive(_tar((tarfile.TarInfo("zeros"), b"\0" * (2 * MB))), MB)
    with pytest.raises(CodeError, match="not a gzipped tar"):
        check_archive(b"not an archive", MB)
    assert check_archive(_tar((tarfile.TarInfo("ok.py"), b"x")), MB) == (1, 1)


def test_upload_over_http(sqlite_live: Live) -> None:
    token = sqlite_live.tenant("up")
    archive = _tar((tarfile.TarInfo("train.py"), b"print('hi')"))
    digest = code.digest_of(archive)
    with sqlite_live.client(token) as c:
        assert c.get(f"/api/v1/code/{digest}").status_code == 404
        r = c.post("/api/v1/code", content=archive, headers={"content-type": "application/gzip"})
        assert r.status_code == 201, r.text
        assert r.json() == {"digest": digest, "archive_bytes": len(archive), "files": 1, "bytes": 11}
        assert c.get(f"/api/v1/code/{digest}").json()["digest"] == digest
        bad = c.post("/api/v1/code", content=_tar((tarfile.TarInfo("../x"), b"x")))
        assert bad.status_code == 400 and bad.json()["problems"][0]["field"] == "body"
        assert c.get("/api/v1/code/sha256:nothex").status_code == 422
        missing = c.post("/api/v1/jobs", json={"name": "x", "command": ["true"], "code": "sha256:" + "0" * 64})
        assert missing.status_code == 422 and missing.json()["problems"][0]["field"] == "code"
        outside = c.post("/api/v1/jobs", json={"name": "x", "command": ["true"], "code": digest, "workdir": "../.."})
        assert outside.status_code == 422 and outside.json()["problems"][0]["field"] == "workdir"
    with httpx.Client(base_url=sqlite_live.url) as anonymous:
        assert anonymous.post("/api/v1/code", content=archive).status_code == 401


# The learner: the first attempt finds a clean copy, leaves litter beside the code and fails; the retry
# must find a clean copy again (its own), and sees the code's files.
LEARNER = """
import os, sys, pathlib
here = pathlib.Path.cwd()
print("cwd", here, "files", sorted(p.name for p in here.iterdir()), flush=True)
assert (here / "helper.txt").read_text() == "from the working dir", "the package is not the cwd"
assert not (here / "notes.log").exists(), "the package holds an ignored file"
if (here / "litter.txt").exists():
    print("DIRTY: an earlier attempt's file is here", flush=True)
    sys.exit(3)
(here / "litter.txt").write_text("attempt " + os.environ["LOADMASTER_ATTEMPT"])
sys.exit(1 if os.environ["LOADMASTER_ATTEMPT"] == "1" else 0)
"""


def _project(root: Path) -> Path:
    return _tree(root, {"learner.py": LEARNER, "helper.txt": "from the working dir", ".gitignore": "*.log\n",
                        "notes.log": "not sent"})


def test_working_dir_inline_command_fresh_copy_per_attempt(sqlite_live: Live, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    token = sqlite_live.tenant("wd")
    project = _project(tmp_path / "project")
    monkeypatch.chdir(tmp_path)
    status, out = run(sqlite_live, "job", "submit", "--json", "--working-dir", "project", "--gpus", "0", "--cpus",
                      "0.5", "--env", "GREETING=hi", "--", sys.executable, "learner.py", "--json", token=token)
    assert status == 0, out
    job = json.loads(out)
    assert job["name"] == "learner" and job["gpus_per_learner"] == 0
    # retries need a policy that retries exit 1: resubmit the same directory with a manifest beside it
    (project / "job.yaml").write_text(json.dumps({"name": "fresh", "command": [sys.executable, "learner.py"],
                                                  "workdir": ".", "resources": {"gpus": 0},
                                                  "retry": {"policy": "always", "max_attempts": 2}}))
    again = run_json(sqlite_live, "job", "submit", str(project / "job.yaml"), token=token)
    first = sqlite_live.wait(token, job["id"], "FAILED", "COMPLETED")
    done = sqlite_live.wait(token, again["id"], "COMPLETED", "FAILED")
    assert first["status"] == "FAILED", first["history"]  # attempt 1 exits 1 and 'classified' does not retry
    # everything after -- is the command, options included
    assert first["manifest"]["command"] == [sys.executable, "learner.py", "--json"]
    assert first["manifest"]["env"] == {"GREETING": "hi"} and first["manifest"]["resources"]["cpus"] == 0.5
    assert done["status"] == "COMPLETED", done["history"]
    assert [a["outcome"] for a in done["attempt_history"]] == ["failed", "succeeded"]
    assert done["manifest"]["code"].startswith("sha256:") and done["manifest"]["workdir"] is None
    data = sqlite_live.platform.dirs
    for attempt in (1, 2):
        copy = data.code(again["id"], attempt)
        assert (copy / "litter.txt").read_text() == f"attempt {attempt}"  # each wrote into its own copy
        assert not (copy / "notes.log").exists()
    assert not (project / "litter.txt").exists()  # the user's directory is untouched
    code_, out = run(sqlite_live, "job", "logs", again["id"], "--attempt", "2", token=token)
    assert code_ == 0 and "DIRTY" not in out and "helper.txt" in out


def test_cli_refuses_a_directory_over_the_limit(sqlite_live: Live, tmp_path: Path) -> None:
    token = sqlite_live.tenant("big")
    project = _project(tmp_path / "project")
    (project / "weights.bin").write_bytes(b"\0" * (MB + 1))
    code_, out = run(sqlite_live, "job", "submit", "--working-dir", str(project), "--max-upload-mb", "1", "--",
                     "python", "learner.py", token=token)
    assert code_ == 2, out
    flat = " ".join(out.split())
    assert "limit of 1.0 MiB" in flat and "weights.bin" in flat and "--max-upload-mb" in flat
    code_, out = run(sqlite_live, "job", "submit", token=token)
    assert code_ == 2 and "the command after --" in " ".join(out.split())


def test_options_and_an_inline_command_override_a_manifest(sqlite_live: Live, tmp_path: Path) -> None:
    token = sqlite_live.tenant("mix")
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({"name": "base", "command": ["false"], "learners": 2,
                                "resources": {"gpus": 1, "cpus": 2}, "env": {"A": "1"}}))
    status, out = run(sqlite_live, "job", "submit", str(path), "--json", "--gpus", "0", "--env", "B=2", "--",
                      sys.executable, "-c", "pass", token=token)
    assert status == 0, out
    done = sqlite_live.wait(token, json.loads(out)["id"], "COMPLETED", "FAILED")
    m = done["manifest"]
    assert done["status"] == "COMPLETED" and m["name"] == "base" and m["learners"] == 2
    assert m["command"] == [sys.executable, "-c", "pass"] and m["env"] == {"A": "1", "B": "2"}
    assert m["resources"]["gpus"] == 0 and m["resources"]["cpus"] == 2
