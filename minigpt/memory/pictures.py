"""Pictures of a training step for PyTorch's own viewers: a CUDA memory snapshot, or a profiler timeline.

Both record the same steps measure() meters, built by minigpt.step as train() builds them.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import torch

from minigpt import step
from minigpt.device import cuda_index
from minigpt.memory.measure import prepare_step
from minigpt.memory.meters import without_profiler_log_lines
from minigpt.model import ModelConfig
from minigpt.precision import normalize_precision


def _run_steps(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    checkpointing: str,
    master_weights: bool,
    device: torch.device,
    seed: int,
    steps: int,
    record,
) -> None:
    """Build the step as train() does and run `steps` of train's training steps inside the context `record`."""
    precision = normalize_precision(precision)
    state, train_cfg, xy = prepare_step(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    with record:
        for _ in range(steps):
            step.train_step(state, [xy], device, precision, train_cfg.grad_clip)


def memory_snapshot(
    path: str | Path,
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cuda",
    seed: int = 0,
    steps: int = 2,
) -> Path:
    """Record every CUDA allocation of `steps` training steps into a snapshot file (a pickle).

    Drag the file onto https://pytorch.org/memory_viz to see each tensor's lifetime and the stack that
    made it. The first step also creates AdamW's state; the second is what every later step looks like.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"memory_snapshot records the CUDA allocator, and {device} is not a CUDA device "
            "(or this torch has no CUDA); on a CPU use memory_timeline() instead"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)  # from here on, every alloc and free
    try:
        _run_steps(
            model_cfg,
            batch,
            ctx,
            precision,
            checkpointing,
            master_weights,
            device,
            seed,
            steps,
            contextlib.nullcontext(),
        )
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
    return path


TIMELINE_SUFFIXES = (".html", ".json", ".json.gz")


def memory_timeline(
    path: str | Path,
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cpu",
    seed: int = 0,
    steps: int = 2,
) -> Path | None:
    """Profile `steps` training steps and export torch.profiler's memory timeline, on any device.

    .html: a stacked plot of memory by category (parameters, optimizer state, activations, gradients,
    temporaries...); .json / .json.gz: the plot's points. Returns None, with a warning saying why,
    where this torch build cannot profile memory.
    """
    path = Path(path)
    if not path.name.endswith(TIMELINE_SUFFIXES):
        raise ValueError(
            f"{path.name}: the timeline is written as {', '.join(TIMELINE_SUFFIXES)}; "
            "choose a file name with one of these endings"
        )
    device = torch.device(device)
    if not torch.autograd.kineto_available():
        warnings.warn(
            f"this torch build ({torch.__version__}) has no Kineto profiler: no memory timeline", stacklevel=2
        )
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # The memory timeline needs all three: allocations, the shapes of op inputs, and Python stacks.
    profiler = torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True)
    with without_profiler_log_lines():
        _run_steps(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed, steps, profiler)
    path.parent.mkdir(parents=True, exist_ok=True)
    where = f"cuda:{cuda_index(device)}" if device.type == "cuda" else device.type
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of CUDA snapshots
            profiler.export_memory_timeline(str(path), device=where)
    except Exception as error:  # noqa: BLE001 - any failure here means "this build cannot draw it"
        warnings.warn(
            f"torch {torch.__version__} could not export a memory timeline for {where}: "
            f"{type(error).__name__}: {error}",
            stacklevel=2,
        )
        return None
    return path
