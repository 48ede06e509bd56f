"""Alibaba cluster-trace-gpu-v2023 (Weng et al., ATC'23): the pod list and the node list CSVs.

Pod list mapping (times in seconds; docs/traces.md has the measured counts):
  name -> job_id, qos -> tenant, creation_time -> submit_time_s, deletion_time - scheduled_time ->
  duration_s, 1 learner of num_gpu GPUs, cpu_milli/1000 -> cpus, memory_mib/1024 -> mem_gb,
  pod_phase -> final_status (Succeeded/Running -> Pass, Failed -> Failed; Pending -> skipped)
load_history() also keeps each pod's run, scheduled_time to deletion_time (for `trace analyze`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from loadmaster.core.cluster import Cluster, Node
from loadmaster.core.job import FinalStatus, JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces.clusters import racks_by_sku
from loadmaster.traces.errors import TraceFormatError
from loadmaster.traces.history import Attempt, History, JobHistory, Times

POD_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
    "creation_time", "deletion_time", "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
PHASES = {"Succeeded": FinalStatus.PASS, "Running": FinalStatus.PASS, "Failed": FinalStatus.FAILED}
SKIP_PENDING = "pod never scheduled (Pending, no scheduled_time)"
SKIP_NO_END = "pod has no deletion_time (no end to measure)"
SKIP_NEGATIVE = "deletion_time before scheduled_time"


class _Pod(NamedTuple):
    name: str
    tenant: str
    created: float
    scheduled: float
    duration: float
    gpus: int
    cpus: float
    mem_gb: float
    status: FinalStatus


@dataclass
class _Stats:
    """Counts behind the report notes."""

    shared: int = 0
    cpu_only: int = 0
    gpu_spec: int = 0
    trace_end: int = 0  # the latest deletion_time of any pod: when the trace was taken
    running_ends: list[int] = field(default_factory=list)  # deletion_time of each Running pod kept


def load(path: str | Path) -> Workload:
    """Read an openb_pod_list_*.csv. Pods that never ran are skipped and counted in the report."""
    pods, report, t0 = _read(path)
    return Workload([_to_spec(p, t0) for p in pods], report)


def load_history(path: str | Path) -> History:
    """The pods of load(), each with its one run (scheduled to deleted) on the same shifted clock. The pod
    list does not say which node a pod ran on."""
    pods, report, t0 = _read(path)
    workload = Workload([_to_spec(p, t0) for p in pods], report)
    runs = {p.name: Attempt(p.scheduled - t0, p.scheduled + p.duration - t0) for p in pods}
    jobs = [JobHistory.recorded(spec, (runs[spec.job_id],)) for spec in workload.jobs]
    return History(workload, jobs, Times.RECORDED, f"scheduled_time and deletion_time as logged in {path}",
                   cluster_hint="alibaba")


def _read(path: str | Path) -> tuple[list[_Pod], LoadReport, float]:
    """Parse the pod list: the pods that ran, the report, and the earliest creation time."""
    name = str(path)
    report = LoadReport(source=name)
    stats = _Stats()
    pods: list[_Pod] = []
    for line, row in _records(path, POD_COLUMNS):
        report.read += 1
        pod = _parse_pod(name, line, row, report, stats)
        if pod is not None:
            pods.append(pod)
    _add_notes(report, stats)
    return pods, report, min((p.created for p in pods), default=0.0)


def _records(path: str | Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row as a dict) for each non-empty row; a short or long row is an error."""
    name = str(path)
    with open(path, newline="") as f:
        reader = csv.reader(f)
        columns = _header(name, next(reader, []), required)
        for row in reader:
            if not row:
                continue
            if len(row) != len(columns):
                raise TraceFormatError(name, reader.line_num, None,
                                       f"expected {len(columns)} comma-separated fields, got {len(row)}")
            yield reader.line_num, dict(zip(columns, row, strict=True))


def _header(path: str, header: list[str], required: tuple[str, ...]) -> list[str]:
    columns = [c.strip() for c in header]
    missing = [c for c in required if c not in columns]
    if missing:
        raise TraceFormatError(path, 1, missing[0],
                               f"header lacks column(s) {', '.join(missing)}; expected {','.join(required)}")
    return columns


def _parse_pod(path: str, line: int, row: dict[str, str], report: LoadReport, stats: _Stats) -> _Pod | None:
    phase = row["pod_phase"].strip()
    if phase not in PHASES and phase != "Pending":
        raise TraceFormatError(path, line, "pod_phase",
                               f"{phase!r} is not one of Succeeded, Running, Pending, Failed")
    created = _int(path, line, row, "creation_time")
    scheduled = _optional_int(path, line, row, "scheduled_time")
    deleted = _optional_int(path, line, row, "deletion_time")
    stats.trace_end = max(stats.trace_end, deleted or 0)
    reason = _skip_reason(phase, scheduled, deleted)
    if reason is not None:
        report.skip(reason)
        return None
    assert scheduled is not None and deleted is not None  # _skip_reason checked them
    gpus, cpus, mem_gb = _resources(path, line, row, stats)
    if phase == "Running":
        stats.running_ends.append(deleted)
    stats.gpu_spec += bool(row["gpu_spec"].strip())
    return _Pod(row["name"].strip(), row["qos"].strip() or "default", float(created), float(scheduled),
                float(deleted - scheduled), gpus, cpus, mem_gb, PHASES[phase])


