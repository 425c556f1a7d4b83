"""Where selective checkpointing's extra time goes: the recomputation, or the machinery that decides it?

Selective checkpointing runs each block under torch.utils.checkpoint with a policy that PyTorch calls for
every op (keep matmul and attention outputs, recompute the rest). This diagnostic times, on the same
batch, modes taking turns step by step:
  none       - no checkpointing;
  selective  - minigpt's policy (recomputes norms, RoPE, SiLU and products in backward);
  save-all   - the same machinery with a policy that keeps every op's output: nothing is recomputed,
               so its cost over none is the machinery alone;
  full       - each block recomputed whole.
Forward + backward only (no optimizer), median over turns of each mode's time over none's.

    python -m benchmarks.selective_overhead [--preset 10m] [--batch 8] [--ctx 256] [--turns 10]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from unittest import mock

import torch
from tabulate import tabulate
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

import minigpt.recompute
from minigpt.model import GPT, get_config

MODES = ("none", "selective", "save-all", "full")


def _save_every_op(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE


SAVE_ALL = functools.partial(create_selective_checkpoint_contexts, _save_every_op)


def forward_backward_seconds(model: GPT, mode: str, x: torch.Tensor, y: torch.Tensor) -> float:
    """Wall seconds of one forward + backward of `model` in checkpointing `mode` (one of MODES)."""
    model.zero_grad(set_to_none=True)
    model.checkpointing = "selective" if mode == "save-all" else mode
    policy = (
        mock.patch.object(minigpt.recompute, "selective_context_fn", lambda: SAVE_ALL)
        if mode == "save-all"
        else contextlib.nullcontext()
    )
    start = time.perf_counter()
    with policy:
        _, loss = model(x, y)
        loss.backward()
    return time.perf_counter() - start


def time_ratios(preset: str, batch: int, ctx: int, turns: int, warmup: int = 2) -> dict[str, tuple[float, float]]:
    """Per mode: (median ms per forward + backward, median over turns of its time over none's)."""
    cfg = get_config(preset)
    model = GPT(cfg, seed=0)
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, cfg.vocab_size, (batch, ctx), generator=gen) for _ in range(2))
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for turn in range(warmup + turns):
        for mode in MODES:
            seconds = forward_backward_seconds(model, mode, x, y)
            if turn >= warmup:
                times[mode].append(seconds)
    return {
        m: (1e3 * statistics.median(ts), statistics.median(t / t0 for t, t0 in zip(ts, times["none"])))
        for m, ts in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    ratios = time_ratios(args.preset, args.batch, args.ctx, args.turns)
    rows = [[m, f"{ms:.1f}", f"{r:.3f}"] for m, (ms, r) in ratios.items()]
    print(f"{args.preset}, batch {args.batch} x ctx {args.ctx}, fp32, {torch.get_num_threads()} threads")
    print(tabulate(rows, headers=["mode", "ms per fwd+bwd", "time / none"], tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
