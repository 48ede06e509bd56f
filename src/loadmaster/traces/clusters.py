"""Cluster specs: turn a short text, a YAML file or a known name into a Cluster.

Accepted forms (docs/clusters.md has the long version):
  shorthand   COUNTxGPUS[:TYPE][:NNcpu][:NNgb], groups joined by commas: '9x4:v100,9x4:p100,9x4:k80'
  YAML file   a path ending in .yaml/.yml with a `nodes:` list
  machine list  a Philly cluster_machine_list or an Alibaba openb_node_list_*.csv file
  name        'philly' (552 real Philly machines) or 'alibaba' (1,213 Alibaba GPU nodes)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from loadmaster.core.cluster import Cluster, Node

# Synergy's reference server (OSDI'22): 8 V100 GPUs, 24 CPUs, 500 GB of memory. Scaling it per GPU gives
# the defaults for servers whose CPUs and memory a spec leaves out.
CPUS_PER_GPU = 3.0
MEM_GB_PER_GPU = 62.5
# One top-of-rack switch per 16 servers: 16 servers of 8 GPUs hold Philly's largest job (128 GPUs).
RACK_SIZE = 16
DEFAULT_GPU_TYPE = "gpu"

USAGE = """accepted cluster specs:
  COUNTxGPUS[:TYPE][:NNcpu][:NNgb][,...]   e.g. '16x8', '9x4:v100,9x4:p100,9x4:k80', '100x4:32cpu:128gb'
  PATH.yaml                                a YAML file with a `nodes:` list (see docs/clusters.md)
  PATH to a Philly cluster_machine_list or an Alibaba openb_node_list_*.csv
  philly | alibaba                         the bundled real clusters"""


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be read; the message says what is wrong and how to fix it."""


def default_cpus(gpus: int) -> float:
    return CPUS_PER_GPU * gpus


def default_mem_gb(gpus: int) -> float:
    return MEM_GB_PER_GPU * gpus


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """`count` identical servers; the unit that shorthand groups and YAML entries both describe."""

    count: int
    gpus: int
    gpu_type: str = DEFAULT_GPU_TYPE
    cpus: float | None = None
    mem_gb: float | None = None
    name: str | None = None
    rack: str | None = None


