"""Where a tenant's jobs may read and write, and as whom they run: the line between tenants below the API.

Paths. A manifest's `workdir`, `data` and `results` name places on this machine (or, for data and results, a
remote store such as s3://). Each local one is resolved the same way, at submission (a bad one is rejected
with its field named) and again at every start (the tenant's roots may have changed meanwhile):
- `~` or `~/x` is the tenant's own area, DATA/tenants/NAME (its home);
- a relative path is inside the job's own working directory, DATA/jobs/JOB/work (its default workdir),
  never the server's working directory;
- `..` may not leave the directory a path is relative to, and an absolute path may not contain it;
- the path, with its symbolic links followed, must lie in one of the job's own directories (work,
  checkpoints, results, data), the tenant's area, or one of the tenant's roots (admin-set: read-only or
  read-write); `results` needs a read-write one.
Remote stores are allowed by protocol (REMOTE_PROTOCOLS); in-process (memory://), archive (zip://) and
chained (a::b) URLs are not: they would let the server's own process, or its credentials, do the copy.

Users. When the server runs as root, each tenant's learners and copies run as that tenant's own OS user (a
uid from a range, or a named user mapped at `tenant create --os-user`); otherwise as the server's user.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from loadmaster.platform.layout import JobDirs
from loadmaster.platform.manifest import JobManifest, ManifestError

LOCAL_PROTOCOLS = frozenset({"file", "local"})
REMOTE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "hf"})
DEFAULT_UID_BASE = 200_000  # tenant N runs as uid/gid DEFAULT_UID_BASE + N unless mapped to a named user
JOB_OWN = ("work", "checkpoints", "results", "data")  # the job's directories its learners and copies may use


@dataclass(frozen=True, slots=True)
class Root:
    """A directory a tenant's jobs may use beside their own: read-only unless `writable`."""

    path: str
    writable: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "writable": self.writable}

    @staticmethod
    def from_dict(data: object) -> Root | None:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return None
        return Root(str(data["path"]), bool(data.get("writable", False)))


@dataclass(frozen=True, slots=True)
class RunAs:
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class TenantArea:
    """What a tenant's job may touch: its own directory, the tenant's home, and the admin-set roots."""

    home: Path
    roots: tuple[Root, ...] = ()

    def all_roots(self, job_dir: Path) -> tuple[Root, ...]:
        # The job's own directories, not the job directory itself: its logs and the executor's files are the
        # server's, never a copy's source or target.
        own = tuple(Root(str(job_dir / name), True) for name in JOB_OWN)
        return (*own, Root(str(self.home), True), *self.roots)


@dataclass(frozen=True, slots=True)
class JobPaths:
    """A job's local paths as its learners and copies use them: absolute, symbolic links followed."""

    workdir: str
    data: str | None
    results: str | None


def tenant_area(dirs: JobDirs, tenant: str, roots: tuple[object, ...] | list[object] | None) -> TenantArea:
    """A tenant's area from its stored roots (entries that do not read as a Root are ignored)."""
    found = tuple(r for r in (Root.from_dict(x) for x in roots or ()) if r is not None)
    return TenantArea(dirs.tenant_home(tenant), found)


def check_roots(roots: list[Root]) -> None:
    for i, root in enumerate(roots):
        if not os.path.isabs(root.path) or ".." in Path(root.path).parts:
            raise ManifestError([(f"roots.{i}", f"{root.path!r}: a root is an absolute path without '..'")])


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def _local(value: str, job_dir: Path, area: TenantArea) -> tuple[str | None, str | None]:
    """(absolute normalised path, None) or (None, why not)."""
    if value.startswith("~"):
        head, _, rest = value.partition("/")
        if head != "~":
            return None, f"{value!r}: only '~' (the tenant's own area) is known here, not another user's home"
        base, rel = area.home, rest
    elif os.path.isabs(value):
        if ".." in Path(value).parts:
            return None, f"{value!r}: an absolute path may not contain '..'"
        return os.path.normpath(value), None
    else:
        base, rel = job_dir / "work", value
    joined = os.path.normpath(os.path.join(base, rel))
    if not _within(joined, os.path.normpath(base)):
        where = "the tenant's area" if base == area.home else "the job's working directory"
        return None, f"{value!r} leaves {where} ('..')"
    return joined, None


def _split_url(value: str) -> tuple[str | None, str]:
    if "::" in value:
        return "::", value
    if "://" in value:
        protocol, _, rest = value.partition("://")
        return protocol.lower(), rest
    return None, value


