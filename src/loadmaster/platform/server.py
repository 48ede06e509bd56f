"""`loadmaster server`: the store, the cluster, the executor, the control loop and the API in one process.

Start-up order: check the options, bind the port and lock the data directory (a port in use, or a second
server on the same data, fails before the store is created or an admin token is made, so a first start
that fails leaves nothing whose token was never shown), open the store (migrating it), make sure an admin
token exists, describe the cluster, recover() what a previous server left running (and reconcile), start
the loop, serve. SIGINT/SIGTERM stop the API (open log streams end), then the loop; learners keep running
and the next start re-attaches them. Child processes (the queue estimator's) die with the server, however
it dies.
"""

from __future__ import annotations

import fcntl
import inspect
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from sqlalchemy import func, select

from loadmaster.core.cluster import Cluster
from loadmaster.platform.api.app import create_app
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.serving import HANDLED, ApiServer
from loadmaster.platform.code import DEFAULT_MAX_MB
from loadmaster.platform.control.loop import ControlLoop
from loadmaster.platform.control.reports import RecoveryReport
from loadmaster.platform.executors.base import Executor
from loadmaster.platform.executors.sandbox import find_bwrap
from loadmaster.platform.gc_tuning import tune_for_serving
from loadmaster.platform.layout import JobDirs
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.models import Tenant
from loadmaster.platform.store.tenants import ensure_admin_token
from loadmaster.platform.tenancy import DEFAULT_UID_BASE, Isolation
from loadmaster.scheduling.placement import PLACERS, make_placer
from loadmaster.scheduling.policies import POLICIES, Policy

log = logging.getLogger("loadmaster.server")

EXECUTORS = ("local", "ray")
ADMIN_ENV = "LOADMASTER_ADMIN_TOKEN"
MASTER_PORTS_ENV = "LOADMASTER_MASTER_PORTS"  # Ray: the range rank 0's node picks MASTER_PORT from


class ServerError(ValueError):
    """An option the server cannot start with; the message names it and the fix."""


@dataclass(frozen=True)
class ServerOptions:
    db: str | None = None  # None: SQLite in the data directory
    executor: str = "local"
    nodes: str | None = None  # None: this machine as it is (nvidia-smi)
    host: str = "127.0.0.1"
    port: int = 8080
    policy: str = "fair"
    placement: str = "pack"
    data_dir: Path | None = None  # None: the user's data directory
    tick_s: float = 0.5
    grace_s: float = 10.0
    checkpoint_interval_s: float | None = None  # None: the policies' default (900 s)
    dashboard: bool = True
    # Isolation (platform/tenancy.py, docs/platform.md "Security"). sandbox: "auto" (bubblewrap if it works
    # here), "none", or the bwrap binary's path (required then); tenant_users: learners run as each tenant's
    # own OS user when the server runs as root; insecure_shared_user: allow more than one tenant without a
    # sandbox. admin_token_file: the admin token from a file only its owner may read (0600).
    sandbox: str = "auto"
    tenant_users: bool = True
    uid_base: int = DEFAULT_UID_BASE
    insecure_shared_user: bool = False
    admin_token_file: Path | None = None
    max_upload_mb: float = DEFAULT_MAX_MB  # a code package's files, unpacked
    # Defragment: move smaller running jobs (halt with a checkpoint, requeue) so that a gang waiting on
    # fragmentation starts (decide()'s `migrate`).
    migrate: bool = False
    # Smoke test first: a new multi-GPU job's attempt first runs this many seconds on one GPU (0: off).
    smoke_test_s: float = 0.0

    def check(self) -> None:
        if self.executor not in EXECUTORS:
            raise ServerError(f"--executor {self.executor!r}: choose one of {', '.join(EXECUTORS)}")
        if self.policy not in POLICIES:
            raise ServerError(f"--policy {self.policy!r}: choose one of {', '.join(POLICIES)}")
        if self.placement not in PLACERS:
            raise ServerError(f"--placement {self.placement!r}: choose one of {', '.join(PLACERS)}")
        if not 0 <= self.port <= 65535:
            raise ServerError(f"--port {self.port}: a TCP port is 0..65535 (0 picks a free one)")
        if not 0 < self.max_upload_mb <= 1 << 20:
            raise ServerError(f"--max-upload-mb {self.max_upload_mb:g}: give the most MiB a job's code package "
                              "may unpack to, more than 0")
        if self.checkpoint_interval_s is not None and not self.checkpoint_interval_s > 0:
            raise ServerError(f"--checkpoint-interval {self.checkpoint_interval_s:g}: give the seconds between the "
                              "jobs' checkpoints, more than 0")
        if not 0 <= self.smoke_test_s <= 86400:
            raise ServerError(f"--smoke-test {self.smoke_test_s:g}: give the seconds a new multi-GPU job first runs "
                              "on one GPU, 0 (off) to 86400")
        if not 1000 <= self.uid_base <= 2**31 - 2**20:
            raise ServerError(f"--uid-base {self.uid_base}: give the first uid of a free range, 1000..{2**31 - 2**20}")
        if self.executor == "ray" and self.nodes:
            raise ServerError("--nodes describes this machine for the local executor; with --executor ray the "
                              "nodes are the Ray cluster's (label them with `ray start --labels=loadmaster/node="
                              "NAME`)")


