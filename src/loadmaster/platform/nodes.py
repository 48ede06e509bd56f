"""The nodes the control loop schedules on when every learner runs on this machine (LocalExecutor).

`--nodes` accepts:
  auto        this machine as it is: one node `local` with its GPUs (nvidia-smi), CPUs and memory; GPUs of
              several types give one node per type (`local-<type>`), since a node has one GPU type
  COUNTxGPUS[:TYPE][:NNcpu][:NNgb][,...]
              virtual nodes carved out of this machine, in the cluster shorthand (traces/clusters.py):
              CPUs and memory a group leaves out are the machine's, split evenly over all the nodes; a type
              left out is the machine's GPU type. `2x4` on an 8-GPU server is two 4-GPU nodes.
local_gpu_map() tells the executor which physical GPUs each node's GPU indices are. A spec may ask for
more GPUs than the machine has (to try the platform on a laptop); those GPUs exist only in name.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace

from loadmaster.core.cluster import Cluster, Node
from loadmaster.traces.clusters import (
    DEFAULT_GPU_TYPE,
    ClusterSpecError,
    build_cluster,
    looks_like_shorthand,
    parse_shorthand_groups,
)

log = logging.getLogger(__name__)

AUTO = "auto"
LOCAL_NODE = "local"
LOCAL_RACK = "local"  # every virtual node is on this one machine: locality between them is perfect
_QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")


class NodesSpecError(ValueError):
    """A --nodes value that cannot be read; the message says what is accepted."""


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # nvidia-smi's index (PCI bus order), what CUDA_VISIBLE_DEVICES names
    uuid: str
    name: str  # as the driver says it: "NVIDIA H100 80GB HBM3"
    mem_gb: float

    @property
    def gpu_type(self) -> str:
        return gpu_type_of(self.name)


@dataclass(frozen=True, slots=True)
class Machine:
    gpus: tuple[Gpu, ...]
    cpus: float
    mem_gb: float

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.gpu_type for g in self.gpus))


# ------------------------------------------------------------------------------------------------ probing


def probe_machine(env: Mapping[str, str] | None = None, nvidia_smi: str = "nvidia-smi") -> Machine:
    """This machine's GPUs (those CUDA_VISIBLE_DEVICES leaves visible, if the server runs under it), CPUs
    (those this process may run on) and memory."""
    env = os.environ if env is None else env
    gpus = visible_gpus(query_gpus(nvidia_smi), env.get("CUDA_VISIBLE_DEVICES"))
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return Machine(gpus=gpus, cpus=cpus, mem_gb=_memory_gb())


def query_gpus(nvidia_smi: str = "nvidia-smi") -> tuple[Gpu, ...]:
    """The GPUs nvidia-smi lists; none where it is missing or fails (a machine without NVIDIA GPUs)."""
    try:
        out = subprocess.run([nvidia_smi, *_QUERY], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return ()
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi could not be run (%s); assuming no GPUs", exc)
        return ()
    if out.returncode != 0:
        log.warning("nvidia-smi failed (%s); assuming no GPUs", (out.stderr or out.stdout).strip()[:200])
        return ()
    return parse_nvidia_smi(out.stdout)


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """Rows of `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            raise ValueError(f"unexpected nvidia-smi line {line!r} (want index, uuid, name, memory.total)")
        index, uuid, mem = fields[0], fields[1], fields[-1]
        name = ",".join(fields[2:-1])  # a name with a comma in it stays whole
        try:
            mem_gb = float(mem) / 1024  # MiB
        except ValueError:
            mem_gb = 0.0  # "[N/A]" on some boards: the memory is not what the scheduler places by
        gpus.append(Gpu(int(index), uuid, name, mem_gb))
    return tuple(gpus)


def visible_gpus(gpus: tuple[Gpu, ...], cuda_visible_devices: str | None) -> tuple[Gpu, ...]:
    """The GPUs a CUDA_VISIBLE_DEVICES value (indices or UUIDs, comma-separated) leaves; all when unset."""
    if cuda_visible_devices is None:
        return gpus
    wanted = [w.strip() for w in cuda_visible_devices.split(",") if w.strip()]
    chosen = []
    for w in wanted:
        match = [g for g in gpus if str(g.index) == w or g.uuid == w or (w.startswith("GPU-") and g.uuid.startswith(w))]
        if not match:
            break  # CUDA stops at the first entry it cannot resolve
        chosen.append(match[0])
    return tuple(chosen)


_VENDOR = {"nvidia", "tesla", "geforce", "quadro"}
_FORM = re.compile(r"\d+gb|hbm\w*|pcie|sxm\w*|nvl\w*|mig\w*|max|q|mobile|laptop|\d+w")


def gpu_type_of(name: str) -> str:
    """A short type from a driver's GPU name, as cluster specs write types: 'NVIDIA A100-SXM4-80GB' ->
    'a100', 'Tesla V100-SXM2-16GB' -> 'v100', 'NVIDIA GeForce RTX 4090' -> 'rtx4090'."""
    words = [w for w in re.split(r"[\s\-_]+", name.lower()) if w and w not in _VENDOR]
    kept = []
    for word in words:
        if _FORM.fullmatch(word):
            break
        kept.append(word)
    return "".join(kept) or DEFAULT_GPU_TYPE


def _memory_gb() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


# ------------------------------------------------------------------------------------------------- nodes


def detect_local_nodes(machine: Machine | None = None) -> Cluster:
    """This machine as the cluster: one node (or one per GPU type), all of its CPUs and memory."""
    machine = probe_machine() if machine is None else machine
    types = machine.gpu_types
    if len(types) <= 1:
        node = Node(LOCAL_NODE, len(machine.gpus), machine.cpus, round(machine.mem_gb, 1),
                    gpu_type=types[0] if types else DEFAULT_GPU_TYPE, rack=LOCAL_RACK)
        return Cluster((node,), name=LOCAL_NODE)
    # A node has one GPU type: split the machine by type, CPUs and memory in proportion to the GPUs.
    total = len(machine.gpus)
    nodes = []
    for gpu_type in types:
        count = sum(1 for g in machine.gpus if g.gpu_type == gpu_type)
        nodes.append(Node(f"{LOCAL_NODE}-{gpu_type}", count, machine.cpus * count / total,
                          round(machine.mem_gb * count / total, 1), gpu_type=gpu_type, rack=LOCAL_RACK))
    return Cluster(tuple(nodes), name=LOCAL_NODE)


def parse_nodes(spec: str | None, machine: Machine | None = None) -> Cluster:
    """The cluster for `--nodes SPEC` (see the module's docstring); None or 'auto' detects the machine."""
    text = (spec or AUTO).strip()
    machine = probe_machine() if machine is None else machine
    if text.lower() == AUTO:
        return detect_local_nodes(machine)
    if not looks_like_shorthand(text):
        raise NodesSpecError(f"--nodes {spec!r}: use 'auto' (this machine as it is) or COUNTxGPUS[:TYPE][:NNcpu]"
                             "[:NNgb][,...] for virtual nodes on this machine, e.g. '2x4' or '1x2:8cpu:32gb'")
    try:
        groups = parse_shorthand_groups(text)
    except ClusterSpecError as exc:
        raise NodesSpecError(f"--nodes: {exc}") from None
    count = sum(g.count for g in groups)
    machine_type = machine.gpu_types[0] if len(machine.gpu_types) == 1 else DEFAULT_GPU_TYPE
    wanted = sum(g.count * g.gpus for g in groups)
    if wanted > len(machine.gpus):
        log.warning("--nodes %s asks for %d GPUs; this machine has %d: the others exist only in name",
                    text, wanted, len(machine.gpus))
    filled = [
        replace(
            g,
            cpus=machine.cpus / count if g.cpus is None else g.cpus,
            mem_gb=round(machine.mem_gb / count, 1) if g.mem_gb is None else g.mem_gb,
            gpu_type=machine_type if g.gpu_type == DEFAULT_GPU_TYPE else g.gpu_type,
            rack=LOCAL_RACK,
        )
        for g in groups
    ]
    return build_cluster(filled, name=text)


def local_gpu_map(cluster: Cluster, machine: Machine | None = None) -> dict[str, tuple[int, ...]]:
    """Physical GPU indices per node, for LocalExecutor(gpu_map=...): node after node takes the next GPUs
    of its own type (any type when the machine has none of it); past the machine's GPUs, indices go on
    counting (GPUs in name only)."""
    machine = probe_machine() if machine is None else machine
    free = list(machine.gpus)
    next_virtual = max((g.index for g in machine.gpus), default=-1) + 1
    mapping: dict[str, tuple[int, ...]] = {}
    for node in cluster.nodes:
        same_type = [g for g in free if g.gpu_type == node.gpu_type]
        pool = same_type if same_type else free
        taken = pool[:node.gpus]
        for g in taken:
            free.remove(g)
        indices = [g.index for g in taken]
        while len(indices) < node.gpus:
            indices.append(next_virtual)
            next_virtual += 1
        mapping[node.name] = tuple(indices)
    return mapping
