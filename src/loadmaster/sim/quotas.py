"""Tenant GPU quotas for a simulation: sized by each tenant's demand, or read from a quota file."""

from __future__ import annotations

from pathlib import Path

from loadmaster.core.workload import Workload
from loadmaster.scheduling.snapshot import TenantQuota


def quotas_by_demand(workload: Workload, total_gpus: int) -> dict[str, TenantQuota]:
    """Split the cluster's GPUs across tenants in proportion to their GPU-time demand.

    Largest-remainder rounding, so the quotas add up to exactly the cluster's GPUs (Philly sized its
    virtual clusters by what each team bought, which tracks what it uses).
    """
    demand: dict[str, float] = {}
    get = demand.get
    for j in workload.jobs:
        # Per job of 117,000, neither the j.gpus property nor sum() of no failed attempts (sum() adds an int 0,
        # which only turns a -0.0 runtime into 0.0: the same once added to the tenant's 0.0 start). The same
        # products, added in the same order.
        tenant = j.tenant
        failed = j.failed_attempts_s
        runtime = j.duration_s + sum(failed) if failed else j.duration_s
        demand[tenant] = get(tenant, 0.0) + j.learners * j.gpus_per_learner * runtime
    total = sum(demand.values())
    if not demand:
        return {}
    if total <= 0:
        demand = dict.fromkeys(demand, 1.0)
        total = float(len(demand))
    exact = {t: total_gpus * d / total for t, d in demand.items()}
    quotas = {t: int(x) for t, x in exact.items()}
    left = total_gpus - sum(quotas.values())
    for t in sorted(exact, key=lambda t: (-(exact[t] - quotas[t]), t))[:left]:
        quotas[t] += 1
    return {t: TenantQuota(t, g, None) for t, g in sorted(quotas.items())}


def load_quota_file(path: str | Path) -> dict[str, TenantQuota]:
    """YAML: `tenants: {NAME: {gpus: N, borrow_limit: M}}`. Errors name the tenant and field."""
    import yaml  # imported here: pydantic and yaml add ~0.15 s to every start-up otherwise
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    class QuotaEntry(BaseModel):
        model_config = ConfigDict(extra="forbid")
        gpus: int = Field(ge=0, description="guaranteed GPUs")
        borrow_limit: int | None = Field(default=None, ge=0, description="extra GPUs it may borrow")

    class QuotaFile(BaseModel):
        model_config = ConfigDict(extra="forbid")
        tenants: dict[str, QuotaEntry]

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"quota file {path}: cannot read it: {exc}") from None
    try:
        parsed = QuotaFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(
            f"quota file {path}: {problems}. Expected: tenants: {{NAME: {{gpus: N, borrow_limit: M}}}}"
        ) from None
    return {t: TenantQuota(t, e.gpus, e.borrow_limit) for t, e in parsed.tenants.items()}