def data_dir(options: ServerOptions) -> Path:
    if options.data_dir is not None:
        return options.data_dir.expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("loadmaster"))


def server_policy(options: ServerOptions) -> Policy:
    """The policy by name, told the jobs' checkpoint interval where it weighs the work a preemption loses."""
    factory = POLICIES[options.policy]
    if options.checkpoint_interval_s is not None and \
            "checkpoint_interval_s" in inspect.signature(factory.target).parameters:
        return factory(checkpoint_interval_s=options.checkpoint_interval_s)
    return factory()


def isolation_of(options: ServerOptions) -> Isolation:
    if options.executor == "ray":
        # Ray starts learners as its workers' user, on other machines: no user switch, no sandbox there (yet).
        # What still holds: the clean environment and the path checks; more than one tenant needs the flag.
        if options.sandbox not in ("auto", "none"):
            raise ServerError(f"--sandbox {options.sandbox}: the ray executor has no sandbox; use --sandbox auto"
                              " (learners then run as the Ray workers' user, unconfined)")
        return Isolation(uid_base=options.uid_base, insecure_shared_user=options.insecure_shared_user)
    sandbox = find_bwrap(options.sandbox)
    if sandbox is None and options.sandbox not in ("auto", "none"):
        raise ServerError(f"--sandbox {options.sandbox}: this bubblewrap cannot make a sandbox here (missing, or user "
                          "namespaces are off); install the bubblewrap package, or use --sandbox auto|none")
    return Isolation(switch_users=options.tenant_users and os.geteuid() == 0, sandbox=sandbox,
                     uid_base=options.uid_base, insecure_shared_user=options.insecure_shared_user)


def read_admin_token(options: ServerOptions, env: Mapping[str, str]) -> str | None:
    """The admin token from --admin-token-file (which only its owner may read) or LOADMASTER_ADMIN_TOKEN."""
    path = options.admin_token_file
    if path is None:
        return env.get(ADMIN_ENV) or None
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as err:
        raise ServerError(f"--admin-token-file {path}: {err.strerror}") from None
    if mode & 0o077:
        raise ServerError(f"--admin-token-file {path}: others may read it (mode {mode & 0o777:o}); chmod 600 it")
    return text or None


def _harden(root: Path, db_url: str, isolation: Isolation) -> None:
    """The data directory: tenants' users may pass through it to their own directories, not list it; the
    SQLite database (tokens' hashes, manifests) is the server's alone."""
    os.chmod(root, 0o711)
    if db_url.startswith("sqlite:///"):
        for suffix in ("", "-wal", "-shm"):
            db = Path(db_url.removeprefix("sqlite:///") + suffix)
            if db.exists():
                os.chmod(db, 0o600)
    if isolation.switch_users:
        for parent in (root, *root.parents):
            if not parent.stat().st_mode & 0o001:
                raise ServerError(f"--data-dir {root}: its parent {parent} is closed to other users (mode "
                                  f"{parent.stat().st_mode & 0o777:o}), so tenants' learners could not reach their "
                                  "directories; choose a data directory like /var/lib/loadmaster")


