"""Data parallelism in a few functions: one process per device, gradients averaged by DDP.

`torchrun --nproc_per_node 2 -m minigpt train ...` starts the processes; `spawn_on_cpu` does the same
from Python (a notebook or a test) with the gloo backend, so a laptop can run a real 2-process job.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

_we_started_it = False


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def setup() -> tuple[int, int]:
    """Join the process group torchrun describes in the environment; return (rank, world size)."""
    global _we_started_it
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    _we_started_it = True
    return dist.get_rank(), dist.get_world_size()


def teardown() -> None:
    """Leave the process group, if setup() created it."""
    global _we_started_it
    if _we_started_it and dist.is_initialized():
        dist.destroy_process_group()
        _we_started_it = False


def local_device(requested: str) -> str:
    """The device of this process: its own GPU (LOCAL_RANK) when on CUDA, else what was asked."""
    if torch.cuda.is_available() and requested in ("auto", "cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return f"cuda:{local_rank}"
    return "cpu" if requested == "auto" else requested


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel around the model: after backward, gradients are averaged over processes."""
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def sum_across_processes(value: float | torch.Tensor) -> float | torch.Tensor:
    """Sum a number, or a tensor on this process's device, over all processes (itself when there is only one)."""
    if not dist.is_initialized():
        return value
    if isinstance(value, torch.Tensor):
        total = value.clone()
        dist.all_reduce(total)  # queued like any other op: no wait for the GPU
        return total
    t = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return t.item()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn, args: tuple, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        CUDA_VISIBLE_DEVICES="",
    )
    torch.set_num_threads(1)
    result = fn(*args)
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def spawn_on_cpu(fn, args: tuple = (), world: int = 2) -> list:
    """Run fn(*args) in `world` CPU processes joined by gloo; return each rank's return value.

    fn must be importable (defined in a module, not in a notebook cell) and return something
    torch.save can store.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_worker, args=(world, _free_port(), fn, args, out_dir), nprocs=world, start_method="spawn")
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world)]
