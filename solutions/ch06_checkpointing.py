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
    # BEGIN SOLUTION 6.1: x = checkpoint(block, x, cos, sin, use_reentrant=False) for each block
    for block in blocks:
        x = checkpoint(block, x, cos, sin, use_reentrant=False)
    return x
    # END SOLUTION


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
    # BEGIN SOLUTION 6.2: n_seg = max(1, round(sqrt(L))); boundaries round(i * L / n_seg) for i = 0..n_seg
    if n_layer < 1:
        raise ValueError(f"n_layer must be at least 1, got {n_layer}")
    n_seg = max(1, round(math.sqrt(n_layer)))
    bounds = [round(i * n_layer / n_seg) for i in range(n_seg + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(n_seg)]
    # END SOLUTION


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

    # BEGIN SOLUTION 6.3: one checkpoint(...) per segment, around a function that runs that segment's blocks
    from minigpt.recompute import sqrt_segments as package_sqrt_segments  # 6.3 is graded apart from your 6.2

    def run_segment(segment: range, x: torch.Tensor) -> torch.Tensor:
        for i in segment:
            x = blocks[i](x, cos, sin)
        return x

    for segment in package_sqrt_segments(len(blocks)):
        x = checkpoint(run_segment, segment, x, use_reentrant=False)
    return x
    # END SOLUTION


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
    # BEGIN SOLUTION 6.4: per mode: count saved storages with saved_tensors_hooks in one forward; time steps
    max_ctx = get_config(preset).ctx  # an unknown preset raises ValueError here
    unknown = [mode for mode in modes if mode not in CHECKPOINTING_MODES]
    if not modes or unknown:
        raise ValueError(f"modes must be some of {CHECKPOINTING_MODES}, got {modes}")
    if batch < 1 or steps < 1 or not 1 <= ctx <= max_ctx:
        raise ValueError(f"need batch >= 1, steps >= 1 and 1 <= ctx <= {max_ctx}, got {batch=}, {ctx=}, {steps=}")
    rows = []
    for mode in modes:
        cfg = get_config(preset)
        model = GPT(cfg, seed=seed).to(device)
        model.checkpointing = mode
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=gen).to(device)
        x, y = tokens[:, :-1], tokens[:, 1:]

        weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
        saved: dict[int, int] = {}

        def pack(t: torch.Tensor, weights=weights, saved=saved) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _, loss = model(x, y)
        activation_bytes = sum(saved.values())
        loss.backward()  # this was the warm-up step
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        def sync():
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize()

        sync()
        start = time.perf_counter()
        for _ in range(steps):
            _, loss = model(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync()
        rows.append(
            {
                "mode": mode,
                "activation_bytes": activation_bytes,
                "seconds_per_step": (time.perf_counter() - start) / steps,
            }
        )
    for row in rows:
        row["activations_ratio"] = row["activation_bytes"] / rows[0]["activation_bytes"]
        row["time_ratio"] = row["seconds_per_step"] / rows[0]["seconds_per_step"]
    return rows
    # END SOLUTION
