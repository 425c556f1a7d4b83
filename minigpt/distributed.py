"""Real multi-process runs on one machine: spawn CPU processes joined by gloo, and measure what each holds.

`torchrun --nproc_per_node 2 -m minigpt train ...` starts the processes of a real run; `spawn_on_cpu` does
the same from Python (a notebook or a test), so a laptop can run a real 2-process job.
measure_rank_state_bytes builds the step (minigpt.step) in each process and shows what each one holds
under --shard none, zero1 or fsdp. The collectives themselves live in minigpt.parallel (re-exported here).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

from minigpt.config import TrainConfig
from minigpt.model import PRESETS, get_config
from minigpt.parallel import (  # noqa: F401 - re-exported: chapters and tests import them from here
    FSDP_FP16_FUSED_ERROR,
    FSDP_ON_CPU,
    SHARD_MODES,
    barrier,
    check_shard_mode,
    full_tensor,
    local_part,
    setup,
    teardown,
    world_size,
    wrap,
)
from minigpt.step import build_step_state, forward_backward, optimizer_step


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

    Starts `world` processes joined by gloo; each builds the step state the way train() does (minigpt.step's
    build_step_state, DDP or FSDP around it) and runs one training step on one random sequence. Gradients are
    read when AdamW starts its step (after backward, before zero_grad frees them); the optimizer state after.
    The 4-byte step counters are left out, as in minigpt.memory.sharded_state_bytes, its prediction.
    """
    check_shard_mode(shard)
    if world < 1:
        raise ValueError(f"the number of processes (--world) must be at least 1, got {world}")
    return spawn_on_cpu(_rank_state_bytes, (preset_or_model_cfg, precision, shard, master_weights), world=world)


def _rank_state_bytes(preset_or_model_cfg, precision: str, shard: str, master_weights: bool) -> dict:
    """One process of measure_rank_state_bytes: the step built the way train() builds it."""
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
