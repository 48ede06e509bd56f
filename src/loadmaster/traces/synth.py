"""Synthetic workloads that follow a published trace's statistics (`loadmaster trace synth --like ...`).

A *profile* is plain data: every distribution is a table of numbers measured from a trace or taken
from a paper, with its source in docs/workloads.md. One generator draws jobs from any profile, so a
new look-alike (a DLaaS-style profile, a Helios-style one) is a new `Profile(...)` value in PROFILES,
not a copied function.

The generator is vectorised with NumPy (117,000 jobs in about a second, most of it spent building
the JobSpec objects; the draws themselves take ~0.1 s) and draws everything
from one `numpy.random.default_rng(seed)`, in a fixed order, so the same (like, jobs, seed, load,
cluster_gpus) always gives the same workload, byte for byte once written as CSV.

How one job is drawn (each step's numbers are in the profile):
  tenant          by the tenant's job rate
  GPUs            from the tenant's own size mix (tenants differ a lot: some are almost all
                  1-GPU jobs, others mostly 8-GPU gangs); sizes above one server come from a
                  shared large-job shape
  learners        N <= gpus_per_server: one learner of N GPUs; else N / gpus_per_server learners
                  of a whole server each (large sizes are multiples of a server)
  final status    Pass / Killed / Failed shares
  duration        two lognormals: short runs (debugging, crash on start) and long training runs;
                  the long one grows with job size and shrinks for Failed jobs; the share of short
                  runs is solved so that the overall median hits the published median
  attempts        how many times the job was started; every attempt but the last failed, after a
                  runtime drawn from a measured quantile table (independent of the last attempt's
                  runtime: in the Philly sample the two are uncorrelated)
  user            Zipf-ranked users inside the tenant
  model           a model family (and batch size); data-parallel families only for multi-GPU jobs;
                  CPUs and host memory per GPU follow the family (Synergy, OSDI'22)
  submit time     non-homogeneous Poisson process: hourly and weekday rate profile over a span set
                  by the reference trace's job rate, or by the requested offered load
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from loadmaster.core.cluster import Cluster
from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.profiles import family_of
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces.closed_loop import close_loop

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass(frozen=True)
class Lognormal:
    """A lognormal distribution given by its median (seconds) and the sd of its log."""

    median_s: float
    sigma: float

    def cdf(self, x_s: float) -> float:
        z = (math.log(x_s) - math.log(self.median_s)) / self.sigma
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclass(frozen=True)
class Tenant:
    """A virtual cluster: how many jobs it submitted over how many days, its users and its size mix.

    size_counts is aligned with Profile.size_classes, plus one last entry: jobs larger than one
    server, whose exact size is drawn from the profile's shared large-job shape.
    """

    name: str
    jobs: int
    days: float
    users: int
    size_counts: tuple[int, ...]

    @property
    def jobs_per_day(self) -> float:
        return self.jobs / self.days


@dataclass(frozen=True)
class ModelFamily:
    """Models of one family; `name` leads the model string so the performance model finds the class.

    cpus_per_gpu / mem_gb_per_gpu: what a learner of this family benefits from per GPU.
    data_parallel: whether the family is run as a multi-GPU gang at all.
    """

    name: str
    batch_sizes: tuple[int, ...]
    cpus_per_gpu: float
    mem_gb_per_gpu: float
    data_parallel: bool

    def model_names(self) -> tuple[str, ...]:
        if not self.batch_sizes:
            return (self.name,)
        return tuple(f"{self.name} (batch size {b})" for b in self.batch_sizes)


@dataclass(frozen=True)
class Profile:
    """Everything that makes a synthetic workload look like one trace. Numbers only, no code."""

    name: str
    description: str
    # The reference trace's volume: `jobs` jobs over `span_s` seconds sets the default arrival rate.
    reference_jobs: int
    reference_span_s: float
    tenants: tuple[Tenant, ...]
    user_zipf_s: float
    # GPU sizes. size_classes are the sizes that fit one server; large_sizes (multiples of
    # gpus_per_server) are drawn with large_counts for a tenant's "larger than a server" share.
    size_classes: tuple[int, ...]
    large_sizes: tuple[int, ...]
    large_counts: tuple[int, ...]
    gpus_per_server: int
    # The server a learner must fit in: a learner never asks for more CPU or memory than this.
    server_cpus: float
    server_mem_gb: float
    status_weights: tuple[tuple[FinalStatus, float], ...]
    # Durations: mixture of `short` and `long` (long scaled by size and status factors), clipped.
    target_median_s: float
    short: Lognormal
    long: Lognormal
    long_size_factors: tuple[tuple[int, float], ...]  # (applies from this many GPUs up, factor)
    long_status_factors: tuple[tuple[FinalStatus, float], ...]
    min_duration_s: float
    max_duration_s: float
    # attempt_counts[k] jobs were started k+1 times.
    attempt_counts: tuple[int, ...]
    # Quantile table of failed-attempt runtimes: (probability, log10 seconds), probability 0 to 1.
    failed_runtime_log10_quantiles: tuple[tuple[float, float], ...]
    # Relative submission counts per hour of day (0..23) and per weekday (Monday..Sunday);
    # time 0 of a synthetic workload is a Monday 00:00.
    hourly_counts: tuple[int, ...]
    weekday_counts: tuple[int, ...]
    models: tuple[ModelFamily, ...]
    # Virtual clusters with fixed quotas (`synthesize(..., vcs=True)`): servers per VC from a published setup;
    # VCs not listed get one server each. Empty: the profile has no VC mode.
    vc_servers: tuple[tuple[str, int], ...] = ()
    # Bursts (hyperparameter sweeps): this share of a VC's jobs arrive in bursts of one user's jobs of one
    # size, burst_jobs jobs on average (geometric), spread over burst_s seconds on average (exponential).
    burst_share: float = 0.0
    burst_jobs: float = 1.0
    burst_s: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not self.tenants:
            problems.append("needs at least one tenant")
        for t in self.tenants:
            if len(t.size_counts) != len(self.size_classes) + 1:
                want = len(self.size_classes) + 1
                problems.append(f"tenant {t.name}: size_counts must have {want} entries")
            if t.jobs <= 0 or t.days <= 0 or t.users < 1 or sum(t.size_counts) <= 0:
                problems.append(f"tenant {t.name}: jobs, days, users and size_counts must be positive")
        if any(s > self.gpus_per_server for s in self.size_classes):
            problems.append("size_classes must fit one server")
        if len(self.large_sizes) != len(self.large_counts) or not self.large_sizes:
            problems.append("large_sizes and large_counts must be non-empty and of equal length")
        if any(s % self.gpus_per_server for s in self.large_sizes):
            problems.append("large_sizes must be whole servers (multiples of gpus_per_server)")
        if len(self.hourly_counts) != 24 or len(self.weekday_counts) != 7:
            problems.append("hourly_counts needs 24 entries and weekday_counts 7")
        q = self.failed_runtime_log10_quantiles
        if (len(q) < 2 or q[0][0] != 0.0 or q[-1][0] != 1.0
                or any(b[0] <= a[0] or b[1] < a[1] for a, b in itertools.pairwise(q))):
            problems.append("failed_runtime_log10_quantiles must run from probability 0 to 1, increasing")
        if not any(m.data_parallel for m in self.models) or not self.models:
            problems.append("needs models, at least one of them data-parallel")
        if problems:
            raise ValueError(f"profile {self.name}: " + "; ".join(problems))

    @property
    def statuses(self) -> tuple[FinalStatus, ...]:
        return tuple(s for s, _ in self.status_weights)

    def size_pmf(self) -> tuple[IntArray, FloatArray]:
        """Overall GPUs-per-job distribution (sizes, probabilities), tenants weighted by job rate."""
        sizes = np.array(self.size_classes + self.large_sizes, dtype=np.int64)
        tenant_p = _normalise([t.jobs_per_day for t in self.tenants])
        large_p = _normalise(self.large_counts)
        pmf = np.zeros(len(sizes))
        for tp, t in zip(tenant_p, self.tenants, strict=True):
            mix = _normalise(t.size_counts)
            pmf[: len(self.size_classes)] += tp * mix[:-1]
            pmf[len(self.size_classes):] += tp * mix[-1] * large_p
        return sizes, pmf

    def size_factor(self, gpus: int) -> float:
        """Long-run median multiplier for a job of `gpus` GPUs (the last band that applies wins)."""
        factor = 1.0
        for min_gpus, f in self.long_size_factors:
            if gpus >= min_gpus:
                factor = f
        return factor

    def status_factor(self, status: FinalStatus) -> float:
        return dict(self.long_status_factors).get(status, 1.0)

    def short_share(self) -> float:
        """Share of short runs that puts the overall median duration at target_median_s.

        With w short runs, P(D <= m) = w * F_short(m) + (1 - w) * F_long(m) = 1/2, where F_long is
        averaged over the size and status mixes; solved for w.
        """
        m = self.target_median_s
        sizes, size_p = self.size_pmf()
        status_p = _normalise([w for _, w in self.status_weights])
        f_long = 0.0
        for g, pg in zip(sizes.tolist(), size_p.tolist(), strict=True):
            for st, ps in zip(self.statuses, status_p.tolist(), strict=True):
                factor = self.size_factor(g) * self.status_factor(st)
                scaled = Lognormal(self.long.median_s * factor, self.long.sigma)
                f_long += pg * ps * scaled.cdf(m)
        f_short = self.short.cdf(m)
        w = (0.5 - f_long) / (f_short - f_long)
        if not 0.0 <= w <= 1.0:
            raise ValueError(
                f"profile {self.name}: no mix of the short and long durations has median {m} s"
            )
        return w


def _normalise(values: tuple[int, ...] | tuple[float, ...] | list[float]) -> FloatArray:
    a = np.asarray(values, dtype=np.float64)
    out: FloatArray = a / a.sum()
    return out


# ---------------------------------------------------------------------------------------------
# Philly (Jeon et al., USENIX ATC'19). Sources for every number: docs/workloads.md.
# ---------------------------------------------------------------------------------------------

# Per-VC job counts and size mix (1, 2, 4, 8, >8 GPUs) are counted in Gavel's Philly-derived
# per-VC traces (real Philly arrival times and GPU counts). Gavel kept at most 2,000 jobs per VC,
# so a capped VC's rate is 2,000 / days to its 2,000th job; the others span the whole 125.2-day
# window. Users per VC: distinct users in the Philly sample job log (assumed where the VC is absent).
_PHILLY_WINDOW_DAYS = 125.203
_PHILLY_TENANTS = (
    Tenant("6c71a0", 2000, 29.987, 13, (1798, 6, 41, 150, 5)),
    Tenant("b436b2", 2000, 31.509, 12, (1632, 23, 133, 172, 40)),
    Tenant("6214e9", 2000, 48.427, 17, (1928, 27, 32, 13, 0)),
    Tenant("ee9e8c", 2000, 52.181, 64, (975, 47, 321, 545, 112)),
    Tenant("11cb48", 2000, 101.843, 19, (1559, 81, 257, 23, 80)),
    Tenant("0e4a51", 1181, _PHILLY_WINDOW_DAYS, 3, (436, 226, 451, 68, 0)),
    Tenant("103959", 986, _PHILLY_WINDOW_DAYS, 2, (500, 40, 446, 0, 0)),
    Tenant("7f04ca", 972, _PHILLY_WINDOW_DAYS, 6, (394, 2, 234, 311, 31)),
    Tenant("ed69ec", 951, _PHILLY_WINDOW_DAYS, 10, (951, 0, 0, 0, 0)),
    Tenant("e13805", 607, _PHILLY_WINDOW_DAYS, 10, (233, 5, 116, 234, 19)),
    Tenant("2869ce", 533, _PHILLY_WINDOW_DAYS, 10, (65, 6, 11, 379, 72)),
    Tenant("51b7ef", 18, _PHILLY_WINDOW_DAYS, 2, (3, 0, 2, 13, 0)),
    Tenant("23dbec", 9, _PHILLY_WINDOW_DAYS, 3, (2, 0, 0, 7, 0)),
    Tenant("925e2b", 4, _PHILLY_WINDOW_DAYS, 3, (1, 0, 0, 3, 0)),
    Tenant("795a4c", 3, _PHILLY_WINDOW_DAYS, 3, (3, 0, 0, 0, 0)),
)

# Families and batch sizes of Gavel's Philly workloads; CPU per GPU from Synergy's measured
# profiles, memory per GPU from Synergy's approximate scores (server: 8 GPUs, 24 CPUs, 500 GB).
# CycleGAN, Recommendation and A3C have no Synergy profile: see docs/workloads.md for the choice.
_GAVEL_MODELS = (
    ModelFamily("ResNet-18", (16, 32, 64, 128, 256), 9.0, 125.0, True),
    ModelFamily("ResNet-50", (16, 32, 64, 128), 4.0, 62.5, True),
    ModelFamily("Transformer", (16, 32, 64, 128, 256), 1.0, 31.25, True),
    ModelFamily("LM", (5, 10, 20, 40, 80), 1.0, 31.25, True),
    ModelFamily("CycleGAN", (), 4.0, 62.5, False),
    ModelFamily("Recommendation", (512, 1024, 2048, 4096, 8192), 3.0, 62.5, False),
    ModelFamily("A3C", (), 4.0, 31.25, False),
)

PHILLY = Profile(
    name="philly",
    description="Microsoft Philly, 2017-08-07..2017-12-22 (Jeon et al., USENIX ATC'19)",
    # 117,325 jobs over 137 days: the default arrival rate (856 jobs a day).
    reference_jobs=117_325,
    reference_span_s=137 * DAY_S,
    tenants=_PHILLY_TENANTS,
    # Pooled maximum-likelihood Zipf exponent of jobs per user rank over the sample's VCs.
    user_zipf_s=1.10,
    size_classes=(1, 2, 4, 8),
    # Jobs above one server: the sample's and Gavel's >8-GPU jobs pooled, rounded up to whole
    # servers (12 -> 16, 20 -> 24) as Philly's learner rule does. 128 is the trace's maximum.
    large_sizes=(16, 24, 32, 64, 128),
    large_counts=(526, 14, 149, 3, 3),
    gpus_per_server=8,
    # Synergy's server (8 GPUs, 24 CPUs, 500 GB); Philly's memory log shows ~504 GB servers.
    server_cpus=24.0,
    server_mem_gb=500.0,
    # Published shares (60% passed, 9% killed, 30% failed), normalised; no size dependence sourced.
    status_weights=((FinalStatus.PASS, 60.0), (FinalStatus.KILLED, 9.0), (FinalStatus.FAILED, 30.0)),
    # Published median runtime of the full trace; the short-run share is solved to hit it.
    target_median_s=15 * 60.0,
    # Short runs: log-mean and log-sd of the sample's failed attempts that ended within an hour.
    short=Lognormal(median_s=118.0, sigma=1.41),
    # Long runs: maximum-likelihood lognormal of the sample's final runtimes, left-truncated at
    # one hour (the sample holds no shorter job), with size and status as multiplicative effects.
    long=Lognormal(median_s=43_050.0, sigma=1.47),
    long_size_factors=((5, 1.126), (9, 1.116)),
    long_status_factors=((FinalStatus.FAILED, 0.455),),  # Killed: absent from the sample, as Pass
    min_duration_s=10.0,
    max_duration_s=30 * DAY_S,  # the sample's longest run is 25.6 days
    # Jobs started 1..5 times among the 3,034 jobs with every attempt recorded.
    attempt_counts=(2218, 442, 180, 122, 72),
    # Every 5% plus 97.5% and 99%: log interpolation across a wide last step would inflate the mean.
    failed_runtime_log10_quantiles=(
        (0.00, 0.699), (0.05, 1.580), (0.10, 1.699), (0.15, 1.778), (0.20, 1.851), (0.25, 2.024),
        (0.30, 2.311), (0.35, 2.779), (0.40, 3.414), (0.45, 3.848), (0.50, 4.145), (0.55, 4.197),
        (0.60, 4.370), (0.65, 4.522), (0.70, 4.642), (0.75, 4.782), (0.80, 4.936), (0.85, 5.071),
        (0.90, 5.206), (0.95, 5.433), (0.975, 5.618), (0.99, 5.820), (1.00, 6.439),
    ),
    # Submissions per hour of day and per weekday in the sample job log (the log's own clock).
    hourly_counts=(
        196, 297, 258, 166, 203, 215, 228, 221, 211, 155, 121, 94,
        92, 87, 86, 148, 137, 236, 252, 142, 113, 162, 201, 185,
    ),
    weekday_counts=(609, 683, 638, 702, 708, 398, 468),
    models=_GAVEL_MODELS,
    # Helios (SC'21) maps 11 Philly VCs to node counts (../shared/traces/philly/derived/helios_philly_vc.csv).
    vc_servers=(("6214e9", 64), ("7f04ca", 32), ("11cb48", 16), ("b436b2", 64), ("ee9e8c", 64), ("e13805", 16),
                ("6c71a0", 32), ("2869ce", 16), ("ed69ec", 8), ("103959", 8), ("0e4a51", 32)),
    # Not measured (the sample's submit times are per job, not per sweep): half of a VC's jobs come in bursts
    # of 10 jobs on average within about an hour, what a user's hyperparameter sweep looks like.
    burst_share=0.5,
    burst_jobs=10.0,
    burst_s=HOUR_S,
)

PROFILES: Mapping[str, Profile] = MappingProxyType({PHILLY.name: PHILLY})
LIKES: tuple[str, ...] = tuple(PROFILES)


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------


def synthesize(
    like: str,
    jobs: int,
    seed: int,
    *,
    cluster_gpus: int | None = None,
    load: float | None = None,
    cpu_demands: bool = False,
    cluster: Cluster | None = None,
    vcs: bool = False,
    shared_span: bool = False,
    vc_queue: int | None = None,
) -> Workload:
    """Generate `jobs` jobs that follow the statistics of the trace named by `like` (see LIKES).

    cpu_demands=False (the default) leaves cpus_per_learner and mem_gb_per_learner at 0: Philly's trace
    records neither and its scheduler handed out CPUs and memory with the GPUs, so a Philly-like job makes
    no separate CPU or memory request. cpu_demands=True makes every learner request what its model family
    benefits from (Synergy's profiles), for CPU/memory-aware experiments; on Philly's own servers (3
    CPUs per GPU) many such jobs then wait for CPUs while GPUs sit idle.

    Without `load`, jobs arrive at the reference trace's average rate (Philly: 117,325 jobs in 137
    days), so the span grows with `jobs`. With `load` and `cluster_gpus`, the span is chosen so that
    the offered GPU-time (every attempt, failed ones included) divided by cluster_gpus x span equals
    `load`; the diurnal and weekly shape is kept either way.

    `cluster` shapes the jobs for a cluster instead of the profile's own servers, and is what `load`
    refers to (cluster_gpus is then its GPU count): a job of up to one server's GPUs (the largest
    server's) is one learner, a larger one whole servers' worth of learners (a 24-GPU job on 4-GPU
    servers: 6 learners of 4), no job asks for more GPUs than the cluster has, and CPU and memory requests
    are capped at what the servers that can hold a learner have. The random draws are the same with or
    without it (only sizes, and the runtimes and requests that follow from them, differ).

    vcs=True (needs `cluster` and `load`) makes the workload queue like Philly's: the tenants are virtual
    clusters with fixed quotas (vc_quotas(): the profile's servers per VC, scaled to the cluster's GPUs), each
    VC offers `load` times its own quota's GPU-time over the span (so jobs come from VCs in proportion to
    quota / mean job GPU-time, not to the reference trace's job rates), no job asks for more than its VC's
    quota, and a share of each VC's jobs arrive in bursts (one user, one size, within about an hour) on top
    of the day/night and weekday cycle. Sizes, runtimes, statuses and attempts are drawn as without it.
    shared_span=True (with vcs): every VC submits over one span, chosen so that the whole cluster is offered
    `load`; each VC then offers what its draws add up to (the same jobs, other submission times), which is
    the workload for VCs that borrow each other's idle GPUs.
    vc_queue=Q (with vcs): closed-loop users (traces/closed_loop.py): the open-loop times above become what users
    intend, and a VC's next submission (a job, or a whole burst) waits until the VC has fewer than Q jobs queued,
    as pre-simulated for `fair` on fixed quotas, so a VC is held full with a short queue instead of drifting.
    """
    profile = PROFILES.get(like)
    if profile is None:
        raise ValueError(f"unknown workload profile {like!r}; known: {', '.join(LIKES)}")
    if jobs < 0:
        raise ValueError(f"jobs must be >= 0, got {jobs}")
    if cluster is not None:
        if cluster_gpus is not None and cluster_gpus != cluster.total_gpus:
            raise ValueError(f"cluster_gpus {cluster_gpus} disagrees with the cluster's {cluster.total_gpus} GPUs; "
                             "give one of the two")
        if cluster.total_gpus < 1:
            raise ValueError("the cluster has no GPUs: GPU jobs could never run on it")
        cluster_gpus = cluster.total_gpus if load is not None else None
    if (load is None) != (cluster_gpus is None):
        raise ValueError("load and the cluster it refers to (cluster or cluster_gpus) go together: "
                         "give both or neither")
    if load is not None and not (math.isfinite(load) and load > 0):
        raise ValueError(f"load must be a number > 0, got {load}")
    if cluster_gpus is not None and cluster_gpus < 1:
        raise ValueError(f"cluster_gpus must be >= 1, got {cluster_gpus}")
    if vcs:
        if cluster is None or load is None:
            raise ValueError("vcs: virtual clusters have quotas of a cluster's GPUs and a load on them: give "
                             "cluster and load")
        if not profile.vc_servers:
            raise ValueError(f"vcs: profile {profile.name} has no virtual clusters")
        return _generate_vcs(profile, jobs, seed, cluster, load, cpu_demands, shared_span, vc_queue)
    if vc_queue is not None:
        raise ValueError("vc_queue: the closed loop is per virtual cluster and needs vcs")
    if shared_span:
        raise ValueError("shared_span: an arrival span shared by the virtual clusters needs vcs")
    return _generate(profile, jobs, seed, cluster_gpus, load, cpu_demands, cluster)


def vc_quotas(like: str, cluster: Cluster) -> dict[str, int]:
    """GPUs per virtual cluster of profile `like` on `cluster`: the profile's servers per VC (one for a VC it
    does not list) as shares of the cluster's GPUs, largest remainder rounding: they add up to the cluster's
    GPUs."""
    profile = PROFILES.get(like)
    if profile is None:
        raise ValueError(f"unknown workload profile {like!r}; known: {', '.join(LIKES)}")
    listed = dict(profile.vc_servers)
    servers = {t.name: listed.get(t.name, 1) for t in profile.tenants}
    total = cluster.total_gpus
    weight = sum(servers.values())
    exact = {vc: total * n / weight for vc, n in servers.items()}
    quotas = {vc: int(x) for vc, x in exact.items()}
    left = total - sum(quotas.values())
    for vc in sorted(exact, key=lambda v: (-(exact[v] - quotas[v]), v))[:left]:
        quotas[vc] += 1
    return quotas


def _generate_vcs(profile: Profile, n: int, seed: int, cluster: Cluster, load: float,
                  cpu_demands: bool, shared_span: bool = False, vc_queue: int | None = None) -> Workload:
    """The VC mode of synthesize(): see there. Same draws as _generate, then bursts and the VCs' caps."""
    quotas = vc_quotas(profile.name, cluster)
    names = [t.name for t in profile.tenants]
    per = _server_gpus(cluster)
    # No job asks for more than its VC's quota: whole servers of it, or below one server a power of two.
    cap = np.array([quotas[v] // per * per if quotas[v] >= per else 1 << (max(quotas[v], 1).bit_length() - 1)
                    for v in names], dtype=np.int64)
    # Jobs per VC in proportion to quota / mean GPU-time of one of its jobs, so every VC offers `load` times its
    # quota. The mean is estimated on a pilot draw of its own generator: the workload's draws are unchanged by it.
    pilot = np.random.default_rng(0x5EED)
    mean_gpu_s = np.zeros(len(names))
    for i in range(len(names)):
        tenant_i = np.full(4000, i, dtype=np.int64)
        g = np.minimum(_fit_sizes(_draw_gpus(profile, pilot, tenant_i), cluster), cap[i])
        status_p = _normalise([w for _, w in profile.status_weights])
        st = pilot.choice(len(status_p), size=len(g), p=status_p)
        mean_gpu_s[i] = float(np.mean(g * _draw_durations(profile, pilot, g, st)))
    rate = np.array([quotas[v] for v in names], dtype=np.float64) / mean_gpu_s

    rng = np.random.default_rng(seed)
    tenant = rng.choice(len(names), size=n, p=rate / rate.sum())
    gpus = np.minimum(_fit_sizes(_draw_gpus(profile, rng, tenant), cluster), cap[tenant])
    status_p = _normalise([w for _, w in profile.status_weights])
    status_idx = rng.choice(len(status_p), size=n, p=status_p)
    duration = _draw_durations(profile, rng, gpus, status_idx)
    attempts = rng.choice(len(profile.attempt_counts), size=n, p=_normalise(profile.attempt_counts)) + 1
    failed = _draw_failed_attempts(profile, rng, attempts)
    user_rank = _draw_user_ranks(profile, rng, tenant)
    group, leaders = _burst_groups(profile, rng, tenant, gpus, user_rank)
    job_gpu_s = gpus * duration
    np.add.at(job_gpu_s, np.repeat(np.arange(n), attempts - 1), np.repeat(gpus, attempts - 1) * failed)
    gpu_seconds = float(job_gpu_s.sum())
    # Each VC's own arrival span makes it offer exactly `load` times its quota: with one span for all, a VC's
    # load was whatever its heavy-tailed draws added up to (0.25 to 1.84 of the target across seeds 0-2 on
    # Philly's machines), so which VCs queued, and the median queueing delay, changed from seed to seed.
    vc_gpu_s = np.bincount(tenant, weights=job_gpu_s, minlength=len(names))
    quota = np.array([quotas[v] for v in names], dtype=np.float64)
    # A VC rounded down to no GPUs on a small cluster submits nothing (its rate is 0): no span either.
    spans = np.divide(vc_gpu_s, quota * load, out=np.zeros(len(names)), where=quota > 0)
    if shared_span:
        # Philly's VCs submitted over one window, and borrowing let a busy VC use what a quiet one left idle:
        # the cluster offers `load`, each VC whatever its draws add up to (busy and quiet VCs side by side).
        spans = np.where(quota > 0, float(vc_gpu_s.sum()) / (float(quota.sum()) * load), 0.0)
    submit = np.zeros(n)
    for v in range(len(names)):
        mine = np.flatnonzero(tenant == v)
        times = _draw_arrivals(profile, rng, len(mine), float(spans[v]))
        rng.shuffle(times)  # sorted by _draw_arrivals: each job takes a random one (all are sorted below)
        submit[mine] = times
    span = float(spans.max()) if n else 0.0
    if len(leaders):
        members = np.flatnonzero(group >= 0)
        length = rng.exponential(profile.burst_s, size=len(leaders))
        g = group[members]
        submit[members] = np.floor(submit[leaders][g] + rng.random(len(members)) * length[g])
    family, variant = _draw_models(profile, rng, gpus)
    if vc_queue is not None:
        # After every draw, so a seed's jobs are the same with or without the loop; only their times move.
        held = job_gpu_s / gpus * _spread_factor(profile, family, gpus, _server_gpus(cluster))
        submit = _closed_loop_times(submit, tenant, group, gpus, held, quota, vc_queue)

    order = np.argsort(submit, kind="stable")
    failed_by_job = np.split(failed, np.cumsum(attempts - 1)[:-1]) if n else []
    failed = np.concatenate([failed_by_job[i] for i in order.tolist()]) if n else failed
    workload = _build(profile, tenant[order], gpus[order], status_idx[order], duration[order], attempts[order],
                      failed, user_rank[order], family[order], variant[order], submit[order], seed, cpu_demands,
                      cluster)
    report = workload.report
    report.notes.append(
        f"virtual clusters: {len(names)} with fixed quotas ({', '.join(f'{v} {quotas[v]}' for v in names)} GPUs), "
        + (f"submitting over one span: load {load:g} on the whole cluster, each VC what its draws add up to"
           if shared_span else f"each offering load {load:g} on its quota over its own span")
        + f"; {profile.burst_share:.0%} of jobs in bursts"
        + (f"; closed loop: a VC's users submit while it has fewer than {vc_queue} jobs queued (timed for fair "
           f"on fixed quotas), last submission at {float(submit.max()) / DAY_S:.2f} days"
           if vc_queue is not None and n else "")
    )
    report.notes.append(f"spans {spans.min() / DAY_S:.2f} to {span / DAY_S:.2f} days, "
                        f"{gpu_seconds / 3600:.0f} GPU-hours offered")
    return workload


