"""Data-parallel training of a small MLP on scikit-learn's bundled digits, resumable to the bit.

Runs alone (`python train.py`), under torchrun, with an env:// rendezvous set by hand, or as a loadmaster
job; see README.md. It uses loadmaster.runtime for everything the platform needs to know:
- resumes from runtime.latest_checkpoint(): model, optimizer, the position inside the epoch (epoch and
  next batch; DistributedSampler's order is a function of seed + epoch), and the step counter;
- rank 0 checkpoints atomically at the end of every epoch (runtime.save_checkpoint);
- between steps the learners agree (all-reduce) on runtime.should_preempt(); once it is true, rank 0
  checkpoints where they are and every learner exits 0, so the next attempt continues at the next batch;
- the learning rate follows a cosine schedule of the step, so it needs no state of its own;
- runtime.report() every few steps and at the end of every epoch;
- rank 0 writes metrics.json into runtime.results_dir() at the end.

Randomness is a function of (seed, rank, step): the model starts from `seed`, and dropout draws from a
generator seeded for each step, so there is no random state to save and an interrupted run that resumes
with the same world size ends with exactly the same weights as one that ran straight through.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler

from loadmaster import runtime


@dataclass(frozen=True)
class Config:
    epochs: int
    batch_size: int  # per learner
    lr: float
    momentum: float
    hidden: int
    dropout: float
    seed: int
    report_every: int
    step_delay_s: float
    checkpoint_dir: str | None
    results_dir: str | None
    timeout_s: float


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per learner")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report-every", type=int, default=10, help="report the batch loss every N steps")
    parser.add_argument("--step-delay", type=float, default=0.0, dest="step_delay_s",
                        help="sleep this long after each step: stands in for a heavier model (tests use it to "
                             "leave time for an interruption)")
    parser.add_argument("--checkpoint-dir", default=None, help="outside loadmaster (default ./checkpoints)")
    parser.add_argument("--results-dir", default=None, help="outside loadmaster (default ./results)")
    parser.add_argument("--timeout", type=float, default=300.0, dest="timeout_s",
                        help="seconds a learner waits for the others in a collective before giving up")
    args = parser.parse_args(argv)
    config = Config(**vars(args))
    for name in ("epochs", "batch_size", "report_every"):
        if getattr(config, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0.0 <= config.dropout < 1.0:
        parser.error("--dropout must be in [0, 1)")
    return config


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.hidden1 = nn.Linear(features, hidden)
        self.hidden2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(F.relu(self.hidden1(x)))
        x = self.dropout(F.relu(self.hidden2(x)))
        logits: torch.Tensor = self.out(x)
        return logits


@dataclass(frozen=True)
class Data:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def load_data(seed: int) -> Data:
    digits = load_digits()  # bundled with scikit-learn: 1,797 8x8 images, no download
    x = (digits.data / 16.0).astype("float32")
    train_x, test_x, train_y, test_y = train_test_split(
        x, digits.target, test_size=0.2, random_state=seed, stratify=digits.target
    )
    return Data(torch.from_numpy(train_x), torch.from_numpy(train_y).long(),
                torch.from_numpy(test_x), torch.from_numpy(test_y).long())


def init_process_group(world_size: int, rank: int, timeout_s: float) -> dist.Store:
    """Join the gang; returns the rendezvous store (leave() needs it after the group is gone)."""
    timeout = timedelta(seconds=timeout_s)
    store: dist.Store
    if world_size == 1 and "MASTER_ADDR" not in os.environ:
        # Alone without a rendezvous: an in-process store, so the same DDP code path runs.
        store = dist.HashStore()
    else:
        # env:// by hand, to keep the store: rank 0 serves it at MASTER_ADDR:MASTER_PORT (under torchrun
        # the agent already does, and says so).
        serves = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                              is_master=serves, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
    return store


def leave(store: dist.Store, rank: int, world_size: int) -> int:
    """Leave the gang, rank 0 last. Rank 0 serves the rendezvous store, and a rank tearing down its gloo
    group after rank 0 has exited can hang (seen under the platform: rank 1 hung after a halt until the
    grace period ran out and it was killed). So the others leave first and say so; rank 0 then goes."""
    dist.barrier()  # nobody leaves before the checkpoint or the results are complete
    if rank != 0:
        dist.destroy_process_group()
        store.add("left", 1)
        return 0
    deadline = time.monotonic() + 30.0
    while store.add("left", 0) < world_size - 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    dist.destroy_process_group()
    return 0


def step_seed(seed: int, rank: int, step: int) -> int:
    """Dropout's seed for one step of one learner: resuming at any step draws the same masks."""
    return (seed * 1_000_003 + rank * 7_919 + step) % (2**63)


def learning_rate(base: float, step: int, total_steps: int) -> float:
    """Cosine decay to zero, a function of the step alone: nothing to checkpoint for it."""
    return base * 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / total_steps))