def _tenant_gate(store: Store, isolation: Isolation) -> None:
    if isolation.sandbox is not None or isolation.insecure_shared_user:
        return
    with store.session() as s:
        count = s.scalar(select(func.count()).select_from(Tenant)) or 0
    if count > 1:
        raise ServerError(f"this store has {count} tenants, but there is no sandbox here (bubblewrap): one tenant's "
                          "jobs could read and change another's files; install bubblewrap, or start with "
                          "--insecure-shared-user to accept that")


def _local(options: ServerOptions, root: Path, isolation: Isolation) -> tuple[Cluster, Executor]:
    from loadmaster.platform.executors.local import LocalExecutor
    from loadmaster.platform.nodes import NodesSpecError, local_gpu_map, parse_nodes, probe_machine

    machine = probe_machine()
    try:
        cluster = parse_nodes(options.nodes, machine)
    except NodesSpecError as err:
        raise ServerError(str(err)) from None
    return cluster, LocalExecutor(gpu_map=local_gpu_map(cluster, machine), failure_grace_s=options.grace_s,
                                  survey_root=root, sandbox=isolation.sandbox)


class DataDirLock:
    """An exclusive lock on the data directory for the server's life: two servers driving the same learners
    and the same store would each think the other's learners are orphans."""

    def __init__(self, root: Path) -> None:
        self.path = root / "server.lock"
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise ServerError(f"--data-dir {root}: another loadmaster server uses this data directory; stop it, "
                              "or give this one another --data-dir") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _ray(options: ServerOptions, env: Mapping[str, str], isolation: Isolation) -> tuple[Cluster, Executor]:
    import ray

    from loadmaster.core.cluster import Node
    from loadmaster.platform.executors.ray import MASTER_PORTS, NAMESPACE, RayExecutor

    if not ray.is_initialized():
        # RAY_ADDRESS, a running local cluster, or a new local instance (ray.init's own rules).
        ray.init(namespace=NAMESPACE, log_to_driver=False)
    executor = RayExecutor(address=env.get("RAY_ADDRESS"), failure_grace_s=options.grace_s,
                           master_ports=_port_range(env.get(MASTER_PORTS_ENV), MASTER_PORTS))
    # The cluster at start: every node Ray lists, dead ones included (their open attempts are recovered
    # and ended as lost); from then on it follows Ray's node table (control/membership.py).
    cluster = Cluster(tuple(Node(m.name, m.gpus, m.cpus, m.mem_gb, gpu_type=m.gpu_type, rack=m.name)
                            for m in executor.members()), name="ray")
    return cluster, executor


def _port_range(text: str | None, default: tuple[int, int]) -> tuple[int, int]:
    """LOW-HIGH (HIGH excluded) for the learners' MASTER_PORT pairs."""
    if not text:
        return default
    low, sep, high = text.partition("-")
    if not (sep and low.strip().isdigit() and high.strip().isdigit() and 0 < int(low) < int(high) - 1 <= 65535):
        raise ServerError(f"{MASTER_PORTS_ENV}={text!r}: give a port range LOW-HIGH, e.g. 29500-30000 (HIGH "
                          "excluded, at least 2 ports)")
    return int(low), int(high)


