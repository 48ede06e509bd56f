"""A script written for Lightning's `Trainer(num_nodes=2, devices=2, strategy="ddp")`, without Lightning: it reads
the environment the way Lightning 2.x does under a launcher (lightning.fabric's TorchElasticEnvironment, picked when
RANK, GROUP_RANK, LOCAL_RANK and LOCAL_WORLD_SIZE are set) and makes Lightning's own checks, then trains with DDP and
uses loadmaster.runtime to stop cleanly (checkpoint on a stop request) and to report loss and throughput.

    python lightning_style.py --num-nodes 2 --devices 2 [--steps N] [--delay S]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from loadmaster import runtime

TORCHELASTIC = {"RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}


def cluster_environment(num_nodes: int, devices: int) -> dict[str, int]:
    """What Lightning's TorchElasticEnvironment reads, and the checks Lightning makes on it."""
    missing = TORCHELASTIC - os.environ.keys()
    if missing:
        raise RuntimeError(f"Lightning would not detect the launcher: {sorted(missing)} unset, so it would start "
                           "processes itself and every node would think it is node 0")
    env = {"world_size": int(os.environ["WORLD_SIZE"]), "global_rank": int(os.environ["RANK"]),
           "local_rank": int(os.environ["LOCAL_RANK"]), "node_rank": int(os.environ["GROUP_RANK"])}
    if devices * num_nodes != env["world_size"]:
        raise ValueError(f"You set `devices={devices}` and `num_nodes={num_nodes}` in Lightning, but the product "
                         f"({devices} * {num_nodes}) does not match the world size ({env['world_size']}).")
    # LightningEnvironment (no launcher) and most launch scripts read NODE_RANK and derive the global rank
    if int(os.environ["NODE_RANK"]) != env["node_rank"]:
        raise ValueError(f"NODE_RANK={os.environ['NODE_RANK']} but GROUP_RANK={env['node_rank']}")
    if env["node_rank"] * devices + env["local_rank"] != env["global_rank"]:
        raise ValueError(f"node_rank * devices + local_rank = {env['node_rank'] * devices + env['local_rank']} is "
                         f"not RANK={env['global_rank']}")
    if int(os.environ["LOCAL_WORLD_SIZE"]) != devices:
        raise ValueError(f"LOCAL_WORLD_SIZE={os.environ['LOCAL_WORLD_SIZE']} but devices={devices}")
    return env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-nodes", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.1)
    args = parser.parse_args()

    runtime.init()
    env = cluster_environment(args.num_nodes, args.devices)
    print("lightning " + json.dumps(env, sort_keys=True))
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    latest = runtime.latest_checkpoint()
    if latest is not None:
        state = torch.load(latest)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = runtime.checkpoint_step(latest)
        print(f"rank {env['global_rank']} resumed from step {step}")
    target = torch.arange(8, dtype=torch.float32)
    started = time.monotonic()
    while step < args.steps:
        step += 1
        generator = torch.Generator().manual_seed(step * 1000 + env["global_rank"])
        x = torch.randn(32, 8, generator=generator)
        loss = nn.functional.mse_loss(model(x).squeeze(1), x @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {env['global_rank']} step {step} loss {loss.item():.4f}")
        runtime.report(step=step, total_steps=args.steps, loss=round(loss.item(), 4),
                       samples_per_s=round(32 * args.devices * args.num_nodes * step
                                           / max(time.monotonic() - started, 1e-6), 1))
        time.sleep(args.delay)
        stop = torch.tensor([1 if runtime.should_preempt() else 0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank leaves at the same step
        if stop.item():
            if env["global_rank"] == 0:
                runtime.save_checkpoint(lambda path: torch.save(
                    {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, path), step)
            dist.barrier()
            print(f"rank {env['global_rank']} stopped at step {step}")
            dist.destroy_process_group()
            return
    dist.barrier()
    print(f"rank {env['global_rank']} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
