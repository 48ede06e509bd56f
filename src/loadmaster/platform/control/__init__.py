"""The control loop: decide(Snapshot) -> Plan on live jobs, and the job lifecycle around it."""

from loadmaster.platform.control.loop import ControlLoop, QueueView
from loadmaster.platform.control.outcomes import Failed, Lost, NotLaunched, Outcome, Stopped, Succeeded
from loadmaster.platform.control.reports import QueueEntry, RecoveryReport, TickReport

__all__ = ["ControlLoop", "Failed", "Lost", "NotLaunched", "Outcome", "QueueEntry", "QueueView", "RecoveryReport",
           "Stopped", "Succeeded", "TickReport"]