def _spread_factor(profile: Profile, family: IntArray, gpus: IntArray, per_server: int) -> FloatArray:
    """How much longer a job holds its GPUs than its recorded runtime, as the simulator's performance model
    (sim/perf.py) runs a gang that spans servers: one wider than a server is counted as spanning racks (its
    locality wait rarely finds a rack free on a full cluster). A job that fits one server is counted at its
    recorded runtime, though the simulator may spread it after its locality wait: counting every such job as spread
    held the pre-simulated VCs so far behind that nothing waited in the simulator (median 0 on seeds 0 and 1).
    Without this the pre-simulated VCs run ahead of the simulated ones, and
    with nothing to pull them back (a pre-computed trace cannot) their queues drift for days."""
    fams = [family_of(m.name) for m in profile.models]
    rack = np.array([1.0 + f.cross_rack_slowdown for f in fams])[family]
    out: FloatArray = np.where(gpus > per_server, rack, 1.0)
    return out


def _closed_loop_times(intended: FloatArray, tenant: IntArray, group: IntArray, gpus: IntArray,
                       occupancy: FloatArray, quota: FloatArray, vc_queue: int) -> FloatArray:
    """Each VC's submission times under the closed loop: its units (single jobs, and bursts from their earliest
    job on) in order of intended time, through close_loop()."""
    submit = intended.copy()
    for v in range(len(quota)):
        mine = np.flatnonzero(tenant == v)
        if not len(mine):
            continue
        single = mine[group[mine] < 0]
        bursts = np.unique(group[mine][group[mine] >= 0])
        units = [np.array([j]) for j in single.tolist()]
        for b in bursts.tolist():
            members = np.flatnonzero(group == b)
            # Every member, its leader too, was spread over the burst's length: the unit starts at the earliest.
            units.append(members[np.argsort(intended[members], kind="stable")])
        units.sort(key=lambda unit: (float(intended[unit[0]]), int(unit[0])))
        times, _ = close_loop(intended, units, gpus, occupancy, int(quota[v]), vc_queue)
        submit[mine] = times[mine]
    return submit


