"""The collectives a training step needs under torchrun: join the group, average, shard, gather.

One process per device. DDP averages the gradients; --shard zero1 splits AdamW's moments over the
processes (ZeRO stage 1), --shard fsdp also the weights and gradients (FSDP2, ZeRO stage 3). Every
function here also works with a single process, where it does nothing or returns its input, so the step
(minigpt.step) calls them unconditionally. Starting processes and measuring them is minigpt.distributed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

from minigpt.precision import normalize_precision

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
    if requested.startswith("cuda:") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(
            f"--device {requested} under torchrun would put every process on that one GPU; "
            "use --device cuda (each process takes the GPU of its LOCAL_RANK)"
        )
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


# Bytes each process sends in one collective, as ring algorithms run them (Patarasuk and Yuan, 2009): for a
# buffer of S bytes over N processes, (N-1)/N x S for an all-gather, a reduce-scatter or N broadcasts of 1/N
# each, and twice that for an all-reduce (a reduce-scatter, then an all-gather). minigpt.memory.traffic
# predicts with it; minigpt.distributed.measure_rank_step converts what it counted with it.
RING_FACTOR = {"all-reduce": 2, "reduce-scatter": 1, "all-gather": 1, "broadcast": 1}


def ring_sent(op: str, buffer_bytes: int, world: int) -> float:
    """Bytes one process sends for one collective over a buffer of `buffer_bytes` (the whole tensor)."""
    return RING_FACTOR[op] * (world - 1) / world * buffer_bytes


def check_shard_mode(shard: str) -> str:
    """Return `shard` if it is one of SHARD_MODES, else raise ValueError."""
    if shard not in SHARD_MODES:
        raise ValueError(f"unknown --shard {shard!r}; choose one of: {', '.join(SHARD_MODES)}")
    return shard


def fsdp_dtypes(precision: str) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(gather dtype, reduce dtype) of FSDP under `precision`: None where the parameters' own dtype is used.

    bf16 (autocast): the weights are gathered in bf16, the dtype autocast computes in, so each gather moves
    half the bytes of fp32 and the whole weight never exists in fp32 outside its shard. The gradients are
    reduced in fp32: a reduce-scatter sums N gradients, and bf16's 7 bits of mantissa (8 bits of precision) would
    round each partial sum (the reduced gradient is also what AdamW sees, in the fp32 shard). fp16 keeps fp32
    gathers and reduces: the GradScaler's scaled gradients would be summed in fp16's narrow range. fp32 and
    bf16-pure (whose parameters are bf16 already) move their parameters' own dtype.
    """
    if normalize_precision(precision) == "bf16":
        return torch.bfloat16, torch.float32
    return None, None


def shard_model(model: nn.Module, precision: str = "fp32") -> nn.Module:
    """FSDP2 (ZeRO-3) in place: each block's parameters, then the rest, split in 1/N row slices over the processes.

    Each parameter becomes a DTensor whose local part is this process's rows (dim 0 cut into N chunks,
    the last ones padded). Before a block runs, its whole weights are gathered, and freed again after;
    after its backward, its gradients are reduce-scattered, so each process keeps only its slice.
    With bf16, a MixedPrecisionPolicy gathers in bf16 and reduces in fp32 (fsdp_dtypes says why); the
    shards AdamW updates stay fp32.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    gather, reduce = fsdp_dtypes(precision)
    policy = MixedPrecisionPolicy(param_dtype=gather, reduce_dtype=reduce)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)  # the root: embedding (tied with lm_head) and the final norm
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