def _skip_reason(phase: str, scheduled: int | None, deleted: int | None) -> str | None:
    if phase == "Pending" or scheduled is None:
        return SKIP_PENDING
    if deleted is None:
        return SKIP_NO_END
    if deleted < scheduled:
        return SKIP_NEGATIVE
    return None


def _resources(path: str, line: int, row: dict[str, str], stats: _Stats) -> tuple[int, float, float]:
    gpus = _int(path, line, row, "num_gpu")
    gpu_milli = _int(path, line, row, "gpu_milli")
    cpu_milli = _int(path, line, row, "cpu_milli")
    memory_mib = _int(path, line, row, "memory_mib")
    if gpus == 1 and gpu_milli < 1000:
        stats.shared += 1  # a fraction of one GPU: the scheduler hands out whole GPUs, so it gets one
    if gpus == 0:
        stats.cpu_only += 1
    # 3 decimals (1 MiB): exact enough, and the canonical CSV round-trips it.
    return gpus, cpu_milli / 1000, round(memory_mib / 1024, 3)


def _optional_int(path: str, line: int, row: dict[str, str], field: str) -> int | None:
    """An empty cell means 'did not happen' (a Pending pod has no scheduled_time)."""
    return None if row[field].strip() == "" else _int(path, line, row, field)


def _int(path: str, line: int, row: dict[str, str], field: str) -> int:
    text = row[field].strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceFormatError(path, line, field, f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise TraceFormatError(path, line, field, f"must be >= 0, got {value}")
    return value


def _add_notes(report: LoadReport, stats: _Stats) -> None:
    if stats.shared:
        report.notes.append(f"{stats.shared} pods ask for a fraction of one GPU (gpu_milli < 1000): "
                            "rounded up to one whole GPU")
    if stats.cpu_only:
        report.notes.append(f"{stats.cpu_only} pods ask for no GPU: kept as CPU-only jobs (0 GPUs)")
    if stats.running_ends:
        censored = sum(1 for e in stats.running_ends if e == stats.trace_end)
        report.notes.append(
            f"{len(stats.running_ends)} pods were Running when the trace was taken: counted as Pass with "
            f"runtime deletion_time - scheduled_time; {censored} of them end exactly at the trace end "
            f"({stats.trace_end} s), so their runtime is censored there"
        )
    if stats.gpu_spec:
        report.notes.append(f"{stats.gpu_spec} pods restrict GPU types (gpu_spec): restriction ignored")


def _to_spec(p: _Pod, t0: float) -> JobSpec:
    return JobSpec(
        job_id=p.name,
        tenant=p.tenant,
        submit_time_s=p.created - t0,
        learners=1,
        gpus_per_learner=p.gpus,
        duration_s=p.duration,
        cpus_per_learner=p.cpus,
        mem_gb_per_learner=p.mem_gb,
        final_status=p.status,
    )


# ------------------------------------------------------------------------------------------ node list


def load_node_list(path: str | Path) -> Cluster:
    """Read an openb_node_list_*.csv (sn,cpu_milli,memory_mib,gpu,model) as a Cluster.

    GPU type = model ('cpu' for nodes without GPUs); CPUs and memory as listed. Racks: nodes of one SKU
    (model, GPUs, CPUs, memory) in file order, 16 to a rack (docs/clusters.md).
    """
    name = str(path)
    nodes: list[Node] = []
    for line, row in _records(path, NODE_COLUMNS):
        nodes.append(_node(name, line, row))
    if not nodes:
        raise TraceFormatError(name, None, None, "the node list has no nodes")
    skus = [(n.name, f"{n.gpus}x{n.gpu_type}-{n.cpus:g}cpu-{n.mem_gb:g}gb") for n in nodes]
    racks = racks_by_sku(skus)
    order = {sku: i for i, sku in enumerate(dict.fromkeys(s for _, s in skus))}
    sku_of = dict(skus)
    # Nodes of one rack get consecutive indices, so a placer scanning indices stays within a rack.
    ranked = sorted(nodes, key=lambda n: (order[sku_of[n.name]], racks[n.name]))
    return Cluster(tuple(_with_rack(n, racks[n.name]) for n in ranked), name="alibaba")


def _node(path: str, line: int, row: dict[str, str]) -> Node:
    cpu_milli = _int(path, line, row, "cpu_milli")
    memory_mib = _int(path, line, row, "memory_mib")
    gpus = _int(path, line, row, "gpu")
    model = row.get("model", "").strip() or ("cpu" if gpus == 0 else "gpu")
    return Node(row["sn"].strip(), gpus, cpu_milli / 1000, memory_mib / 1024, model)


def _with_rack(node: Node, rack: str) -> Node:
    return Node(node.name, node.gpus, node.cpus, node.mem_gb, node.gpu_type, rack)
