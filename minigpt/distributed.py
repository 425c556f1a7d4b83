"""Data parallelism in a few functions: one process per device, gradients averaged by DDP.

`torchrun --nproc_per_node 2 -m minigpt train ...` starts the processes; `spawn_on_cpu` does the same
from Python (a notebook or a test) with the gloo backend, so a laptop can run a real 2-process job.
With --shard zero1 or fsdp the processes also split the training state (ZeRO stage 1 or 3), and
measure_rank_state_bytes shows what each one holds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

_we_started_it = False


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def setup(device: str = "auto") -> tuple[int, int]:
    """Join the process group torchrun describes in the environment; return (rank, world size).

    NCCL where the processes train on GPUs (`device` auto or cuda, and CUDA present), gloo on the CPU.
    """
    global _we_started_it
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    backend = "nccl" if torch.cuda.is_available() and device in ("auto", "cuda") else "gloo"
    dist.init_process_group(backend)
    _we_started_it = True
    return dist.get_rank(), dist.get_world_size()


def teardown() -> None:
    """Leave the process group, if setup() created it."""
    global _we_started_it
    if _we_started_it and dist.is_initialized():
        # Leave together: a process that destroys its group while a peer still talks to it (rank 0 sampling,
        # say) can make gloo abort ("terminate called without an active exception") in about 1 run in 10.
        dist.barrier()
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


# ----------------------------------------------------------------------------------------------------------
# Sharding: ZeRO-1 (the optimizer state) and FSDP (weights, gradients and optimizer state)

# --shard: "none" keeps a whole copy of everything on every process (DDP); "zero1" splits AdamW's moments
# over the processes (ZeroRedundancyOptimizer, with DDP for the gradients); "fsdp" splits the weights, the
# gradients and the moments (FSDP2's fully_shard: ZeRO stage 3). With one process there is nothing to split:
# train() runs every mode as "none".
SHARD_MODES = ("none", "zero1", "fsdp")

# FSDP2 on the CPU: fully_shard runs on gloo in this PyTorch (checked with a 2-process run of the tiny GPT);
# it needs PyTorch >= 2.6, where it is public as torch.distributed.fsdp.fully_shard.
FSDP_ON_CPU = "fully_shard runs on the CPU with gloo (PyTorch >= 2.6)"


# fp16 under FSDP: each process sees only its slice of the gradients, so the GradScaler's "any inf?" must be
# agreed over all processes (ShardedGradScaler all-reduces it). Its flag does not fit fused AdamW, which
# fails with this message (PyTorch 2.13), so fp16 + fsdp steps with the foreach AdamW instead:
FSDP_FP16_FUSED_ERROR = "RuntimeError: output with shape [] doesn't match the broadcast shape [1]"


def sharded_grad_scaler(device_type: str) -> torch.amp.GradScaler:
    """A GradScaler for FSDP: it skips the step on every process when any process's slice holds inf or NaN."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device_type)


def check_shard_mode(shard: str) -> str:
    """Return `shard` if it is one of SHARD_MODES, else raise ValueError."""
    if shard not in SHARD_MODES:
        raise ValueError(f"unknown --shard {shard!r}; choose one of: {', '.join(SHARD_MODES)}")
    return shard


def shard_model(model: nn.Module) -> nn.Module:
    """FSDP2 (ZeRO-3) in place: each block's parameters, then the rest, split in 1/N row slices over the processes.

    Each parameter becomes a DTensor whose local part is this process's rows (dim 0 cut into N chunks,
    the last ones padded). Before a block runs, its whole weights are gathered, and freed again after;
    after its backward, its gradients are reduce-scattered, so each process keeps only its slice.
    """
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)  # the root: embedding (tied with lm_head) and the final norm
    return model


def zero1_optimizer(param_groups: list[dict], optimizer_class: type, **defaults) -> torch.optim.Optimizer:
    """ZeRO-1: each process keeps the optimizer state of a share of the parameters only.

    ZeroRedundancyOptimizer assigns whole parameters to processes (largest first, each to the process with
    the fewest so far), steps its share, then broadcasts the updated parameters to the others.
    """
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(param_groups, optimizer_class=optimizer_class, **defaults)


