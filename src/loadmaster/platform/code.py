"""Code packages: a job's working directory sent with it (`job submit --working-dir DIR`, `workdir: .`).

The client packs the directory into a gzipped tar, leaving out what `.gitignore` and `.loadmasterignore` files
name (git's syntax, each applying below its own directory, a deeper file's rule winning) and `.git` itself.
The archive is deterministic (sorted names, no times or owners), so its SHA-256 names its content: the
server stores it once under that digest (`DATA/code/sha256/HEX.tar.gz`), a second submission of the same
directory uploads nothing, and the manifest names it (`code: sha256:HEX`). Each attempt of the job unpacks
it into a fresh directory of its own (`DATA/jobs/JOB/attempt-N/code`), so what one attempt writes next to
the code is never seen by the next, nor by another job submitted from the same directory.

The limit is on the bytes of the files packed (what the learners' disks receive), checked by the client
before anything is sent and by the server again on what it unpacks (a small archive of huge files is
refused as well).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
IGNORE_FILES = (".gitignore", ".loadmasterignore")
ALWAYS_LEFT_OUT = frozenset({".git"})
DEFAULT_MAX_MB = 100.0  # Ray's limit for a working_dir: a code directory, not a data set
MAX_MB_ENV = "LOADMASTER_MAX_UPLOAD_MB"
MAX_FILES = 100_000


class CodeError(ValueError):
    """A directory that cannot be packed, or an archive that cannot be accepted; the message says the fix."""


@dataclass(frozen=True, slots=True)
class Package:
    digest: str  # sha256:HEX of the archive
    archive: bytes
    files: int
    bytes: int  # the files' own sizes, added up
    links_out: tuple[str, ...] = ()  # links left out: they point outside the directory (a data mount, a venv)


def _mb(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class _Ignore:
    """The ignore files met on the way down: (directory relative to the root, its spec), shallowest first."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []

    def read(self, directory: Path, rel: str) -> None:
        for name in IGNORE_FILES:
            path = directory / name
            if path.is_file():
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                self.specs.append((rel, pathspec.GitIgnoreSpec.from_lines(lines)))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        verdict = False
        for base, spec in self.specs:  # deeper files come later: their rules win
            if base and not rel.startswith(base + "/"):
                continue
            sub = rel[len(base) + 1:] if base else rel
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                verdict = bool(result.include)
        return verdict


def _walk(root: Path, links_out: list[str]) -> Iterator[tuple[str, Path]]:
    """(path relative to root, path) of every file, directory and link to pack, parents before children.
    Links that lead outside root are not followed nor packed (they would not resolve on the server): their
    names go to links_out."""
    real_root = root.resolve()
    ignore = _Ignore()
    ignore.read(root, "")
    stack = [(root, "")]
    while stack:
        directory, rel = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as err:
            raise CodeError(f"cannot read {directory}: {err.strerror}") from None
        subdirs = []
        for entry in entries:
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name in ALWAYS_LEFT_OUT or ignore.ignored(child_rel, is_dir):
                continue
            if entry.is_symlink():
                target = Path(os.path.realpath(entry.path))
                if target != real_root and real_root not in target.parents:
                    links_out.append(f"{child_rel} -> {os.readlink(entry.path)}")
                    continue
            yield child_rel, Path(entry.path)
            if is_dir:
                subdirs.append((Path(entry.path), child_rel))
        for path, child_rel in reversed(subdirs):
            ignore.read(path, child_rel)
            stack.append((path, child_rel))


def _largest(sizes: dict[str, int], n: int = 3) -> str:
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{name} ({_mb(size)})" for name, size in top)


