"""The frozen input of decide(): the cluster, its free capacity, the jobs and the tenants, at one instant."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import overload

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.frozen import fast_init, lazy_attribute
from loadmaster.core.job import Allocation, JobSpec


@fast_init
@dataclass(frozen=True, slots=True)
class JobView:
    """What the scheduler may know of a job: its spec and its progress, never its future.

    Progress is stored as of `as_of` and extrapolated linearly with `rate` (work-seconds per second), so a
    running job's view need not change between events. `as_of` may lie in the future while a restarted job
    pays its restart overhead; progress is clamped until then.
    """

    spec: JobSpec
    queued_since: float
    attempt: int = 1
    allocation: Allocation | None = None
    work_done_s: float = 0.0
    rate: float = 0.0
    as_of: float = 0.0
    attained_gpu_s: float = 0.0
    preemptions: int = 0
    started_at: float | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def running(self) -> bool:
        return self.allocation is not None

    def work_at(self, clock: float) -> float:
        return self.work_done_s + self.rate * max(0.0, clock - self.as_of)

    def remaining_at(self, clock: float) -> float:
        """Expected remaining work-seconds of the current attempt (the scheduler's estimate)."""
        return max(0.0, self.spec.duration_s - self.work_at(clock))

    def attained_at(self, clock: float) -> float:
        """GPU-seconds of service received so far (Tiresias' attained service)."""
        alloc = self.allocation
        if alloc is None:
            return self.attained_gpu_s
        # alloc.gpus and max(0.0, ...) without their calls (asked at every end of an attempt that is not the
        # job's last, and at every preemption).
        ran = clock - self.as_of
        return self.attained_gpu_s + len(alloc.learner_nodes) * alloc.gpus_per_learner * (ran if ran > 0.0 else 0.0)


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A tenant's GPU quota: `gpus` is guaranteed; it may borrow idle GPUs up to `borrow_limit` more."""

    name: str
    gpus: int
    borrow_limit: int | None = None  # None: may borrow any idle GPU

    @property
    def max_gpus(self) -> float:
        return float("inf") if self.borrow_limit is None else self.gpus + self.borrow_limit


# A shell's free GPUs, CPUs and memory summed over the servers, and the most free GPUs on one server.
FreeTotals = tuple[float, float, float, float]


class FreeLedger:
    """The sums of a shell's free arrays, and the servers at each free-GPU count (free-GPU buckets, each in
    server order), kept as the shell changes the arrays (O(servers changed) per start or end): a snapshot is
    given its totals, its largest free-GPU count and the buckets instead of reducing every array at every
    decision, and a best-fit placer finds the tightest server from the buckets without a scan.

    Sums of whole GPUs are exact; CPU and memory sums may differ from a fresh sum in the last bits (their
    readers compare them with a tolerance)."""

    __slots__ = ("buckets", "cpus", "gpus", "mem", "top")

    def __init__(self, gpus: npt.NDArray[np.float64], cpus: npt.NDArray[np.float64],
                 mem: npt.NDArray[np.float64]) -> None:
        # Free-GPU count -> the servers with that many free, in server order; the counts in rising order
        # (build's free_buckets). The one dict for the ledger's life, changed in place: a snapshot given it
        # (the shell's own) must be done with before the ledger changes.
        self.buckets: dict[float, list[int]] = {}
        # The largest free-GPU count (the largest bucket key), set again only when a bucket comes or goes:
        # every decision reads it, and the keys change far less often.
        self.top = 0.0
        self.gpus = self.cpus = self.mem = 0.0
        self.reset(gpus, cpus, mem)

    def reset(self, gpus: npt.NDArray[np.float64], cpus: npt.NDArray[np.float64],
              mem: npt.NDArray[np.float64]) -> None:
        """Recount from the arrays (after a shell overwrote them wholesale)."""
        self.gpus, self.cpus, self.mem = float(gpus.sum()), float(cpus.sum()), float(mem.sum())
        buckets: dict[float, list[int]] = {}
        for node, g in enumerate(gpus.tolist()):
            buckets.setdefault(g, []).append(node)  # in server order: enumerate goes up
        self.buckets.clear()
        self.buckets.update(sorted(buckets.items()))  # in rising free-GPU count (buckets)
        self.top = next(reversed(self.buckets)) if self.buckets else 0.0  # the counts in rising order

    def shift_gpus(self, free_gpus: npt.NDArray[np.float64], node: int, taken: float) -> float:
        """Server `node` gives `taken` GPUs (a negative count: gets them back) in `free_gpus`, the shell's array
        these sums and buckets describe: the array, the GPU sum and the server's bucket moved in one call (a
        shell whose gang is one GPU-only learner, most of Philly's, does this twice per attempt); returns the
        GPUs left free there."""
        had = free_gpus.item(node)
        left = had - taken
        free_gpus[node] = left
        self.gpus += left - had
        if left == had:
            return left
        # The server leaves the bucket of `had` free for that of `left`, each kept in server order.
        buckets = self.buckets
        old = buckets[had]
        came_or_went = len(old) == 1
        if came_or_went:
            del buckets[had]
        else:
            del old[bisect_left(old, node)]
        new = buckets.get(left)
        if new is None:
            # A bucket comes (far less often than a server moves): the keys put in rising order again, in place
            # (snapshots hold this dict), so that a best-fit search walks them without sorting (buckets).
            came_or_went = True
            if buckets and left < next(reversed(buckets)):
                buckets[left] = [node]
                items = sorted(buckets.items())
                buckets.clear()
                buckets.update(items)
            else:  # above every count: in order as it is
                buckets[left] = [node]
        else:
            insort(new, node)
        if came_or_went:  # the largest count, the last key (never none: `left` has one)
            self.top = next(reversed(buckets))
        return left

    def shift_cpus_mem(self, free_cpus: npt.NDArray[np.float64], free_mem: npt.NDArray[np.float64], node: int,
                       d_cpus: float, d_mem: float) -> tuple[float, float]:
        """Server `node`'s free CPUs and memory change by d_cpus and d_mem in the shell's arrays, and their sums
        with them; returns what is left free there (a gang that asks for CPUs or memory: shift_gpus() too)."""
        left_cpus = free_cpus.item(node) + d_cpus
        left_mem = free_mem.item(node) + d_mem
        free_cpus[node] = left_cpus
        free_mem[node] = left_mem
        self.cpus += d_cpus
        self.mem += d_mem
        return left_cpus, left_mem

    def totals(self) -> FreeTotals:
        """(free GPUs, CPUs, memory over all servers, the most free GPUs on one server): build's free_totals."""
        return self.gpus, self.cpus, self.mem, self.top


class ShellFrame:
    """What a shell passes build() unchanged at every event, checked once: its cluster, read-only views of its
    free arrays (copy=False) with the FreeLedger that keeps their sums, largest count and buckets, its quotas
    and tenant GPUs as read-only mappings it keeps up to date, and its providers of the running jobs, of them
    per tenant and per priority class, and of the queued tenants. at() then makes each snapshot with one dict
    copy and the few values that change; the snapshot is build()'s."""

    __slots__ = ("_fixed", "_ledger")

    def __init__(self, cluster: Cluster, free_gpus: npt.NDArray[np.float64], free_cpus: npt.NDArray[np.float64],
                 free_mem: npt.NDArray[np.float64], ledger: FreeLedger, running: Callable[[], tuple[JobView, ...]],
                 tenants: Mapping[str, TenantQuota], tenant_gpus: Mapping[str, int],
                 running_by_tenant: Callable[[], Mapping[str, tuple[JobView, ...]]],
                 queued_tenants: Callable[[], Iterable[str]],
                 running_priorities: Callable[[], Mapping[int, int]] | None = None) -> None:
        # Each of these is shared by every snapshot made here: it must be the shell's own, never a copy that
        # build() would freeze at this instant (the ledger too: it must describe these arrays as they change).
        for name, value in (("free_gpus", free_gpus), ("free_cpus", free_cpus), ("free_mem", free_mem)):
            if value.flags.writeable or value.dtype != np.float64:
                raise ValueError(f"ShellFrame: {name} must be a read-only float64 view of the shell's array")
        for name, mapping in (("tenants", tenants), ("tenant_gpus", tenant_gpus)):
            if not isinstance(mapping, MappingProxyType):
                raise ValueError(f"ShellFrame: {name} must be a read-only mapping the shell keeps (MappingProxyType)")
        if not callable(running):
            raise ValueError("ShellFrame: running must be a provider (a tuple would be this instant's)")
        # The ledger's buckets are one dict for its life (changed in place): fixed like the arrays' views.
        built = Snapshot.build(0.0, cluster, free_gpus, free_cpus, free_mem, (), running, tenants, tenant_gpus,
                               running_by_tenant, None, queued_tenants, copy=False,
                               running_priorities=running_priorities, free_buckets=ledger.buckets).__dict__
        # Made without deleting from it: at()'s update() of a new snapshot's empty __dict__ copies a dict that
        # never lost a key as one block, and one that did key by key.
        self._fixed = {k: v for k, v in built.items() if k not in ("clock", "queued")}
        self._ledger = ledger

    def at(self, clock: float, queued: Sequence[JobView],
           running_elastic: Callable[[], tuple[JobView, ...]] | tuple[JobView, ...]) -> Snapshot:
        """build(clock, <the frame's>, queued, ..., free_totals=<the ledger's>, free_buckets=<the ledger's>)
        with `running_elastic`."""
        snap = Snapshot.__new__(Snapshot)
        d = snap.__dict__
        d.update(self._fixed)
        d["clock"] = clock
        d["queued"] = queued if isinstance(queued, LazyJobs) else tuple(queued)
        # The ledger's totals() without the call (one per decision).
        ledger = self._ledger
        d["free_gpu_total"] = ledger.gpus
        d["free_cpu_total"] = ledger.cpus
        d["free_mem_total"] = ledger.mem
        d["max_free_gpus"] = ledger.top
        if type(running_elastic) is tuple:
            d["running_elastic"] = running_elastic
        else:
            d["_running_elastic_provider"] = running_elastic
        return snap


def free_after(cluster: Cluster, running: Iterable[JobView]) -> tuple[
        npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Free GPUs, CPUs and memory per node: the cluster's capacity less what the running jobs hold. Values can
    go negative on an overcommitted node; callers that can meet one decide what that means."""
    gpus = cluster.gpu_capacity.astype(np.float64)
    cpus = cluster.cpu_capacity.astype(np.float64)
    mem = cluster.mem_capacity.astype(np.float64)
    for view in running:
        alloc = view.allocation
        assert alloc is not None, f"{view.job_id} is not running"
        for node, count in alloc.per_node().items():
            gpus[node] -= count * alloc.gpus_per_learner
            cpus[node] -= count * alloc.cpus_per_learner
            mem[node] -= count * alloc.mem_gb_per_learner
    return gpus, cpus, mem


def _frozen(a: npt.NDArray[np.float64] | npt.NDArray[np.int64], copy: bool = True) -> npt.NDArray[np.float64]:
    """A read-only float array of `a`: a copy, or (copy=False, `a` already float) a read-only view (`a` itself
    if it already is one: a shell may keep read-only views of its arrays and pass them at every event)."""
    if not copy and not a.flags.writeable and a.dtype == np.float64:
        return a  # type: ignore[return-value]
    out: npt.NDArray[np.float64] = (np.array(a, dtype=np.float64) if copy or a.dtype != np.float64
                                    else a.view(np.float64))
    out.flags.writeable = False
    return out


class LazyJobs(Sequence[JobView]):
    """A shell's queued jobs, copied into a tuple only if something iterates them: a shell that keeps its
    queue in a Session hands decide() this instead of copying a long queue at every event. The shell must
    not change the jobs the provider returns while decide() runs."""

    __slots__ = ("_jobs", "_len", "_provider")

    def __init__(self, provider: Callable[[], tuple[JobView, ...]], length: int) -> None:
        self._provider = provider
        self._len = length
        self._jobs: tuple[JobView, ...] | None = None

    def _all(self) -> tuple[JobView, ...]:
        if self._jobs is None:
            self._jobs = self._provider()
        return self._jobs

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[JobView]:
        return iter(self._all())

    @overload
    def __getitem__(self, i: int) -> JobView: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[JobView]: ...

    def __getitem__(self, i: int | slice) -> JobView | Sequence[JobView]:
        return self._all()[i]


@dataclass(frozen=True)
class Snapshot:
    clock: float
    cluster: Cluster
    free_gpus: npt.NDArray[np.float64]
    free_cpus: npt.NDArray[np.float64]
    free_mem: npt.NDArray[np.float64]
    queued: Sequence[JobView]  # a tuple, or a LazyJobs a Session-keeping shell passes
    tenants: Mapping[str, TenantQuota]
    tenant_gpus: Mapping[str, int]  # GPUs each tenant's running jobs hold (derived from `running`)
    # Free-GPU count -> servers with that many free, in server order, the counts in rising order, where the
    # shell keeps them (FreeLedger).
    free_buckets: Mapping[float, list[int]] | None = None

    @lazy_attribute
    def free_gpu_total(self) -> float:
        """Free GPUs over all servers: given by a shell that keeps the sum as it changes (build's free_totals),
        else summed once, on first use (FreeCapacity and DRF's gate ask at every decision)."""
        return float(self.free_gpus.sum())

    @lazy_attribute
    def free_cpu_total(self) -> float:
        return float(self.free_cpus.sum())

    @lazy_attribute
    def free_mem_total(self) -> float:
        return float(self.free_mem.sum())

    @lazy_attribute
    def max_free_gpus(self) -> float:
        """The most free GPUs on any one server (0 on a cluster without servers)."""
        return float(self.free_gpus.max()) if self.free_gpus.size else 0.0

    @lazy_attribute
    def running(self) -> tuple[JobView, ...]:
        """The running jobs: given to build(), or made on first use by the shell's provider. Most decisions
        of a lightly loaded cluster never read them, and a tuple of ~1,000 views per event cost more than
        the decision itself."""
        return tuple(self.__dict__["_running_provider"]())

    @lazy_attribute
    def running_by_tenant(self) -> Mapping[str, tuple[JobView, ...]]:
        """Running jobs grouped by tenant (computed on first use, by the shell's provider if it gave one)."""
        provider = self.__dict__.get("_running_by_tenant_provider")
        if provider is not None:
            return MappingProxyType({t: js for t, js in provider().items() if js})
        groups: dict[str, list[JobView]] = {}
        for job in self.running:
            groups.setdefault(job.spec.tenant, []).append(job)
        return MappingProxyType({t: tuple(js) for t, js in groups.items()})

    @lazy_attribute
    def queued_tenants(self) -> frozenset[str]:
        """Tenants with a queued job (from the queue, or the shell's provider if it gave one)."""
        provider = self.__dict__.get("_queued_tenants_provider")
        if provider is not None:
            return frozenset(provider())
        return frozenset(j.spec.tenant for j in self.queued)

    @lazy_attribute
    def running_priorities(self) -> Mapping[int, int]:
        """Running jobs per priority class (JobSpec.priority), classes without one left out (from the running
        jobs, or the shell's provider if it gave one: counting ~900 running jobs per decision was most of what
        the priority policy cost over fifo)."""
        provider = self.__dict__.get("_running_priorities_provider")
        if provider is not None:
            return MappingProxyType(dict(provider()))
        counts: dict[int, int] = {}
        for job in self.running:
            counts[job.spec.priority] = counts.get(job.spec.priority, 0) + 1
        return MappingProxyType(counts)

    @lazy_attribute
    def running_elastic(self) -> tuple[JobView, ...]:
        """Running elastic jobs (computed on first use, by the shell's provider if it gave one)."""
        provider = self.__dict__.get("_running_elastic_provider")
        if provider is not None:
            return tuple(provider())
        return tuple(j for j in self.running if j.spec.elastic)

    @classmethod
    def build(
        cls,
        clock: float,
        cluster: Cluster,
        free_gpus: npt.NDArray[np.int64] | npt.NDArray[np.float64],
        free_cpus: npt.NDArray[np.float64],
        free_mem: npt.NDArray[np.float64],
        queued: Sequence[JobView],
        running: tuple[JobView, ...] | Callable[[], tuple[JobView, ...]],
        tenants: Mapping[str, TenantQuota] | None = None,
        tenant_gpus: Mapping[str, int] | None = None,
        running_by_tenant: Callable[[], Mapping[str, tuple[JobView, ...]]] | None = None,
        running_elastic: Callable[[], tuple[JobView, ...]] | tuple[JobView, ...] | None = None,
        queued_tenants: Callable[[], Iterable[str]] | None = None,
        copy: bool = True,
        running_priorities: Callable[[], Mapping[int, int]] | None = None,
        free_totals: FreeTotals | None = None,
        free_buckets: Mapping[float, list[int]] | None = None,
    ) -> Snapshot:
        """Copy the mutable inputs so that the snapshot cannot change under decide().

        tenant_gpus and running_by_tenant may be passed by a shell that keeps them up to date
        incrementally; they must agree with `running` (they are derived from it when omitted).
        running_elastic: the running elastic jobs, or a provider of them called at most once, on first use.
        running_priorities: a provider of the running jobs per priority class (no zeros), likewise.
        running_by_tenant is a provider called at most once, on first use inside decide(), so a policy
        that never asks costs nothing; the shell must not change its state while decide() runs.
        copy=False makes the free arrays read-only views of the shell's instead of copies: for a shell that
        changes them only after it is done with the snapshot (the simulator, at every event).
        `running` may be a provider, called at most once, on first use (then tenant_gpus must be given).
        free_totals: the free arrays' sums and largest free-GPU count, kept by a shell as it changes them
        (FreeLedger), so that no decision sums 500 servers again; they must agree with the arrays.
        free_buckets: the servers at each free-GPU count, in server order, the counts in rising order
        (FreeLedger.buckets), for placers that look for the tightest server; it must agree with free_gpus and
        not change while decide() runs.
        """
        if tenant_gpus is None:
            if callable(running):
                raise ValueError("Snapshot.build: a running-jobs provider needs tenant_gpus (counting them would "
                                 "call the provider and lose its laziness)")
            usage: dict[str, int] = {}
            for job in running:
                if job.allocation is not None:
                    usage[job.spec.tenant] = usage.get(job.spec.tenant, 0) + job.allocation.gpus
            tenant_gpus = usage
        # The fields set straight into the instance: the frozen dataclass' __init__ (object.__setattr__ per
        # field) cost as much as the rest of build(), once per simulated event.
        snap = cls.__new__(cls)
        snap.__dict__.update(
            clock=clock,
            cluster=cluster,
            free_gpus=_frozen(free_gpus, copy),
            free_cpus=_frozen(free_cpus, copy),
            free_mem=_frozen(free_mem, copy),
            queued=queued if isinstance(queued, LazyJobs) else tuple(queued),
            # A read-only mapping is the shell's promise that it does not change it (the simulator's quotas).
            tenants=tenants if isinstance(tenants, MappingProxyType) else MappingProxyType(dict(tenants or {})),
            # Likewise a read-only tenant_gpus promises that it holds no zeros (the simulator keeps it so).
            tenant_gpus=(tenant_gpus if isinstance(tenant_gpus, MappingProxyType)
                         else MappingProxyType({t: g for t, g in tenant_gpus.items() if g})),
        )
        if free_totals is not None:
            d = snap.__dict__
            d["free_gpu_total"], d["free_cpu_total"], d["free_mem_total"], d["max_free_gpus"] = free_totals
        snap.__dict__["free_buckets"] = free_buckets
        if callable(running):
            snap.__dict__["_running_provider"] = running
        else:
            snap.__dict__["running"] = tuple(running)
        if running_by_tenant is not None:
            snap.__dict__["_running_by_tenant_provider"] = running_by_tenant
        if type(running_elastic) is tuple:
            # Given outright (a shell that knows there are none passes ()): read at every decision, and a
            # lazy attribute's first read costs more than the rest of a lone arrival's checks.
            snap.__dict__["running_elastic"] = running_elastic
        elif running_elastic is not None:
            snap.__dict__["_running_elastic_provider"] = running_elastic
        if queued_tenants is not None:
            snap.__dict__["_queued_tenants_provider"] = queued_tenants
        if running_priorities is not None:
            snap.__dict__["_running_priorities_provider"] = running_priorities
        return snap

    @classmethod
    def of_running(cls, clock: float, cluster: Cluster, queued: tuple[JobView, ...], running: tuple[JobView, ...],
                   tenants: Mapping[str, TenantQuota] | None = None) -> Snapshot:
        """A snapshot whose free capacity is derived from the running jobs' allocations (tests, benchmarks)."""
        return cls.build(clock, cluster, *free_after(cluster, running), queued, running, tenants)

    @classmethod
    def idle(cls, clock: float, cluster: Cluster, queued: tuple[JobView, ...] = (),
             tenants: Mapping[str, TenantQuota] | None = None) -> Snapshot:
        """A snapshot of an empty cluster (tests, estimates)."""
        return cls.build(clock, cluster, cluster.gpu_capacity, cluster.cpu_capacity, cluster.mem_capacity,
                         queued, (), tenants)
