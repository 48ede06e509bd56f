"""The local machine as a cluster: nvidia-smi parsing, `--nodes` specs and the physical GPU map."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from loadmaster.platform.nodes import (
    Gpu,
    Machine,
    NodesSpecError,
    detect_local_nodes,
    gpu_type_of,
    local_gpu_map,
    parse_nodes,
    parse_nvidia_smi,
    probe_machine,
    query_gpus,
    visible_gpus,
)

# `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits` on an 8-GPU server
SMI_8xH100 = "\n".join(
    f"{i}, GPU-{i:08x}-1111-2222-3333-444455556666, NVIDIA H100 80GB HBM3, 81559" for i in range(8)
) + "\n"


def _server(gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3") -> Machine:
    return Machine(tuple(Gpu(i, f"GPU-{i}", name, 80.0) for i in range(gpus)), cpus=64.0, mem_gb=512.0)


def test_parse_nvidia_smi() -> None:
    gpus = parse_nvidia_smi(SMI_8xH100)
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"} and {g.gpu_type for g in gpus} == {"h100"}
    assert gpus[0].mem_gb == pytest.approx(79.6, abs=0.1)
    odd = parse_nvidia_smi("0, GPU-x, Some, Board, [N/A]\n")
    assert odd[0].name == "Some,Board" and odd[0].mem_gb == 0.0
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("0, NVIDIA H200\n")


@pytest.mark.parametrize(("name", "gpu_type"), [
    ("NVIDIA A100-SXM4-80GB", "a100"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA H200", "h200"),
    ("NVIDIA H100 PCIe", "h100"), ("NVIDIA GeForce RTX 4090", "rtx4090"), ("Tesla T4", "t4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA RTX A6000", "rtxa6000"), ("Tesla K80", "k80"), ("NVIDIA", "gpu"),
])
def test_gpu_type_of(name: str, gpu_type: str) -> None:
    assert gpu_type_of(name) == gpu_type


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    gpus = parse_nvidia_smi(SMI_8xH100)
    assert visible_gpus(gpus, None) == gpus
    assert [g.index for g in visible_gpus(gpus, "3,1")] == [3, 1]
    assert [g.index for g in visible_gpus(gpus, gpus[5].uuid)] == [5]
    assert visible_gpus(gpus, "") == ()
    assert [g.index for g in visible_gpus(gpus, "2,99,4")] == [2]  # CUDA stops at the first unknown entry


def test_detect_one_node_with_all_of_the_machine() -> None:
    cluster = detect_local_nodes(_server())
    (node,) = cluster.nodes
    assert (node.name, node.gpus, node.cpus, node.mem_gb, node.gpu_type) == ("local", 8, 64.0, 512.0, "h100")


def test_detect_a_machine_without_gpus() -> None:
    (node,) = detect_local_nodes(Machine((), cpus=2.0, mem_gb=8.0)).nodes
    assert (node.gpus, node.cpus) == (0, 2.0)


def test_detect_mixed_gpu_types_gives_a_node_per_type() -> None:
    a100, t4 = "NVIDIA A100-SXM4-80GB", "Tesla T4"
    gpus = (Gpu(0, "a", a100, 80), Gpu(1, "b", t4, 16), Gpu(2, "c", a100, 80))
    machine = Machine(gpus, cpus=30.0, mem_gb=300.0)
    cluster = detect_local_nodes(machine)
    assert [(n.name, n.gpus, n.gpu_type, n.cpus) for n in cluster.nodes] == [
        ("local-a100", 2, "a100", 20.0), ("local-t4", 1, "t4", 10.0)]
    assert local_gpu_map(cluster, machine) == {"local-a100": (0, 2), "local-t4": (1,)}


def test_virtual_nodes_split_the_machine_evenly() -> None:
    machine = _server()
    cluster = parse_nodes("2x4", machine)
    assert [(n.name, n.gpus, n.cpus, n.mem_gb, n.gpu_type) for n in cluster.nodes] == [
        ("h100-000", 4, 32.0, 256.0, "h100"), ("h100-001", 4, 32.0, 256.0, "h100")]
    assert {n.rack for n in cluster.nodes} == {"local"}
    assert local_gpu_map(cluster, machine) == {"h100-000": (0, 1, 2, 3), "h100-001": (4, 5, 6, 7)}


def test_virtual_nodes_keep_what_the_spec_gives() -> None:
    cluster = parse_nodes("1x2:a100:8cpu:32gb,2x1", _server())
    assert [(n.gpus, n.cpus, n.mem_gb, n.gpu_type) for n in cluster.nodes] == [
        (2, 8.0, 32.0, "a100"), (1, 64 / 3, 170.7, "h100"), (1, 64 / 3, 170.7, "h100")]


def test_more_gpus_than_the_machine_has_exist_in_name() -> None:
    machine = Machine((), cpus=2.0, mem_gb=8.0)
    cluster = parse_nodes("2x2", machine)
    assert cluster.total_gpus == 4 and {n.gpu_type for n in cluster.nodes} == {"gpu"}
    assert local_gpu_map(cluster, machine) == {"gpu-000": (0, 1), "gpu-001": (2, 3)}


@pytest.mark.parametrize("spec", [None, "auto", " AUTO "])
def test_auto_detects(spec: str | None) -> None:
    assert parse_nodes(spec, _server()).nodes[0].name == "local"


@pytest.mark.parametrize(("spec", "match"), [("philly", "use 'auto'"), ("2x4:8cpu:9cpu", "cpus twice"),
                                             ("0x4", "COUNT 0")])
def test_bad_specs_say_what_is_accepted(spec: str, match: str) -> None:
    with pytest.raises(NodesSpecError, match=match):
        parse_nodes(spec, _server())


def test_probe_this_machine() -> None:
    machine = probe_machine(env={})
    assert machine.cpus >= 1 and machine.mem_gb > 0
    if shutil.which("nvidia-smi") is None:
        assert machine.gpus == ()
    else:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        assert len(machine.gpus) == len([line for line in listed.splitlines() if line.startswith("GPU ")])
    assert detect_local_nodes(machine).total_gpus == len(machine.gpus)


def test_a_missing_or_failing_nvidia_smi_means_no_gpus() -> None:
    assert query_gpus("/nonexistent/nvidia-smi") == ()
    assert query_gpus("false") == ()