def _generate(profile: Profile, n: int, seed: int, cluster_gpus: int | None, load: float | None,
              cpu_demands: bool = False, cluster: Cluster | None = None) -> Workload:
    rng = np.random.default_rng(seed)
    # The draw order below is part of the determinism contract: change it and seeds change meaning.
    tenant_p = _normalise([t.jobs_per_day for t in profile.tenants])
    tenant = rng.choice(len(tenant_p), size=n, p=tenant_p)
    gpus = _draw_gpus(profile, rng, tenant)
    if cluster is not None:
        gpus = _fit_sizes(gpus, cluster)
    status_p = _normalise([w for _, w in profile.status_weights])
    status_idx = rng.choice(len(status_p), size=n, p=status_p)
    duration = _draw_durations(profile, rng, gpus, status_idx)
    attempts_p = _normalise(profile.attempt_counts)
    attempts = rng.choice(len(attempts_p), size=n, p=attempts_p) + 1
    failed = _draw_failed_attempts(profile, rng, attempts)
    user_rank = _draw_user_ranks(profile, rng, tenant)
    family, variant = _draw_models(profile, rng, gpus)

    gpu_seconds = float(np.dot(gpus, duration)) + float(np.dot(np.repeat(gpus, attempts - 1), failed))
    if load is not None and cluster_gpus is not None:
        span = gpu_seconds / (cluster_gpus * load) if n else 0.0
    else:
        span = n * profile.reference_span_s / profile.reference_jobs
    submit = _draw_arrivals(profile, rng, n, span)

    workload = _build(profile, tenant, gpus, status_idx, duration, attempts, failed, user_rank, family,
                      variant, submit, seed, cpu_demands, cluster)
    report = workload.report
    report.notes.append(
        f"span {span / DAY_S:.2f} days, {n / max(span / DAY_S, 1e-12):.0f} jobs/day on average, "
        f"{gpu_seconds / 3600:.0f} GPU-hours offered (failed attempts included)"
    )
    if load is not None and cluster_gpus is not None:
        report.notes.append(f"span chosen for offered load {load:g} on {cluster_gpus} GPUs")
    if cluster is not None:
        report.notes.append(f"jobs shaped for {cluster.describe()}")
    return workload


