# Chapter 6 exercises, generated from solutions/ch06_checkpointing.py by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k 6.1      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
"""Chapter 6 exercises: gradient checkpointing, block by block and in sqrt(L) segments.

Each function is one exercise; its docstring states the task. A block is called as block(x, cos, sin)
(minigpt.model.Block: x is (batch, ctx, n_embd); cos and sin are the rotary tables).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from minigpt.model import GPT, get_config


def checkpointed_forward(blocks: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Exercise 6.1: run x through every block, keeping only each block's input for backward.

    Wrap each call in torch.utils.checkpoint.checkpoint(block, x, cos, sin, use_reentrant=False): the
    forward then frees the block's inner activations, and backward recomputes them from the kept input.
    Keep checkpoint's default preserve_rng_state=True: with dropout, the recomputation must draw the
    same random masks as the forward did, or the gradients are of another network.
    """
    raise NotImplementedError(
        "Exercise 6.1: x = checkpoint(block, x, cos, sin, use_reentrant=False) for each block"
        " - see chapters/06_checkpointing.ipynb"
    )


def sqrt_segments(n_layer: int) -> list[range]:
    """Exercise 6.2: split range(n_layer) into round(sqrt(n_layer)) contiguous segments of near-equal size.

    Sizes differ by at most one, and together the segments cover 0 .. n_layer - 1 in order, e.g.
    sqrt_segments(10) == [range(0, 3), range(3, 6), range(6, 10)] or any other split into 3 segments
    of sizes 3, 3 and 4 (in any order). Raise ValueError when n_layer < 1.
    Why sqrt: with k segments, backward keeps k segment inputs plus one recomputed segment of L/k
    blocks; k + L/k is smallest at k = sqrt(L).
    """
    raise NotImplementedError(
        "Exercise 6.2: n_seg = max(1, round(sqrt(L))); boundaries round(i * L / n_seg) for i = 0..n_seg"
        " - see chapters/06_checkpointing.ipynb"
    )


def sqrt_checkpointed_forward(
    blocks: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """Exercise 6.3: checkpoint segments of blocks, not single blocks: keep only each segment's input.

    Split the blocks with sqrt_segments (minigpt.recompute.sqrt_segments, or yours from 6.2) and run each
    segment as ONE checkpointed function (a small function that loops over the segment's blocks), with
    use_reentrant=False.
    """

    raise NotImplementedError(
        "Exercise 6.3: one checkpoint(...) per segment, around a function that runs that segment's blocks"
        " - see chapters/06_checkpointing.ipynb"
    )


def checkpointing_tradeoff(
    preset: str = "30m",
    batch: int = 2,
    ctx: int = 64,
    modes: tuple[str, ...] = ("none", "sqrt", "full"),
    steps: int = 2,
    device: str = "cpu",
    seed: int = 0,
) -> list[dict]:
    """Exercise 6.4: memory and time of a training step with and without checkpointing.

    For each mode: build GPT(get_config(preset), seed=seed) on `device`, set model.checkpointing = mode,
    AdamW(lr=1e-3), a random batch of token ids (torch.randint with a seeded generator, vocab_size of the
    config). Measure:
      activation_bytes  what autograd saves during ONE forward pass: register
                        torch.autograd.graph.saved_tensors_hooks(pack, unpack) with a pack that records
                        t.untyped_storage().data_ptr() -> nbytes (each storage once; skip the model's
                        parameters and buffers), and sum it while the loss is alive
      seconds_per_step  mean wall time of `steps` full steps (forward, backward, optimizer.step,
                        zero_grad) after one warm-up step (torch.cuda.synchronize() before reading the
                        clock on a GPU)
    Return one dict per mode with mode, activation_bytes, seconds_per_step, and relative to the first
    mode: activations_ratio (activation_bytes / first's) and time_ratio (seconds_per_step / first's).
    """
    raise NotImplementedError(
        "Exercise 6.4: per mode: count saved storages with saved_tensors_hooks in one forward; time steps"
        " - see chapters/06_checkpointing.ipynb"
    )
