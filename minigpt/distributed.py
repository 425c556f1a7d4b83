"""Real multi-process runs on one machine: spawn CPU processes joined by gloo, and measure what each holds.

`torchrun --nproc_per_node 2 -m minigpt train ...` starts the processes of a real run; `spawn_on_cpu` does
the same from Python (a notebook or a test), so a laptop can run a real 2-process job.
measure_rank_state_bytes builds the step (minigpt.step) in each process and shows what each one holds
under --shard none, zero1 or fsdp. The collectives themselves live in minigpt.parallel (re-exported here).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

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
    ring_sent,
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
    args = (preset_or_model_cfg, precision, shard, master_weights, 1, None, 1, False)
    return [r["state"] for r in spawn_on_cpu(_rank_step, args, world=world)]


def measure_rank_step(
    preset_or_model_cfg, precision: str, shard: str, world: int, batch: int = 1, ctx: int | None = None, accum: int = 1
) -> list[dict]:
    """One optimizer step in each of `world` CPU processes, measured: what each holds, sends, and peaks at.

    Each process takes a first step (AdamW makes its moments, FSDP sets itself up), then a second one under
    the meters. Per process: "state" (as measure_rank_state_bytes), "held" (weights and AdamW's moments: what
    stays between steps), "sent" (bytes by collective: every all-gather and reduce-scatter the step called,
    as a ring sends them, minigpt.parallel.ring_sent) and "peak": held plus the most the heap grew
    during the step (gathered weights, activations, gradients; read from glibc's malloc after every op, so
    Linux only; None elsewhere).
    """
    check_shard_mode(shard)
    args = (preset_or_model_cfg, precision, shard, False, batch, ctx, accum, True)
    return spawn_on_cpu(_rank_step, args, world=world)


def _heap_in_use() -> int | None:
    """Bytes malloc has handed out and not had back (glibc's mallinfo2), or None where there is no glibc."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]  # fmt: skip

    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd  # in use in the heap, and in blocks of their own (large tensors)


class _HeapPeak(TorchDispatchMode):
    """The most bytes in use on the heap after any op run under it (gathers included: they are ops too)."""

    def __init__(self) -> None:
        super().__init__()
        self.start = self.peak = _heap_in_use() or 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, _heap_in_use() or 0)
        return out


@contextlib.contextmanager
def _counting_collectives(calls: list[tuple[str, int]]):
    """Record (collective, bytes of its whole buffer) for every all-gather and reduce-scatter called inside.

    FSDP2 calls them through torch.distributed at the moment it runs them, so wrapping the module's functions
    sees each one with the tensor it really sends (its dtype included).
    """
    # function: (collective, where its whole buffer is: position, keyword). A gather's output is the whole
    # tensor; a reduce-scatter's input is.
    where = {
        "all_gather_single": ("all-gather", 0, "output_tensor"),
        "all_gather_into_tensor": ("all-gather", 0, "output_tensor"),
        "reduce_scatter_single": ("reduce-scatter", 1, "input"),
        "reduce_scatter_tensor": ("reduce-scatter", 1, "input"),
    }
    originals = {name: getattr(dist, name) for name in where if hasattr(dist, name)}

    def counted(name, fn):
        op, position, keyword = where[name]

        def call(*args, **kwargs):
            whole = kwargs[keyword] if keyword in kwargs else args[position]
            calls.append((op, whole.numel() * whole.element_size()))
            return fn(*args, **kwargs)

        return call

    for name, fn in originals.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def _rank_step(preset_or_model_cfg, precision, shard, master_weights, batch, ctx, accum, metered) -> dict:
    """One process of the measurements: the step built the way train() builds it, run once (twice if metered)."""
    rank, world = setup()
    named = isinstance(preset_or_model_cfg, str)
    model_cfg = get_config(preset_or_model_cfg) if named else preset_or_model_cfg
    # TrainConfig wants a preset; a ModelConfig given directly shapes the model, so any preset whose ctx fits
    preset = preset_or_model_cfg if named else "tiny"
    ctx = ctx or min(16, model_cfg.ctx, PRESETS[preset].ctx)
    cfg = TrainConfig(
        preset=preset, precision=precision, master_weights=master_weights, shard=shard, batch=batch, ctx=ctx,
        accum=accum, verbose=False,
    )  # fmt: skip
    device = torch.device("cpu")
    state = build_step_state(model_cfg, cfg, device)
    module = wrap(state.forward, device) if world > 1 and shard != "fsdp" else state.forward
    tokens = torch.randint(
        0, model_cfg.vocab_size, (accum, batch, ctx + 1), generator=torch.Generator().manual_seed(rank)
    )
    window = [(t[:, :-1], t[:, 1:]) for t in tokens]
    grads = {}

    def read_gradients(*_) -> None:  # AdamW starts its step: the gradients (fp32 masters' too) are all there
        grads["bytes"] = state_bytes(p.grad for p in state.train_params if p.grad is not None)

    def step() -> None:
        forward_backward(module, window, device, cfg.precision, state.scaler)
        optimizer_step(state, cfg.grad_clip)

    local_optimizer = getattr(state.optimizer, "optim", state.optimizer)  # ZeroRedundancyOptimizer's own AdamW

    def moments() -> list[torch.Tensor]:
        return [v for s in local_optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]

    def weights() -> list[torch.Tensor]:
        return [*state.model.parameters(), *(state.master.params if state.master else [])]

    result, calls = {}, []
    if metered:
        step()  # the first step makes AdamW's moments and sets FSDP up: the second is a step like any other
        result["held"] = state_bytes(weights()) + state_bytes(moments())
        with _counting_collectives(calls), _HeapPeak() as heap:
            state.optimizer.register_step_pre_hook(read_gradients)
            step()
        result["peak"] = result["held"] + heap.peak - heap.start if _heap_in_use() is not None else None
        result["sent"] = {op: sum(ring_sent(op, b, world) for o, b in calls if o == op) for op in dict(calls)}
        result["collectives"] = {op: sum(o == op for o, _ in calls) for op in dict(calls)}
    else:
        state.optimizer.register_step_pre_hook(read_gradients)
        step()
    if "bytes" not in grads:
        raise RuntimeError("the GradScaler skipped this step (inf or NaN gradients): nothing was measured")
    result["state"] = {
        "weights": state_bytes(weights()),
        "gradients": grads["bytes"],
        "optimizer": state_bytes(moments()),
    }
    teardown()
    return result
