"""The largest batch that fits, found by trying it: a binary search over real training steps.

A plan predicts; this checks the prediction on the device, catching only out-of-memory (on CUDA) or
comparing each step's measured peak with a budget (on CPU and MPS, where running out is not an error).
"""

from __future__ import annotations

import gc

import torch

from minigpt import memory
from minigpt.model import ModelConfig
from minigpt.precision import normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES


def _is_out_of_memory(error: BaseException) -> bool:
    # CUDA raises torch.OutOfMemoryError (= torch.cuda.OutOfMemoryError); MPS a RuntimeError saying so.
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def _measured_peak(
    cfg: ModelConfig, batch: int, ctx: int, precision: str, checkpointing: str, device: torch.device
) -> int | None:
    """Measured peak bytes of one real training step (forward, backward, AdamW); None if out of memory."""
    peak, out_of_memory = None, False
    try:
        # measured: the step's real high-water mark (on CUDA, torch.cuda.max_memory_allocated)
        peak = memory.measure(
            cfg, batch, ctx, precision=precision, checkpointing=checkpointing, device=str(device)
        ).peak
    except RuntimeError as error:  # torch.OutOfMemoryError is a RuntimeError
        if not _is_out_of_memory(error):
            raise
        out_of_memory = True
    # Free memory here, outside the except block: until it ends, the exception's traceback keeps the
    # failed step's frames, and so its tensors, alive.
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()  # give cached blocks back so the next try starts from an empty allocator
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "mps":
        torch.mps.empty_cache()
    return None if out_of_memory else peak


def find_max_batch_size(
    model_cfg: ModelConfig,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    device: str | torch.device = "cpu",
    budget_bytes: int | None = None,
    low: int = 1,
    high: int = 256,
    trace: list[tuple[int, bool, int | None]] | None = None,
) -> int:
    """The largest batch in [low, high] whose real training step fits, by binary search; 0 if `low` does not.

    On CUDA a batch fits when the step runs without running out of memory (and, with budget_bytes, its
    measured peak is within it). On CPU and MPS budget_bytes is required: a batch fits when its measured
    peak <= budget_bytes. `trace`, if given, receives (batch, fits, measured peak or None) for each try.
    """
    from minigpt.device import pick_device

    device = pick_device(device) if isinstance(device, str) else device
    normalize_precision(precision)
    if checkpointing not in CHECKPOINTING_MODES:
        raise ValueError(f"unknown checkpointing {checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}")
    if not 1 <= ctx <= model_cfg.ctx:
        raise ValueError(f"ctx must be between 1 and the model's maximum of {model_cfg.ctx}, got {ctx}")
    if not 1 <= low <= high:
        raise ValueError(f"need 1 <= low <= high, got low={low}, high={high}")
    if budget_bytes is None and device.type != "cuda":
        raise ValueError(
            f"on {device.type}, running out of memory is not a reliable error (the OS swaps "
            f"first, or kills the process): pass budget_bytes, the memory the step may use"
        )
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")

    def fits(batch: int) -> bool:
        peak = _measured_peak(model_cfg, batch, ctx, precision, checkpointing, device)
        ok = peak is not None and (budget_bytes is None or peak <= budget_bytes)
        if trace is not None:
            trace.append((batch, ok, peak))
        return ok

    if not fits(low):
        return 0  # not an error: the caller (a plan, a chapter) then reaches for another lever
    lo, hi = low, high  # invariant: lo fits; everything above hi is known not to (or untested past high)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
