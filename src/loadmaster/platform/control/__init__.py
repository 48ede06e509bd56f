"""The control loop: decide(Snapshot) -> Plan on live jobs, and the job lifecycle around it."""

from loadmaster.platform.control.loop import ControlLoop
from loadmaster.platform.control.reports import QueueEntry, RecoveryReport, TickReport

__all__ = ["ControlLoop", "QueueEntry", "RecoveryReport", "TickReport"]
