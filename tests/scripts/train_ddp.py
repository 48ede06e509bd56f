"""A plain PyTorch DDP script, written for torchrun and not for loadmaster: env:// rendezvous, the device picked
by LOCAL_RANK, a checkpoint every few steps, no SIGTERM handler (a stop kills it between checkpoints).

On a machine without GPUs it trains on the CPU, but still checks what `torch.cuda.set_device(LOCAL_RANK)` needs
on one with GPUs: that CUDA_VISIBLE_DEVICES holds at least LOCAL_RANK + 1 devices. It prints the variables of
the launch contract it saw (a line starting `contract `) for the test to compare with the job's placement.

    python train_ddp.py [--steps N] [--delay S] [--checkpoint-every K] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "GROUP_WORLD_SIZE",
            "ROLE_RANK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "MASTER_ADDR",
            "TORCHELASTIC_RUN_ID")


def pick_device(local_rank: int, cpu: bool) -> torch.device:
    if torch.cuda.is_available() and not cpu:
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if visible and local_rank >= len(visible):
        # what set_device(LOCAL_RANK) raises on a GPU machine when the learner sees too few GPUs
        raise RuntimeError(f"CUDA error: invalid device ordinal (LOCAL_RANK={local_rank}, "
                           f"CUDA_VISIBLE_DEVICES={','.join(visible)})")
    return torch.device("cpu")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even where CUDA is available "
                                                            "(the GPUs of virtual nodes are not all real)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    device = pick_device(local_rank, args.cpu)
    print("contract " + json.dumps({k: os.environ.get(k) for k in CONTRACT}, sort_keys=True))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    assert dist.get_rank() == rank and dist.get_world_size() == world

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    checkpoint = Path(os.environ.get("LOADMASTER_CHECKPOINT_DIR", "checkpoints")) / "ddp.pt"
    start = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank} resumed from step {start}")
    target = torch.arange(8, dtype=torch.float32, device=device)
    for step in range(start + 1, args.steps + 1):
        generator = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(32, 8, generator=generator).to(device)
        loss = nn.functional.mse_loss(model(x).squeeze(1), x @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}")
        if step % args.checkpoint_every == 0 and rank == 0:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            partial = checkpoint.with_suffix(".tmp")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       partial)
            os.replace(partial, checkpoint)
            print(f"rank {rank} checkpoint step {step}")
        time.sleep(args.delay)
    dist.barrier()
    print(f"rank {rank} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