def build_cluster(groups: Iterable[NodeGroup], name: str) -> Cluster:
    """Expand groups into nodes. Each group starts a new rack and fills racks of RACK_SIZE nodes,
    unless it names its rack, in which case all its nodes share that rack."""
    nodes: list[Node] = []
    per_type: dict[str, int] = {}
    next_rack = 0
    for group in groups:
        cpus = default_cpus(group.gpus) if group.cpus is None else group.cpus
        mem = default_mem_gb(group.gpus) if group.mem_gb is None else group.mem_gb
        for k in range(group.count):
            rack = f"rack{next_rack + k // RACK_SIZE}" if group.rack is None else group.rack
            nodes.append(Node(_node_name(group, k, per_type), group.gpus, cpus, mem, group.gpu_type, rack))
        if group.rack is None:
            next_rack += -(-group.count // RACK_SIZE)
    try:
        return Cluster(tuple(nodes), name=name)
    except ValueError as exc:
        raise ClusterSpecError(f"{name}: {exc}") from None


def _node_name(group: NodeGroup, k: int, per_type: dict[str, int]) -> str:
    if group.name is not None:
        return group.name if group.count == 1 else f"{group.name}-{k:03d}"
    # Unnamed nodes are numbered per GPU type across groups so that names stay unique.
    index = per_type.get(group.gpu_type, 0)
    per_type[group.gpu_type] = index + 1
    return f"{group.gpu_type}-{index:03d}"


def racks_by_sku(members: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Rack per node for real machine lists, from (node name, SKU label) pairs in rack order.

    Nodes of one SKU (hardware configuration) fill racks of RACK_SIZE in the given order, and different
    SKUs never share a rack: a datacenter installs a hardware generation rack by rack, and a gang spread
    over two SKUs would run at the pace of the slower one anyway.
    """
    racks: dict[str, str] = {}
    filled: dict[str, int] = {}
    for node_name, sku in members:
        n = filled.get(sku, 0)
        filled[sku] = n + 1
        racks[node_name] = f"{sku}-rack{n // RACK_SIZE:02d}"
    return racks


# ---------------------------------------------------------------------------------------------- shorthand

_GROUP_RE = re.compile(r"(?P<count>\d+)\s*[xX]\s*(?P<gpus>\d+)(?P<opts>(?::[^:]*)*)")
_CPU_RE = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*cpus?", re.IGNORECASE)
_MEM_RE = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*gb", re.IGNORECASE)
_TYPE_RE = re.compile(r"[A-Za-z][\w.-]*")


def looks_like_shorthand(spec: str) -> bool:
    return all(_GROUP_RE.fullmatch(g.strip()) for g in spec.split(","))


def parse_shorthand(spec: str) -> Cluster:
    """'9x4:v100,9x4:p100' -> Cluster. A token NNcpu or NNgb is a resource amount, any other token the
    GPU type (so a type cannot be spelled like a memory size; use YAML for that)."""
    return build_cluster(parse_shorthand_groups(spec), name=spec)


def parse_shorthand_groups(spec: str) -> list[NodeGroup]:
    """The groups of a shorthand spec, with cpus/mem_gb None where the spec leaves them out, so that a
    caller can fill them from a real machine (platform/nodes.py) instead of the per-GPU defaults."""
    return [_parse_group(spec, g.strip()) for g in spec.split(",")]


def _bad(spec: str, problem: str) -> ClusterSpecError:
    return ClusterSpecError(f"cluster spec {spec!r}: {problem}\n{USAGE}")


def _parse_group(spec: str, text: str) -> NodeGroup:
    m = _GROUP_RE.fullmatch(text)
    if m is None:
        raise _bad(spec, f"cannot read group {text!r}")
    count, gpus = int(m["count"]), int(m["gpus"])
    if count < 1:
        raise _bad(spec, f"group {text!r} has COUNT 0; use at least 1 node")
    found: dict[str, Any] = {}
    for token in filter(None, (t.strip() for t in m["opts"].split(":"))):
        key, value = _parse_option(spec, text, token)
        if key in found:
            raise _bad(spec, f"group {text!r} gives the {key} twice")
        found[key] = value
    return NodeGroup(count=count, gpus=gpus, **found)


def _parse_option(spec: str, group: str, token: str) -> tuple[str, object]:
    if (m := _CPU_RE.fullmatch(token)) is not None:
        return "cpus", float(m["n"])
    if (m := _MEM_RE.fullmatch(token)) is not None:
        return "mem_gb", float(m["n"])
    if _TYPE_RE.fullmatch(token):
        return "gpu_type", token
    raise _bad(spec, f"in group {group!r}, {token!r} is neither a GPU type (a name starting with a "
                     "letter), NNcpu nor NNgb")


# ----------------------------------------------------------------------------------------- entry point


def load_cluster(spec: str) -> Cluster:
    """Build a Cluster from a shorthand, a YAML or machine-list path, or the name philly/alibaba."""
    text = spec.strip()
    if text.lower() in ("philly", "alibaba"):
        return _named(text.lower())
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml"):
        from loadmaster.traces.cluster_file import load_yaml

        return load_yaml(path)
    if path.is_file():
        return _load_file(path)
    if text and looks_like_shorthand(text):
        return parse_shorthand(text)
    raise _bad(spec, "not a known name, an existing file or a shorthand")


def _load_file(path: Path) -> Cluster:
    # Imported here because those loaders use this module's defaults (an import at the top would loop).
    from loadmaster.traces import alibaba, philly

    with open(path, errors="replace") as f:
        head = f.readline().strip().lower()
    if head.startswith("machineid"):
        return philly.load_machine_list(path)
    if head.startswith("sn,"):
        return alibaba.load_node_list(path)
    from loadmaster.traces.cluster_file import load_yaml

    return load_yaml(path)


@cache
def _named(name: str) -> Cluster:
    # Cached: a Cluster is immutable, and the CLI may ask for the same one many times. Only the loader of the
    # one named is imported (Alibaba's brings the history types along: a Philly run needs neither).
    from loadmaster.traces import samples

    if name == "philly":
        from loadmaster.traces import philly

        return philly.load_machine_list(samples.data_path("philly", "cluster_machine_list"))
    from loadmaster.traces import alibaba

    return alibaba.load_node_list(samples.data_path("alibaba", "openb_node_list_gpu_node.csv"))