def is_sharded_tensor(t: object) -> bool:
    """Whether `t` is a DTensor (a tensor FSDP split over the processes)."""
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def local_part(t: torch.Tensor) -> torch.Tensor:
    """What this process holds of `t`: its shard for a DTensor, else the tensor itself."""
    return t.to_local() if is_sharded_tensor(t) else t


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor's shards gathered from every process (all must call it), else `t`."""
    return t.full_tensor() if is_sharded_tensor(t) else t


def shard_like(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A whole tensor cut the way `like` is (this process's slice of it as a DTensor), or `value` as it is.

    Every process holds the whole `value` (each loaded the checkpoint), so each just keeps its slice:
    no communication.
    """
    if not is_sharded_tensor(like):
        return value
    from torch.distributed.tensor import distribute_tensor

    value = value.to(device=like.device, dtype=like.dtype)
    return distribute_tensor(value, like.device_mesh, like.placements, src_data_rank=None)


def no_gradient_sync(module: nn.Module):
    """A context in which backward accumulates gradients locally, without averaging them over processes.

    DDP's no_sync(); FSDP's set_requires_gradient_sync(False) (its gradients stay whole and unsharded
    until the synced backward); nothing for a module that is not distributed.
    """
    if hasattr(module, "no_sync"):
        return module.no_sync()
    if hasattr(module, "set_requires_gradient_sync"):
        return _fsdp_no_sync(module)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(module: nn.Module) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict with every DTensor gathered whole, on the CPU (every process must call it).

    The same keys and shapes as a single-process model's state_dict, so checkpoints do not depend on --shard.
    One tensor at a time is gathered, so at most one whole tensor is in flight on the device.
    """
    return {name: full_tensor(t).cpu() for name, t in model.state_dict().items()}


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict | None:
    """The optimizer's state_dict as one process holding every parameter would write it (every process calls this).

    ZeroRedundancyOptimizer: consolidated onto process 0 (None on the others). Otherwise (AdamW, over
    FSDP's DTensors or plain tensors): every moment gathered whole, on the CPU, keyed by parameter index.
    """
    if hasattr(optimizer, "consolidate_state_dict"):  # ZeroRedundancyOptimizer
        optimizer.consolidate_state_dict(to=0)
        if dist.get_rank() != 0:
            return None
        state = optimizer.state_dict()
        # its param groups are the global ones; keep only what a plain AdamW's state_dict holds
        state = {"state": state["state"], "param_groups": state["param_groups"]}
    else:
        state = optimizer.state_dict()
    state["state"] = {
        index: {k: full_tensor(v).cpu() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
        for index, s in state["state"].items()
    }
    return state


def shard_optimizer_state_like(state: dict, params: list[torch.Tensor]) -> dict:
    """A whole optimizer state_dict (full_optimizer_state's) cut like `params`: the optimizer's parameters, in order."""
    if not any(is_sharded_tensor(p) for p in params):
        return state

    def cut(value: object, param: torch.Tensor) -> object:  # moments are cut; step counters (0-dim) are not
        return shard_like(value, param) if isinstance(value, torch.Tensor) and value.dim() > 0 else value

    sharded = {index: {k: cut(v, params[index]) for k, v in s.items()} for index, s in state["state"].items()}
    return {**state, "state": sharded}


def steps_to_param_device(optimizer: torch.optim.Optimizer) -> None:
    """After ZeroRedundancyOptimizer.load_state_dict: its AdamW's step counters back on the parameters' device.

    ZeroRedundancyOptimizer moves 0-dim state to the CPU, but a fused AdamW on a GPU wants them beside the
    parameters.
    """
    local = getattr(optimizer, "optim", optimizer)
    for p, s in local.state.items():
        if isinstance(s.get("step"), torch.Tensor) and local.defaults.get("fused"):
            s["step"] = s["step"].to(p.device)


def barrier() -> None:
    """Wait until every process gets here (nothing to wait for with one process)."""
    if dist.is_initialized():
        dist.barrier()


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
    done = Path(out_dir) / f"rank{rank}.pt"
    torch.save(result, done.with_suffix(".partial"))
    os.replace(done.with_suffix(".partial"), done)  # the whole result, or no file
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave at once: the result is saved, and an orderly interpreter shutdown can let gloo's background threads
    # abort the process ("terminate called without an active exception"), seen about 1 run in 20 under load.
    os._exit(0)


def spawn_on_cpu(fn, args: tuple = (), world: int = 2) -> list:
    """Run fn(*args) in `world` CPU processes joined by gloo; return each rank's return value.

    fn must be importable (defined in a module, not in a notebook cell) and return something
    torch.save can store.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        results = [Path(out_dir) / f"rank{r}.pt" for r in range(world)]
        try:
            mp.start_processes(
                _worker, args=(world, _free_port(), fn, args, out_dir), nprocs=world, start_method="spawn"
            )
        except mp.ProcessExitedException:
            if not all(path.exists() for path in results):  # a process died before its work was done
                raise
            # every process had saved its result: a crash on the way out loses nothing
        return [torch.load(path, weights_only=False) for path in results]


# ----------------------------------------------------------------------------------------------------------
# What each process holds: measured on real processes


def state_bytes(tensors) -> int:
    """Bytes of the tensors this process holds: for a DTensor its local slice only, each storage once."""
    seen, total = set(), 0
    for t in tensors:
        local = local_part(t)
        key = (local.untyped_storage().data_ptr(), local.storage_offset(), local.numel())
        if key not in seen:
            seen.add(key)
            total += local.numel() * local.element_size()
    return total


def measure_rank_state_bytes(
    preset_or_model_cfg, precision: str, shard: str, world: int, master_weights: bool = False
) -> list[dict]:
    """Weights, gradients and optimizer-state bytes each of `world` CPU processes holds after one real step.

    Starts `world` processes joined by gloo; each builds the step state the way train() does (train's
    build_step_state, DDP or FSDP around it) and runs one training step on one random sequence. Gradients are
    read when AdamW starts its step (after backward, before zero_grad frees them); the optimizer state after.
    The 4-byte step counters are left out, as in minigpt.memory.sharded_state_bytes, its prediction.
    """
    check_shard_mode(shard)
    if world < 1:
        raise ValueError(f"the number of processes (--world) must be at least 1, got {world}")
    return spawn_on_cpu(_rank_state_bytes, (preset_or_model_cfg, precision, shard, master_weights), world=world)


def _rank_state_bytes(preset_or_model_cfg, precision: str, shard: str, master_weights: bool) -> dict:
    """One process of measure_rank_state_bytes (train is imported here: it imports this module)."""
    from minigpt.model import PRESETS, get_config
    from minigpt.train import TrainConfig, build_step_state, forward_backward, optimizer_step

    rank, world = setup()
    named = isinstance(preset_or_model_cfg, str)
    model_cfg = get_config(preset_or_model_cfg) if named else preset_or_model_cfg
    # TrainConfig wants a preset; a ModelConfig given directly shapes the model, so any preset whose ctx fits
    preset = preset_or_model_cfg if named else "tiny"
    ctx = min(16, model_cfg.ctx, PRESETS[preset].ctx)
    cfg = TrainConfig(
        preset=preset, precision=precision, master_weights=master_weights, shard=shard, batch=1, ctx=ctx, verbose=False
    )
    device = torch.device("cpu")
    state = build_step_state(model_cfg, cfg, device)
    module = wrap(state.forward, device) if world > 1 and shard != "fsdp" else state.forward
    tokens = torch.randint(0, model_cfg.vocab_size, (1, ctx + 1), generator=torch.Generator().manual_seed(rank))
    grads = {}

    def read_gradients(*_) -> None:  # AdamW starts its step: the gradients (fp32 masters' too) are all there
        grads["bytes"] = state_bytes(p.grad for p in state.train_params if p.grad is not None)

    state.optimizer.register_step_pre_hook(read_gradients)
    forward_backward(module, [(tokens[:, :-1], tokens[:, 1:])], device, cfg.precision, state.scaler)
    optimizer_step(state, cfg.grad_clip)
    if "bytes" not in grads:
        raise RuntimeError("the GradScaler skipped this step (inf or NaN gradients): nothing was measured")
    local_optimizer = getattr(state.optimizer, "optim", state.optimizer)  # ZeroRedundancyOptimizer's own AdamW
    moments = (v for s in local_optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    measured = {
        "weights": state_bytes([*state.model.parameters(), *(state.master.params if state.master else [])]),
        "gradients": grads["bytes"],
        "optimizer": state_bytes(moments),
    }
    teardown()
    return measured