def agree_to_stop() -> bool:
    """True on every learner as soon as one is asked to stop, so all leave at the same step (a learner
    that left alone would leave the others blocked in the next all-reduce)."""
    flag = torch.tensor([1 if runtime.should_preempt() else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    was_training = model.training
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train(was_training)
    return loss, accuracy


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save(model: nn.Module, optimizer: torch.optim.Optimizer, *, epoch: int, batch: int, step: int,
         world_size: int, config: Config, directory: Path) -> Path:
    """Rank 0 only. (epoch, batch) is where training continues: the next batch to run."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "batch": batch,
        "step": step,
        "world_size": world_size,
        "config": asdict(config),
    }
    return runtime.save_checkpoint(lambda path: torch.save(state, path), step, directory=directory)


def write_results(directory: Path, results: dict[str, Any]) -> Path:
    target = directory / "metrics.json"
    temp = directory / f".metrics.json.tmp-{os.getpid()}"
    temp.write_text(json.dumps(results, indent=2) + "\n")
    temp.replace(target)  # whole or absent, like a checkpoint
    return target


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    context = runtime.init()  # catch SIGTERM from here on: a stop request must not kill us mid-step
    config = parse_args(argv)
    rank, world_size = context.rank, context.world_size
    torch.set_num_threads(1)  # one core per learner; also keeps CPU kernels' reduction order fixed
    torch.use_deterministic_algorithms(True)
    store = init_process_group(world_size, rank, config.timeout_s)
    ckpt_dir = runtime.checkpoint_dir(config.checkpoint_dir)

    data = load_data(config.seed)
    torch.manual_seed(config.seed)  # the same initial weights on every learner (DDP also broadcasts rank 0's)
    module = MLP(data.train_x.shape[1], config.hidden, 10, config.dropout)
    model = DistributedDataParallel(module)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        TensorDataset(data.train_x, data.train_y), num_replicas=world_size, rank=rank, shuffle=True, seed=config.seed
    )

    epoch, first_batch, step = 0, 0, 0
    latest = runtime.latest_checkpoint(ckpt_dir)
    if latest is not None:
        state = torch.load(latest, map_location="cpu", weights_only=True)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, first_batch, step = state["epoch"], state["batch"], state["step"]
        if state["world_size"] != world_size and first_batch:
            # The batches of an epoch depend on the world size: a resize resumes at the start of the epoch.
            print(f"rank {rank}: checkpoint of {state['world_size']} learners, now {world_size}: "
                  f"epoch {epoch} starts over", flush=True)
            first_batch = 0
        print(f"rank {rank}: resumed from {latest.name} (epoch {epoch}, batch {first_batch}, step {step})",
              flush=True)

    steps_per_epoch = math.ceil(len(sampler) / config.batch_size)
    total_steps = config.epochs * steps_per_epoch
    model.train()
    while epoch < config.epochs:
        sampler.set_epoch(epoch)
        order = list(sampler)
        batches = [order[i:i + config.batch_size] for i in range(0, len(order), config.batch_size)]
        for index in range(first_batch, len(batches)):
            rows = torch.tensor(batches[index])
            x, y = data.train_x[rows], data.train_y[rows]
            torch.manual_seed(step_seed(config.seed, rank, step))  # this step's dropout masks
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config.lr, step, total_steps)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if config.step_delay_s:
                time.sleep(config.step_delay_s)
            if step % config.report_every == 0:
                accuracy = (logits.argmax(dim=1) == y).float().mean().item()
                runtime.report(step=step, epoch=epoch + 1, loss=loss.item(), accuracy=accuracy)  # epochs count from 1
            if agree_to_stop():
                if rank == 0:
                    saved = save(module, optimizer, epoch=epoch, batch=index + 1, step=step,
                                 world_size=world_size, config=config, directory=ckpt_dir)
                    print(f"rank 0: asked to stop; checkpointed {saved.name}", flush=True)
                return leave(store, rank, world_size)
        epoch, first_batch = epoch + 1, 0
        train_loss, train_accuracy = evaluate(module, data.train_x, data.train_y)
        test_loss, test_accuracy = evaluate(module, data.test_x, data.test_y)
        runtime.report(step=step, epoch=epoch, train_loss=train_loss, train_accuracy=train_accuracy,
                       test_loss=test_loss, test_accuracy=test_accuracy)
        if rank == 0:
            save(module, optimizer, epoch=epoch, batch=0, step=step, world_size=world_size, config=config,
                 directory=ckpt_dir)
            print(f"epoch {epoch}/{config.epochs} step {step}: train loss {train_loss:.4f}, "
                  f"test accuracy {test_accuracy:.4f}", flush=True)

    test_loss, test_accuracy = evaluate(module, data.test_x, data.test_y)
    if rank == 0:
        train_loss, train_accuracy = evaluate(module, data.train_x, data.train_y)
        results = {
            "test_accuracy": test_accuracy,
            "test_loss": test_loss,
            "train_accuracy": train_accuracy,
            "train_loss": train_loss,
            "epochs": config.epochs,
            "steps": step,
            "world_size": world_size,
            "seed": config.seed,
            "attempt": context.attempt,
            "weights_sha256": weights_digest(module),
            "wall_s_this_attempt": round(time.monotonic() - started, 3),
        }
        written = write_results(runtime.results_dir(config.results_dir), results)
        print(f"test accuracy {test_accuracy:.4f}; results in {written}", flush=True)
    return leave(store, rank, world_size)


if __name__ == "__main__":
    sys.exit(main())