@dataclass
class Platform:
    options: ServerOptions
    store: Store
    cluster: Cluster
    executor: Executor
    dirs: JobDirs
    loop: ControlLoop
    ctx: ApiContext
    app: Any
    admin_token: str | None  # generated at this (first) start: to print once; None otherwise
    api: ApiServer
    lock: DataDirLock
    recovery: RecoveryReport | None = None
    started_at: float = field(default_factory=time.perf_counter)  # when build() began

    @classmethod
    def build(cls, options: ServerOptions, env: Mapping[str, str] | None = None) -> Platform:
        started = time.perf_counter()
        env = os.environ if env is None else env
        options.check()
        root = data_dir(options)
        root.mkdir(parents=True, exist_ok=True)
        lock = DataDirLock(root)
        closing = threading.Event()
        try:
            api = ApiServer(None, options.host, options.port, on_exit=closing.set)
        except BaseException:
            lock.release()
            raise
        store: Store | None = None
        try:
            isolation = isolation_of(options)
            admin_secret = read_admin_token(options, env)
            db_url = options.db or f"sqlite:///{root / 'loadmaster.db'}"
            store = Store.open(db_url)
            cluster, executor = (_local(options, root, isolation) if options.executor == "local"
                                 else _ray(options, env, isolation))
            _harden(root, db_url, isolation)
            _tenant_gate(store, isolation)
            with store.session() as s:  # last: a start that fails before this never made a token nobody saw
                admin = ensure_admin_token(s, admin_secret, time.time())
            dirs = JobDirs(root)
            loop = ControlLoop(store, cluster, executor, dirs, policy=server_policy(options),
                               placer=make_placer(options.placement), tick_s=options.tick_s,
                               grace_s=options.grace_s, isolation=isolation, migrate=options.migrate,
                               smoke_test_s=options.smoke_test_s)
        except BaseException:
            api.close()
            if store is not None:
                store.close()
            lock.release()
            raise
        ctx = ApiContext(store, cluster, dirs, loop=loop, closing=closing, metrics=loop.metrics.registry,
                         nodes=loop.membership, isolation=isolation,
                         max_code_bytes=int(options.max_upload_mb * (1 << 20)))
        app = create_app(ctx)
        if options.dashboard:
            from loadmaster.web import mount_dashboard

            mount_dashboard(app)
        api.attach(app)
        return cls(options, store, cluster, executor, dirs, loop, ctx, app, admin, api, lock, started_at=started)

    def start(self) -> None:
        """Recover, start the loop (the API then serves with run() or in a thread)."""
        self.recovery = self.loop.recover()
        tune_for_serving()
        self.loop.start()

    def serve(self, out: TextIO = sys.stdout, on_ready: Callable[[Platform], None] | None = None) -> None:
        """Run until SIGINT/SIGTERM, then shut down cleanly (a signal during start-up too)."""
        stopping = threading.Event()

        def on_signal(_sig: int, _frame: FrameType | None) -> None:
            stopping.set()
            self.ctx.closing.set()
            if self.api is not None:
                self.api.server.should_exit = True  # uvicorn, starting or serving, stops at its next check

        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, on_signal) for sig in HANDLED} if main else {}
        try:
            self.start()
            if stopping.is_set():
                return
            self.announce(out)
            if on_ready is not None:
                on_ready(self)
            self.api.run()  # installs its own handlers (same effect) while it serves
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.shutdown()

    def serve_in_thread(self) -> str:
        """Start everything with the API in a background thread (tests, benchmarks); its URL."""
        try:
            self.start()
            self.api.start_in_thread()
        except BaseException:
            self.shutdown()
            raise
        return self.api.url

    def shutdown(self) -> None:
        self.ctx.closing.set()
        if self.api.in_thread:
            self.api.stop()
        self.api.close()
        self.loop.stop()
        self.executor.close()
        self.store.close()
        self.lock.release()
        log.info("stopped; running learners keep running and are re-attached at the next start")

    def announce(self, out: TextIO) -> None:
        o = self.options
        url = self.api.url
        rec = self.recovery
        lines = [
            f"loadmaster server on {url}  (API docs {url}/docs" + (f", dashboard {url}/ui)" if o.dashboard else ")"),
            f"  store     {self.store.engine.url.render_as_string(hide_password=True)}",
            f"  data      {self.dirs.root}",
            f"  cluster   {self.cluster.describe()}; executor {o.executor}; policy {o.policy}; "
            f"placement {o.placement}",
            f"  isolation {self.ctx.isolation.describe() if self.ctx.isolation else 'none'}",
        ]
        if self.ctx.isolation is not None and self.ctx.isolation.sandbox is None:
            lines.append("  WARNING   no sandbox (install bubblewrap): tenants' jobs are not confined; "
                         + ("more than one tenant allowed (--insecure-shared-user)"
                            if self.ctx.isolation.insecure_shared_user else "one tenant only"))
        if rec is not None and (rec.reattached or rec.requeued or rec.restaged or rec.restored):
            lines.append(f"  recovered {len(rec.reattached)} re-attached, {len(rec.requeued)} requeued, "
                         f"{len(rec.restaged)} restaged, {len(rec.restored)} results copies redone")
        lines.append(f"  ready in  {time.perf_counter() - self.started_at:.2f} s")
        if self.admin_token:
            lines += ["", "Admin token (shown once; the server keeps only its hash):", f"  {self.admin_token}",
                      f"Use it as {ADMIN_ENV} for `loadmaster tenant create NAME --gpus N`.", ""]
        out.write("\n".join(lines) + "\n")
        out.flush()