def pack(root: Path, max_bytes: int) -> Package:
    """The directory as a deterministic tar.gz, or CodeError naming the limit and how to change it."""
    root = root.expanduser()
    if not root.is_dir():
        raise CodeError(f"working directory {str(root)!r} is not a directory")
    members: list[tuple[str, Path]] = []
    sizes: dict[str, int] = {}  # per top-level entry, to name what is large
    total = 0
    links_out: list[str] = []
    for rel, path in _walk(root, links_out):
        members.append((rel, path))
        if path.is_file() and not path.is_symlink():
            size = path.stat().st_size
            total += size
            top = rel.split("/", 1)[0]
            sizes[top] = sizes.get(top, 0) + size
        if len(members) > MAX_FILES:
            raise CodeError(f"working directory {str(root)!r} holds more than {MAX_FILES:,} files: list what the job "
                            "does not need (data, environments, outputs) in a .loadmasterignore file there")
    if total > max_bytes:
        raise CodeError(f"working directory {str(root)!r} holds {_mb(total)} to upload, over the limit of "
                        f"{_mb(max_bytes)} (largest: {_largest(sizes)}). List what the job does not need in a "
                        f".loadmasterignore file there (.gitignore is honoured too; put data in the manifest's "
                        f"`data` source), or raise the limit with --max-upload-mb or {MAX_MB_ENV} (the server has "
                        "its own: `loadmaster server --max-upload-mb`)")
    buffer = io.BytesIO()
    # mtime 0 in the gzip header and in every member: the same files give the same bytes, so the same digest.
    # Level 1, not GzipFile's 9: five to ten times faster on source text (bench/bench_accounting.py), for
    # archives a few per cent larger.
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w",
                                                                              format=tarfile.PAX_FORMAT) as tar:
        for rel, path in members:
            info = tar.gettarinfo(str(path), arcname=rel)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = (0o755 if info.isdir() or info.mode & stat.S_IXUSR else 0o644) if not info.issym() else 0o777
            if info.issym():  # relative, so that it resolves inside the copy (the server refuses absolute links)
                info.linkname = os.path.relpath(os.path.realpath(path), os.path.realpath(path.parent))
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            elif info.isdir() or info.issym():
                tar.addfile(info)
            # sockets, fifos and devices are not code: left out
    archive = buffer.getvalue()
    files = sum(1 for _, p in members if p.is_file() and not p.is_symlink())
    return Package(digest_of(archive), archive, files, total, tuple(links_out))


def digest_of(archive: bytes) -> str:
    return "sha256:" + hashlib.sha256(archive).hexdigest()


def archive_path(root: Path, digest: str) -> Path:
    """Where the server keeps a package (root: the server's data directory)."""
    if not DIGEST.match(digest):
        raise CodeError(f"{digest!r} is not a package digest (sha256: and 64 hex digits)")
    return root / "code" / "sha256" / f"{digest.split(':', 1)[1]}.tar.gz"


def check_archive(archive: bytes, max_bytes: int) -> tuple[int, int]:
    """(files, bytes) of an uploaded archive, or CodeError: not a tar.gz, a member that would land outside
    the directory (absolute, `..`, a link out), something that is not a file, directory or link, or more
    bytes unpacked than the limit."""
    files = total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for info in tar:
                try:
                    tarfile.data_filter(info, "/package")
                except tarfile.FilterError as err:
                    raise CodeError(f"the package holds {info.name!r}, which cannot be unpacked safely: {err}") \
                        from None
                if not (info.isfile() or info.isdir() or info.issym()):
                    raise CodeError(f"the package holds {info.name!r}, which is not a file, directory or link")
                if info.isfile():
                    files += 1
                    total += info.size
                if total > max_bytes:
                    raise CodeError(f"the package unpacks to more than the server's limit of {_mb(max_bytes)}; "
                                    "leave out what the job does not need (.loadmasterignore), or ask the "
                                    "operator to raise `loadmaster server --max-upload-mb`")
                if files > MAX_FILES:
                    raise CodeError(f"the package holds more than {MAX_FILES:,} files")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CodeError(f"the body is not a gzipped tar archive ({err})") from None
    return files, total


def store(root: Path, archive: bytes) -> str:
    """Keep a checked archive under its digest (atomically: a reader never sees half of it)."""
    digest = digest_of(archive)
    target = archive_path(root, digest)
    if target.is_file():
        return digest
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".upload-", delete=False) as tmp:
        tmp.write(archive)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, target)
    return digest


def unpack(archive: Path, dest: Path, owner: tuple[int, int] | None = None) -> None:
    """A fresh copy of the package at dest (whatever an earlier try left there is removed first), owned by
    `owner` (uid, gid) when given: the tenant's user its learners run as may then change their copy. dest's
    parent must be the server's (no learner can plant a link there)."""
    if dest.exists():
        shutil.rmtree(dest)
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        tar.extractall(partial, filter="data")
    if owner is not None:
        for path in (partial, *partial.rglob("*")):
            os.chown(path, *owner, follow_symlinks=False)
    os.replace(partial, dest)
