"""Gradient checkpointing: run the model's blocks keeping fewer activations, recomputing the rest.

Four modes, from most memory to least (the exact order depends on the model shape; see minigpt.memory):
- "none": every block keeps everything its backward needs.
- "selective": each block keeps the outputs of its matmuls and of attention, and recomputes the
  cheap elementwise work (norms, rotary embeddings, SiLU, products) during backward.
- "sqrt": about sqrt(L) segments of blocks; only each segment's input is kept, and a segment is
  recomputed as a whole during backward (O(sqrt L) memory).
- "full": only each block's input is kept; each block is recomputed during backward.

All use the non-reentrant implementation (use_reentrant=False), which works when the input does not
require grad, supports keyword arguments, and restores the RNG so dropout masks match on recompute.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

CHECKPOINTING_MODES = ("none", "full", "sqrt", "selective")


def sqrt_segments(n_layer: int) -> list[range]:
    """Split range(n_layer) into about sqrt(n_layer) contiguous segments of near-equal size."""
    if n_layer < 1:
        raise ValueError(f"n_layer must be at least 1, got {n_layer}")
    n_seg = max(1, round(math.sqrt(n_layer)))
    bounds = [round(i * n_layer / n_seg) for i in range(n_seg + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(n_seg)]


def _ops_to_save() -> set:
    """The ops whose outputs selective checkpointing keeps: matmuls and fused attention."""
    aten = torch.ops.aten
    names = [
        "mm",
        "addmm",
        "bmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_efficient_attention_forward",
    ]
    return {getattr(aten, n).default for n in names if hasattr(aten, n)}


_BUILT: dict[str, functools.partial] = {}  # a plain dict, not lru_cache: torch.compile traces through it quietly


def selective_context_fn():
    """The context_fn that tells torch.utils.checkpoint which op outputs to keep (needs torch >= 2.4)."""
    if "selective" in _BUILT:
        return _BUILT["selective"]
    try:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    except ImportError:
        raise RuntimeError(
            f"checkpointing='selective' needs torch.utils.checkpoint.create_selective_checkpoint_contexts "
            f"(torch >= 2.4); this torch is {torch.__version__}. Upgrade torch or use --checkpointing full."
        ) from None
    save = _ops_to_save()

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    _BUILT["selective"] = functools.partial(create_selective_checkpoint_contexts, policy)
    return _BUILT["selective"]


def _run_segment(blocks: nn.ModuleList, seg: range, x, cos, sin):
    for i in seg:
        x = blocks[i](x, cos, sin)
    return x


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, cos, sin, mode: str = "none") -> torch.Tensor:
    """Run x through every block, checkpointed according to `mode`."""
    if mode == "none":
        return _run_segment(blocks, range(len(blocks)), x, cos, sin)
    if mode == "full":
        for block in blocks:
            x = checkpoint(block, x, cos, sin, use_reentrant=False)
        return x
    if mode == "sqrt":
        for seg in sqrt_segments(len(blocks)):
            x = checkpoint(_run_segment, blocks, seg, x, cos, sin, use_reentrant=False)
        return x
    if mode == "selective":
        context_fn = selective_context_fn()
        for block in blocks:
            x = checkpoint(block, x, cos, sin, use_reentrant=False, context_fn=context_fn)
        return x
    raise ValueError(f"unknown checkpointing mode {mode!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}")