def resolve_paths(manifest: JobManifest, job_dir: Path, area: TenantArea) -> JobPaths:
    """The manifest's paths for a job in `job_dir`, or ManifestError naming every field at fault."""
    problems: list[tuple[str, str]] = []
    roots = area.all_roots(job_dir)

    def allowed(path: str, writable: bool) -> bool:
        real = os.path.realpath(path)
        return any(_within(real, os.path.realpath(r.path)) and (r.writable or not writable) for r in roots)

    def one(field: str, value: str | None, *, url: bool, writable: bool) -> str | None:
        if value is None:
            return None
        protocol, rest = _split_url(value) if url else (None, value)
        if protocol == "::":
            problems.append((field, f"{value!r}: chained URLs (a::b) are not accepted; give one path or URL"))
            return None
        if protocol in REMOTE_PROTOCOLS:
            return value
        if protocol is not None and protocol not in LOCAL_PROTOCOLS:
            problems.append((field, f"{value!r}: protocol {protocol!r} is not accepted; use a path, file://, or one "
                                    f"of {', '.join(sorted(REMOTE_PROTOCOLS))}"))
            return None
        if protocol is not None and not rest.startswith("/"):
            problems.append((field, f"{value!r}: a file:// URL needs an absolute path (file:///x); write a plain "
                                    "relative path for one inside the job's work directory"))
            return None
        path, why = _local(rest, job_dir, area)
        if path is None:
            problems.append((field, str(why)))
            return None
        if not allowed(path, writable):
            kind = "read-write" if writable else "allowed"
            problems.append((field, f"{value!r} is outside the tenant's {kind} roots (its job's own directories, "
                                    "~ = its area, and the roots the admin set: `loadmaster tenant list --json`); "
                                    "ask the admin for a root or use ~/..."))
            return None
        return os.path.realpath(path)

    workdir = one("workdir", manifest.workdir, url=False, writable=False)
    data = one("data", manifest.data, url=True, writable=False)
    results = one("results", manifest.results, url=True, writable=True)
    if problems:
        raise ManifestError(problems)
    return JobPaths(workdir or str(job_dir / "work"), data, results)


def os_user(name: str) -> RunAs:
    """A named OS user's uid and primary gid (tenant create --os-user); ValueError if unknown or root."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"no OS user named {name!r} on the server's machine; create it (useradd) first") from None
    if entry.pw_uid == 0:
        raise ValueError("os_user may not be root: a tenant's learners run unprivileged")
    return RunAs(entry.pw_uid, entry.pw_gid)


@dataclass(frozen=True, slots=True)
class Isolation:
    """How the server separates tenants below the API (docs/platform.md, security).

    switch_users: learners and copies run as each tenant's own OS user (possible only when the server runs
    as root); sandbox: the bubblewrap binary that confines each learner (None: no sandbox); hidden: paths the
    sandbox never shows (the server's data directory and database) beyond what it binds back."""

    switch_users: bool = False
    sandbox: str | None = None
    uid_base: int = DEFAULT_UID_BASE
    insecure_shared_user: bool = False

    def run_as(self, tenant_id: int, os_uid: int | None, os_gid: int | None) -> RunAs | None:
        if not self.switch_users:
            return None
        if os_uid is not None:
            return RunAs(os_uid, os_gid if os_gid is not None else os_uid)
        return RunAs(self.uid_base + tenant_id, self.uid_base + tenant_id)

    @property
    def isolated(self) -> bool:
        """Whether one tenant's learners are kept from another's files and processes."""
        return self.switch_users or self.sandbox is not None

    def describe(self) -> str:
        users = "each tenant's own OS user" if self.switch_users else "the server's OS user"
        box = f"bubblewrap sandbox ({self.sandbox})" if self.sandbox else "NO sandbox"
        return f"learners run as {users}, {box}"


@dataclass(frozen=True, slots=True)
class JobTenancy:
    """What one job may use and as whom it runs, as of its last start."""

    tenant: str
    area: TenantArea
    paths: JobPaths | None  # None: the manifest's paths are refused now (problem says why)
    problem: str | None
    run_as: RunAs | None

    def binds(self) -> tuple[tuple[str, bool], ...]:
        """The directories beside the job's own that its sandbox shows: (path, writable)."""
        return ((str(self.area.home), True), *((r.path, r.writable) for r in self.area.roots))


def job_tenancy(dirs: JobDirs, isolation: Isolation, job_id: str, manifest: JobManifest, tenant: str,
                tenant_id: int, roots: list[object] | None, os_uid: int | None, os_gid: int | None) -> JobTenancy:
    area = tenant_area(dirs, tenant, roots)
    try:
        paths: JobPaths | None = resolve_paths(manifest, dirs.job(job_id), area)
        problem = None
    except ManifestError as err:
        paths, problem = None, f"refused: {err} (the tenant's roots changed since the job was submitted?)"
    return JobTenancy(tenant, area, paths, problem, isolation.run_as(tenant_id, os_uid, os_gid))


def _own(path: Path, mode: int, run_as: RunAs | None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if run_as is not None:
        os.chown(path, run_as.uid, run_as.gid)
    os.chmod(path, mode)


def prepare_job_dirs(dirs: JobDirs, job_id: str, t: JobTenancy, *, data: bool = True) -> None:
    """The job's directories, before its data is staged or its learners start: the job directory the
    server's (learners may pass through it, not list or change it), the learner's own ones and the tenant's
    area its OS user's, 0700. data=False: a job without a data source gets no data directory (its learners
    are not told of one, nor is one bound into their sandbox): an inode fewer per job."""
    for shared in (dirs.root / "jobs", dirs.root / "tenants"):
        _own(shared, 0o711, None)
    _own(dirs.job(job_id), 0o711 if t.run_as is not None else 0o700, None)
    for own in (dirs.work(job_id), dirs.checkpoints(job_id), dirs.results(job_id), t.area.home):
        _own(own, 0o700, t.run_as)
    if data:
        _own(dirs.data(job_id), 0o700, t.run_as)
