"""Data in, results out: copies between a job's directories and the fsspec URLs of its manifest.

Local paths and file:// URLs work as they are; s3://, gs://, ... work once the user installs that fsspec
backend (s3fs, gcsfs, ...). Errors become StagingError with a message that says what to fix, and a flag
telling whether the source was missing (the user's input, not worth retrying) or the copy itself failed
(possibly transient).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster.platform.tenancy import RunAs


class StagingError(RuntimeError):
    """A copy that failed. `missing` is True when the source does not exist (incorrect input)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True, slots=True)
class Staged:
    files: int
    bytes: int


def _filesystem(url: str, field: str) -> tuple[Any, str]:
    import fsspec  # type: ignore[import-untyped]

    try:
        fs, path = fsspec.core.url_to_fs(url)
        return fs, str(path)
    except ImportError as err:  # a known protocol whose backend is not installed
        raise StagingError(f"{field} {url!r}: {err} (pip install the fsspec backend for it)") from None
    except ValueError as err:  # an unknown protocol
        raise StagingError(f"{field} {url!r}: {err}; use a local path, file://, or an installed fsspec "
                           "protocol", missing=True) from None


def _no_links(fs: Any, path: str, field: str, url: str) -> None:
    """Refuse a local tree holding a symbolic link: the copy would follow it to wherever it points (another
    tenant's files, the server's), whoever made it. Remote stores have no links."""
    if "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        return
    root = Path(path)
    if root.is_symlink():
        raise StagingError(f"{field} {url!r} is a symbolic link; give the path it points to", missing=True)
    if root.is_dir():
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                if os.path.islink(os.path.join(dirpath, name)):
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    raise StagingError(f"{field} {url!r} holds a symbolic link ({rel}); copies take files and "
                                       "directories only", missing=True)


def _count(root: Path) -> Staged:
    files = [p for p in root.rglob("*") if p.is_file()]
    return Staged(len(files), sum(p.stat().st_size for p in files))


def stage_in(url: str, dest: Path) -> Staged:
    """Copy the data source `url` (a file or a directory) into `dest`, replacing what a previous try left.

    A directory's contents land in `dest`; a single file lands in `dest` under its own name.
    """
    fs, path = _filesystem(url, "data")
    try:
        if not fs.exists(path):
            raise StagingError(f"data {url!r} does not exist; check the manifest's data field", missing=True)
        _no_links(fs, path, "data", url)
        # A download interrupted by a restart is redone from scratch. The directory itself stays: it is
        # made for the job (owned by its tenant's user) in a directory the copy may not change.
        dest.mkdir(parents=True, exist_ok=True)
        for entry in list(dest.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if fs.isdir(path):
            fs.get(path.rstrip("/") + "/", str(dest) + "/", recursive=True)
        else:
            fs.get(path, str(dest / Path(path).name))
    except StagingError:
        raise
    except FileNotFoundError as err:
        raise StagingError(f"data {url!r}: {err}", missing=True) from None
    except (OSError, RuntimeError, ValueError) as err:
        raise StagingError(f"data {url!r}: copying failed: {err.__class__.__name__}: {err}") from None
    return _count(dest)


def stage_out(src: Path, url: str) -> Staged:
    """Copy the contents of the results directory `src` to the directory `url` (created if missing)."""
    fs, path = _filesystem(url, "results")
    src.mkdir(parents=True, exist_ok=True)  # a job that wrote no results still gets its (empty) target
    _no_links(_filesystem(str(src), "results")[0], str(src), "results", str(src))
    # A link already in the target would be written through (where it points: another tenant's files when all
    # tenants share the server's OS user).
    if fs.exists(path):
        _no_links(fs, path, "results", url)
    try:
        fs.makedirs(path, exist_ok=True)
        if any(src.iterdir()):
            fs.put(str(src) + "/", path.rstrip("/") + "/", recursive=True)
    except (OSError, RuntimeError, ValueError) as err:
        raise StagingError(f"results {url!r}: copying failed: {err.__class__.__name__}: {err}") from None
    return _count(src)


def copy_as(run_as: RunAs | None, kind: str, url: str, local: Path) -> Staged:
    """stage_in (kind "download": url -> local) or stage_out ("upload": local -> url), in this process, or,
    with run_as, in a child process running as that OS user with a clean environment: the copy then has the
    tenant's rights only (a symbolic link a job left in its results cannot make the server copy a file the
    tenant may not read, nor write where the tenant may not)."""
    if run_as is None:
        return stage_in(url, local) if kind == "download" else stage_out(local, url)
    request = json.dumps({"kind": kind, "url": url, "local": str(local), "uid": run_as.uid, "gid": run_as.gid})
    env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": str(local)}
    # The child starts as the server's user (the interpreter may live where only it can read, like /root) and
    # gives up its rights before it touches a path of the request.
    done = subprocess.run([sys.executable, "-m", "loadmaster.platform.staging"], input=request.encode(),
                          capture_output=True, env=env, cwd="/", check=False, timeout=24 * 3600)
    try:
        answer = json.loads(done.stdout.decode() or "null")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise StagingError(f"{url}: the copy as the tenant's user failed: {tail[0]}")
    if "error" in answer:
        raise StagingError(str(answer["error"]), missing=bool(answer.get("missing")))
    return Staged(int(answer["files"]), int(answer["bytes"]))


def _child() -> int:
    request = json.loads(sys.stdin.read())
    import fsspec.implementations.local  # type: ignore[import-untyped]  # noqa: F401  # before giving up rights

    os.setgroups([])
    os.setgid(int(request["gid"]))
    os.setuid(int(request["uid"]))
    try:
        staged = copy_as(None, request["kind"], request["url"], Path(request["local"]))
    except StagingError as err:
        print(json.dumps({"error": str(err), "missing": err.missing}))
    else:
        print(json.dumps({"files": staged.files, "bytes": staged.bytes}))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
