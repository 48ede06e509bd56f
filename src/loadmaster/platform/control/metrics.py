"""The control loop's Prometheus metrics, in a registry of its own (no process-global state): counters
and histograms the loop updates as things happen, and gauges read from its memory (and, for jobs by
status, from the store) when /metrics is scraped.

| metric | type | labels |
|---|---|---|
| loadmaster_jobs | gauge | status, tenant |
| loadmaster_queue_length | gauge | |
| loadmaster_attempts_in_flight | gauge | |
| loadmaster_gpus_booked, loadmaster_gpus_free | gauge | node |
| loadmaster_tenant_gpus_booked | gauge | tenant |
| loadmaster_last_round_age_seconds | gauge | |
| loadmaster_round_seconds, loadmaster_decide_seconds | histogram | |
| loadmaster_rounds_total | counter | |
| loadmaster_coalesce_waits_total | counter | ended |
| loadmaster_attempt_ends_total | counter | outcome, failure_class |
| loadmaster_retries_total, loadmaster_preemptions_total | counter | |
| loadmaster_reconcile_repairs_total | counter | kind |
| loadmaster_store_errors_total | counter | stage |
| loadmaster_round_failures_total | counter | error |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class Gauges:
    """What the loop reports for the gauges at a scrape."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (status, tenant) -> count
    queue_length: int = 0
    in_flight: int = 0
    gpus_booked: dict[str, int] = field(default_factory=dict)  # node -> GPUs
    gpus_free: dict[str, int] = field(default_factory=dict)
    tenant_gpus: dict[str, int] = field(default_factory=dict)
    last_round_age_s: float | None = None


class _Collector(Collector):
    def __init__(self, read: Callable[[], Gauges]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        g = self.read()
        jobs = GaugeMetricFamily("loadmaster_jobs", "Jobs by status and tenant.", labels=["status", "tenant"])
        for (status, tenant), count in sorted(g.jobs.items()):
            jobs.add_metric([status, tenant], count)
        yield jobs
        yield GaugeMetricFamily("loadmaster_queue_length", "Jobs waiting in the queue (QUEUED).",
                                value=g.queue_length)
        yield GaugeMetricFamily("loadmaster_attempts_in_flight", "Attempts staging, launching or running.",
                                value=g.in_flight)
        for name, doc, values, label in (
                ("loadmaster_gpus_booked", "GPUs booked by attempts, per node.", g.gpus_booked, "node"),
                ("loadmaster_gpus_free", "GPUs not booked, per node.", g.gpus_free, "node"),
                ("loadmaster_tenant_gpus_booked", "GPUs booked by a tenant's attempts.", g.tenant_gpus, "tenant")):
            family = GaugeMetricFamily(name, doc, labels=[label])
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
            yield family
        if g.last_round_age_s is not None:
            yield GaugeMetricFamily("loadmaster_last_round_age_seconds", "Seconds since the last completed round.",
                                    value=g.last_round_age_s)


class LoopMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.round_seconds = Histogram("loadmaster_round_seconds", "Duration of a control-loop round.",
                                       buckets=_BUCKETS, registry=r)
        self.decide_seconds = Histogram("loadmaster_decide_seconds", "Duration of decide() within a round.",
                                        buckets=_BUCKETS, registry=r)
        self.rounds = Counter("loadmaster_rounds", "Control-loop rounds completed.", registry=r)
        # The waits after busy rounds, by what ended them: "launches" (the launches under way all finished
        # before coalesce_s) or "full" (coalesce_s).
        self.coalesce_waits = Counter("loadmaster_coalesce_waits", "Waits after a busy round, by what ended them.",
                                      ["ended"], registry=r)
        self.attempt_ends = Counter("loadmaster_attempt_ends", "Attempts ended, by outcome and failure class.",
                                    ["outcome", "failure_class"], registry=r)
        self.retries = Counter("loadmaster_retries", "Failed attempts retried.", registry=r)
        self.preemptions = Counter("loadmaster_preemptions", "Attempts asked to stop for another job.", registry=r)
        self.repairs = Counter("loadmaster_reconcile_repairs", "Differences repaired by reconciliation.", ["kind"],
                               registry=r)
        self.store_errors = Counter("loadmaster_store_errors", "Store errors met by the control loop (retried).",
                                    ["stage"], registry=r)
        # A round that raised anything but a store error is a bug: the loop goes on (the round is tried
        # again), so without this count a round failing every time would show only in the log.
        self.round_failures = Counter("loadmaster_round_failures", "Control-loop rounds that raised (a bug).",
                                      ["error"], registry=r)
        self._gauges: Callable[[], Gauges] = Gauges

    def read_gauges(self, read: Callable[[], Gauges]) -> None:
        """Where the gauges come from (the loop, once built)."""
        if self._gauges is Gauges:
            self.registry.register(_Collector(lambda: self._gauges()))
        self._gauges = read
