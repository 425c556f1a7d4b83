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
from minigpt.recompute import CHECKPOINTING_MODES


def checkpointed_forward(blocks: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Exercise 6.1: run x through every block, keeping only each block's input for backward.

    Wrap each call in torch.utils.checkpoint.checkpoint(block, x, cos, sin, use_reentrant=False): the
    forward then frees the block's inner activations, and backward recomputes them from the kept input.
    Keep checkpoint's default preserve_rng_state=True: with dropout, the recomputation must draw the
    same random masks as the forward did, or the gradients are of another network.

    Returns: a tensor, the last block's output: the same values as running the blocks one after another,
        attached to the graph so that backward reaches every block's weights (also when x does not require
        grad) and x (when it does).
    In place: nothing (the backward run later fills the blocks' gradients, as it would without checkpointing).
    Raises: nothing of its own.
    """
    raise NotImplementedError(
        "Exercise 6.1: x = checkpoint(block, x, cos, sin, use_reentrant=False) for each block"
        " - see chapters/06_checkpointing.ipynb"
    )


def sqrt_segments(n_layer: int) -> list[range]:
    """Exercise 6.2: split range(n_layer) into round(sqrt(n_layer)) contiguous segments of near-equal size.

    Sizes differ by at most one, and together the segments cover 0 .. n_layer - 1 in order, e.g.
    sqrt_segments(10) == [range(0, 3), range(3, 6), range(6, 10)] or any other split into 3 segments
    of sizes 3, 3 and 4 (in any order).
    Why sqrt: with k segments, backward keeps k segment inputs plus one recomputed segment of L/k
    blocks; k + L/k is smallest at k = sqrt(L).

    Returns: a list of range objects (each with step 1): round(sqrt(n_layer)) segments, never fewer than
        one, that cover 0 .. n_layer - 1 in order, their sizes differing by at most one.
    In place: nothing.
    Raises: ValueError if n_layer is below 1.
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

    Returns: a tensor, the last block's output: the same values as running the blocks one after another,
        attached to the graph so that backward reaches every block's weights (also when x does not require
        grad) and x (when it does).
    In place: nothing (the backward run later fills the blocks' gradients, as it would without checkpointing).
    Raises: ValueError if blocks is empty (sqrt_segments(0) raises it).
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

    For each mode: build GPT(get_config(preset), seed=seed) on `device`, set model.checkpointing = mode
    and model.train(), AdamW(model.parameters(), lr=1e-3), and the same batch of token ids for every mode:
    tokens = torch.randint(0, vocab_size, (batch, ctx + 1), generator=torch.Generator().manual_seed(seed))
    (vocab_size of the config), x = tokens[:, :-1] and y = tokens[:, 1:], on `device`. Measure:
      activation_bytes  what autograd saves during ONE forward pass: register
                        torch.autograd.graph.saved_tensors_hooks(pack, unpack) with a pack that records
                        t.untyped_storage().data_ptr() -> nbytes (each storage once; skip the model's
                        parameters and buffers), and sum it while the loss is alive
      seconds_per_step  mean wall time of `steps` full steps (forward, backward, optimizer.step,
                        zero_grad) after one warm-up step (torch.cuda.synchronize() before reading the
                        clock on a GPU)
    Return one dict per mode with mode, activation_bytes, seconds_per_step, and relative to the first
    mode: activations_ratio (activation_bytes / first's) and time_ratio (seconds_per_step / first's).

    Returns: a list of dicts, one per mode in the order given, each with the keys mode, activation_bytes
        (an int), seconds_per_step, activations_ratio and time_ratio.
    In place: nothing.
    Raises: ValueError if the preset is unknown, modes is empty or names a mode other than "none", "full",
        "sqrt" and "selective", or batch, ctx or steps is below 1 or ctx is above the preset's ctx (all
        checked before any model is built).
    """
    raise NotImplementedError(
        "Exercise 6.4: per mode: count saved storages with saved_tensors_hooks in one forward; time steps"
        " - see chapters/06_checkpointing.ipynb"
    )