def _burst_groups(profile: Profile, rng: np.random.Generator, tenant: IntArray, gpus: IntArray,
                  user_rank: IntArray) -> tuple[IntArray, IntArray]:
    """Group burst_share of each VC's jobs into bursts (geometric sizes, burst_jobs on average): a burst's jobs
    take its first job's size and user (in place). Returns each job's burst (-1: none) and each burst's
    first job."""
    n = len(tenant)
    group = np.full(n, -1, dtype=np.int64)
    leaders: list[int] = []
    in_burst = rng.random(n) < profile.burst_share
    if profile.burst_share <= 0 or not n:
        return group, np.zeros(0, dtype=np.int64)
    for v in range(len(profile.tenants)):
        idx = np.flatnonzero(in_burst & (tenant == v))  # jobs are iid, so these are in a random order already
        sizes = rng.geometric(1.0 / max(profile.burst_jobs, 1.0), size=len(idx))
        ends = np.cumsum(sizes)
        starts = ends - sizes
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            if a >= len(idx):
                break
            members = idx[a:b]
            first = int(members[0])
            group[members] = len(leaders)
            gpus[members] = gpus[first]
            user_rank[members] = user_rank[first]
            leaders.append(first)
    return group, np.array(leaders, dtype=np.int64)


def _server_gpus(cluster: Cluster) -> int:
    """GPUs of the cluster's largest server: the unit a large job's learners come in."""
    return max(1, int(cluster.gpu_capacity.max()))


