"""Nodes and clusters: the static shape of the hardware a scheduler hands out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class Node:
    """One server. `rack` groups servers that share a top-of-rack switch (locality)."""

    name: str
    gpus: int
    cpus: float
    mem_gb: float
    gpu_type: str = "gpu"
    rack: str = "rack0"

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"node {self.name}: gpus must be >= 0, got {self.gpus}")
        if self.cpus < 0 or self.mem_gb < 0:
            raise ValueError(f"node {self.name}: cpus and mem_gb must be >= 0")


@dataclass(frozen=True)
class Cluster:
    """An immutable list of nodes with vectorised views used by placers.

    Node i is addressed by its index everywhere (allocations, free-capacity arrays), so the
    arrays below line up with `nodes`.
    """

    nodes: tuple[Node, ...]
    name: str = "cluster"

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        names = [n.name for n in self.nodes]
        dupes = [n for n, c in Counter(names).items() if c > 1]
        if dupes:
            raise ValueError(f"duplicate node names in cluster: {dupes[:5]}")

    @cached_property
    def total_gpus(self) -> int:
        # Cached: the simulator asks at every event, and the nodes never change.
        return int(self.gpu_capacity.sum())

    @cached_property
    def gpu_capacity(self) -> npt.NDArray[np.int64]:
        return np.array([n.gpus for n in self.nodes], dtype=np.int64)

    @cached_property
    def cpu_capacity(self) -> npt.NDArray[np.float64]:
        return np.array([n.cpus for n in self.nodes], dtype=np.float64)

    @cached_property
    def mem_capacity(self) -> npt.NDArray[np.float64]:
        return np.array([n.mem_gb for n in self.nodes], dtype=np.float64)

    @cached_property
    def rack_ids(self) -> npt.NDArray[np.int64]:
        """Integer rack id per node (index into `racks`)."""
        index = {r: i for i, r in enumerate(self.racks)}
        return np.array([index[n.rack] for n in self.nodes], dtype=np.int64)

    @cached_property
    def racks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.rack for n in self.nodes))

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.gpu_type for n in self.nodes if n.gpus > 0))

    @cached_property
    def type_ids(self) -> npt.NDArray[np.int64]:
        index = {t: i for i, t in enumerate(dict.fromkeys(n.gpu_type for n in self.nodes))}
        return np.array([index[n.gpu_type] for n in self.nodes], dtype=np.int64)

    @cached_property
    def type_masks(self) -> tuple[tuple[str, npt.NDArray[np.bool_]], ...]:
        """(GPU type, node mask) for each type that has GPUs, in first-seen order."""
        names = np.array([n.gpu_type for n in self.nodes])
        has = self.gpu_capacity > 0
        return tuple((t, (names == t) & has) for t in self.gpu_types)

    @cached_property
    def type_mask_of(self) -> dict[str, npt.NDArray[np.bool_]]:
        """type_masks by GPU type (placers look a preferred type's mask up for nearly every placement)."""
        return dict(self.type_masks)

    @cached_property
    def all_nodes_mask(self) -> npt.NDArray[np.bool_]:
        return np.ones(len(self.nodes), dtype=bool)

    @cached_property
    def mask_ranges(self) -> dict[int, tuple[int, int]]:
        """id(mask) -> (first, end) for all_nodes_mask and each of type_masks whose nodes are one run of
        consecutive indices (a machine list grouped by type): placers that hold free-GPU buckets in server
        order find a type's servers in a bucket by bisection."""
        out = {}
        for mask in (self.all_nodes_mask, *(m for _, m in self.type_masks)):
            idx = np.flatnonzero(mask)
            if idx.size and int(idx[-1]) - int(idx[0]) + 1 == idx.size:
                out[id(mask)] = (int(idx[0]), int(idx[-1]) + 1)
        return out

    @cached_property
    def preference_cache(self) -> dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[npt.NDArray[np.bool_],
                                                                                      tuple[int, int] | None], ...]]:
        """Memo for placement.base.preferred_groups: (GPU types in preferred order, excluded types) -> their
        (mask, span) pairs."""
        return {}

    @cached_property
    def fit_cache(self) -> dict[tuple[int, int, float, float, tuple[str, ...]], str | None]:
        """Memo for scheduling.feasibility: whether a job shape can ever run here (the cluster is immutable)."""
        return {}

    @property
    def total_cpus(self) -> float:
        return float(self.cpu_capacity.sum())

    @property
    def total_mem_gb(self) -> float:
        return float(self.mem_capacity.sum())

    def gpus_of_type(self, gpu_type: str) -> int:
        return sum(n.gpus for n in self.nodes if n.gpu_type == gpu_type)

    def describe(self) -> str:
        groups = Counter((n.gpus, n.gpu_type) for n in self.nodes)
        parts = [f"{c}x{g}:{t}" for (g, t), c in groups.items()]
        return (
            f"{len(self.nodes)} nodes, {self.total_gpus} GPUs ({', '.join(parts)}), "
            f"{len(self.racks)} racks"
        )
