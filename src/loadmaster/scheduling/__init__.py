"""The pure scheduling core: decide(Snapshot) -> Plan. Knows no clock, database or process."""

from loadmaster.scheduling.decide import decide
from loadmaster.scheduling.placement import make_placer
from loadmaster.scheduling.plan import Migrate, Plan, Preempt, Reject, Resize, Start, Wait, WaitReason
from loadmaster.scheduling.policies import make_policy
from loadmaster.scheduling.snapshot import JobView, Snapshot, TenantQuota

__all__ = [
    "JobView",
    "Migrate",
    "Plan",
    "Preempt",
    "Reject",
    "Resize",
    "Snapshot",
    "Start",
    "TenantQuota",
    "Wait",
    "WaitReason",
    "decide",
    "make_placer",
    "make_policy",
]