def _fit_sizes(gpus: IntArray, cluster: Cluster) -> IntArray:
    """Sizes a cluster can hold: above one server, whole servers (rounded up, as Philly's learner rule
    does), and never more GPUs than the cluster has (rounded down to whole servers)."""
    per = _server_gpus(cluster)
    most = max(per, cluster.total_gpus // per * per)
    whole = np.where(gpus > per, -(-gpus // per) * per, gpus)
    out: IntArray = np.minimum(whole, most).astype(np.int64)
    return out


def _draw_gpus(profile: Profile, rng: np.random.Generator, tenant: IntArray) -> IntArray:
    """GPUs per job from the job's tenant's size mix; 'larger than a server' from the shared shape."""
    n = len(tenant)
    classes = len(profile.size_classes)
    cum = np.array([np.cumsum(_normalise(t.size_counts)) for t in profile.tenants])
    cum[:, -1] = 1.0  # guard the last edge against rounding so every draw lands in a class
    u = rng.random(n)
    cls = (u[:, None] > cum[tenant]).sum(axis=1)
    large = rng.choice(profile.large_sizes, size=n, p=_normalise(profile.large_counts))
    small = np.array((*profile.size_classes, 0), dtype=np.int64)[np.minimum(cls, classes)]
    return np.where(cls >= classes, large, small).astype(np.int64)


def _draw_durations(profile: Profile, rng: np.random.Generator, gpus: IntArray,
                    status_idx: IntArray) -> FloatArray:
    n = len(gpus)
    short = rng.random(n) < profile.short_share()
    z = rng.standard_normal(n)
    size_f = np.ones(n)
    for min_gpus, f in profile.long_size_factors:
        size_f = np.where(gpus >= min_gpus, f, size_f)
    status_f = np.array([profile.status_factor(s) for s in profile.statuses])[status_idx]
    log_long = math.log(profile.long.median_s) + np.log(size_f * status_f) + profile.long.sigma * z
    log_short = math.log(profile.short.median_s) + profile.short.sigma * z
    d = np.exp(np.where(short, log_short, log_long))
    # Philly logs times to the second; whole seconds also make the CSV round trip exact.
    return np.round(np.clip(d, profile.min_duration_s, profile.max_duration_s))


def _draw_failed_attempts(profile: Profile, rng: np.random.Generator, attempts: IntArray) -> FloatArray:
    """Runtimes of every failed attempt, jobs in order, attempts-1 of them per job.

    Inverse-CDF sampling from the quantile table, interpolated in log space. Drawn independently
    of the job's last attempt: in the Philly sample log(failed runtime) and log(last runtime) have
    correlation 0.02, and scaling a ratio by the last runtime would invent a dependence (and, with
    the ratio's wide tails, several times the real failed GPU-time).
    """
    table = np.asarray(profile.failed_runtime_log10_quantiles)
    u = rng.random(int((attempts - 1).sum()))
    runtime = np.power(10.0, np.interp(u, table[:, 0], table[:, 1]))
    out: FloatArray = np.round(np.clip(runtime, profile.min_duration_s, profile.max_duration_s))
    return out


def _draw_user_ranks(profile: Profile, rng: np.random.Generator, tenant: IntArray) -> IntArray:
    """1-based user rank inside the job's tenant, P(rank r) proportional to r ** -s (Zipf)."""
    u = rng.random(len(tenant))
    rank = np.ones(len(tenant), dtype=np.int64)
    for i, t in enumerate(profile.tenants):
        mine = tenant == i
        cum = np.cumsum(_normalise([r ** -profile.user_zipf_s for r in range(1, t.users + 1)]))
        rank[mine] = np.minimum(np.searchsorted(cum, u[mine], side="right"), t.users - 1) + 1
    return rank


def _draw_models(profile: Profile, rng: np.random.Generator, gpus: IntArray) -> tuple[IntArray, FloatArray]:
    """Family index (uniform; data-parallel families only for multi-GPU jobs) and a variant draw."""
    everyone = np.arange(len(profile.models))
    parallel = np.array([i for i, m in enumerate(profile.models) if m.data_parallel], dtype=np.int64)
    u = rng.random(len(gpus))
    single = everyone[(u * len(everyone)).astype(np.int64)]
    multi = parallel[(u * len(parallel)).astype(np.int64)]
    family = np.where(gpus > 1, multi, single)
    return family, rng.random(len(gpus))


def _draw_arrivals(profile: Profile, rng: np.random.Generator, n: int, span: float) -> FloatArray:
    """n arrival times of a non-homogeneous Poisson process on [0, span), sorted.

    Given n arrivals, NHPP arrival times are independent with density proportional to the rate,
    so we pick hour bins with probability rate x bin length and a uniform offset inside the bin.
    """
    if n == 0:
        return np.zeros(0)
    bins = max(1, math.ceil(span / HOUR_S))
    start = np.arange(bins) * HOUR_S
    length = np.minimum(HOUR_S, span - start) if span > 0 else np.ones(bins)
    hour = _normalise(profile.hourly_counts) * 24
    weekday = _normalise(profile.weekday_counts) * 7
    b = np.arange(bins)
    weight = hour[b % 24] * weekday[(b // 24) % 7] * length
    chosen = rng.choice(bins, size=n, p=weight / weight.sum())
    t = start[chosen] + rng.random(n) * length[chosen]
    return np.sort(np.floor(t))


def _room_per_learner(cluster: Cluster, gpl: IntArray) -> tuple[FloatArray, FloatArray]:
    """The most CPUs and memory a learner of each job can get: those of the roomiest server with enough GPUs."""
    caps = cluster.gpu_capacity
    cpus = np.zeros(len(gpl))
    mem = np.zeros(len(gpl))
    for g in np.unique(gpl).tolist():
        able = caps >= g
        mine = gpl == g
        cpus[mine] = float(cluster.cpu_capacity[able].max())
        mem[mine] = float(cluster.mem_capacity[able].max())
    return cpus, mem


def _build(profile: Profile, tenant: IntArray, gpus: IntArray, status_idx: IntArray, duration: FloatArray,
           attempts: IntArray, failed: FloatArray, user_rank: IntArray, family: IntArray,
           variant: FloatArray, submit: FloatArray, seed: int, cpu_demands: bool = False,
           cluster: Cluster | None = None) -> Workload:
    """Turn the arrays into JobSpecs. Arrays are iid per job, so the i-th arrival goes to job i.

    Everything that can be is computed as whole columns first; the loop only assembles objects
    (it is most of the generation time at 100k jobs).
    """
    n = len(gpus)
    per_server = profile.gpus_per_server if cluster is None else _server_gpus(cluster)
    learners = np.where(gpus > per_server, gpus // per_server, 1)
    gpl = np.where(gpus > per_server, per_server, gpus)
    cpu_per_gpu = np.array([m.cpus_per_gpu for m in profile.models])[family]
    mem_per_gpu = np.array([m.mem_gb_per_gpu for m in profile.models])[family]
    # A learner never asks for more than one server holds (it must fit somewhere).
    server_cpus: float | FloatArray = profile.server_cpus
    server_mem: float | FloatArray = profile.server_mem_gb
    if cluster is not None:
        server_cpus, server_mem = _room_per_learner(cluster, gpl)
    cpus = np.minimum(cpu_per_gpu * gpl, server_cpus)
    mem = np.minimum(mem_per_gpu * gpl, server_mem)
    if not cpu_demands:
        cpus = np.zeros_like(cpus)
        mem = np.zeros_like(mem)

    # Model strings: one flat table of every family's names, indexed by family offset + variant.
    tables = [m.model_names() for m in profile.models]
    model_table = [name for names in tables for name in names]
    count = np.array([len(names) for names in tables])
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    model_idx = first[family] + np.minimum((variant * count[family]).astype(np.int64), count[family] - 1)

    # User strings: one flat table, each tenant's users in rank order, indexed by offset + rank - 1.
    user_table = [f"{t.name}-u{r:02d}" for t in profile.tenants for r in range(1, t.users + 1)]
    user_first = np.concatenate(([0], np.cumsum([t.users for t in profile.tenants])[:-1]))
    tenant_names = [t.name for t in profile.tenants]
    statuses = profile.statuses
    width = max(6, len(str(n)))
    ids = [f"{profile.name}-{i:0{width}d}" for i in range(n)]
    tenants = [tenant_names[t] for t in tenant.tolist()]
    users = [user_table[i] for i in (user_first[tenant] + user_rank - 1).tolist()]
    models = [model_table[i] for i in model_idx.tolist()]
    status_list = [statuses[i] for i in status_idx.tolist()]
    # Most jobs ran once: share one empty tuple and slice only the retried jobs' failed runs.
    failed_list = failed.tolist()
    retried = np.flatnonzero(attempts > 1)
    ends = np.cumsum(attempts - 1)[retried]
    failed_runs: list[tuple[float, ...]] = [()] * n
    for i, end, k in zip(retried.tolist(), ends.tolist(), (attempts[retried] - 1).tolist(), strict=True):
        failed_runs[i] = tuple(failed_list[end - k:end])

    jobs = [
        JobSpec(
            job_id=job_id,
            tenant=tname,
            user=user,
            submit_time_s=sub,
            learners=ln,
            gpus_per_learner=g,
            cpus_per_learner=c,
            mem_gb_per_learner=mg,
            duration_s=d,
            model=model,
            final_status=st,
            failed_attempts_s=fr,
        )
        for job_id, tname, user, sub, ln, g, c, mg, d, model, st, fr in zip(
            ids, tenants, users, submit.tolist(), learners.tolist(), gpl.tolist(), cpus.tolist(),
            mem.tolist(), duration.tolist(), models, status_list, failed_runs, strict=True,
        )
    ]
    report = LoadReport(source=f"synth:{profile.name} jobs={n} seed={seed}", read=n)
    report.notes.append(f"synthetic, like {profile.description}")
    return Workload(jobs, report)
