"""1. Loop overhead: tokens/s of minigpt.train's step against a minimal hand-written PyTorch step.

Same preset and seed, same batches, same process, alternating step by step: after each step of
minigpt.train.train(), its on_step callback runs one hand-written step on a second copy of the model.
The ratio of each adjacent pair is taken, then their median, so a change of machine load hits both.

    python -m benchmarks.bench_loop [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import (
    Check,
    Section,
    bf16_is_emulated,
    clock,
    main_for,
    median_spread,
    pyplot,
    save_figure,
    size_for,
    table,
    timed_train_steps,
    token_data,
)
from minigpt.data import TokenData
from minigpt.model import GPT, get_config
from minigpt.train import TrainConfig

TARGET = 0.97  # minigpt tokens/s over hand-written tokens/s: the teaching loop costs (almost) nothing
SIZES = {
    False: dict(presets=("10m", "30m"), precisions=("fp32", "bf16"), batch=8, ctx=256, warmup=2, steps=8),
    True: dict(presets=("tiny",), precisions=("fp32", "bf16"), batch=2, ctx=32, warmup=1, steps=2),
    "cuda": dict(presets=("30m", "125m"), precisions=("fp32", "bf16"), batch=32, ctx=512, warmup=3, steps=10),
}


class HandWrittenStep:
    """The minimal PyTorch training step: forward, backward, AdamW, zero_grad; nothing else.

    It draws the same batches train() draws (same generator seed, same order) for a model built the same way.
    """

    def __init__(self, cfg: TrainConfig, data: TokenData) -> None:
        if cfg.precision not in ("fp32", "bf16"):
            raise ValueError(f"the hand-written step runs fp32 or bf16 autocast, not {cfg.precision}")
        self.cfg, self.data, self.device = cfg, data, torch.device(cfg.device)
        self.model = GPT(get_config(cfg.preset, dropout=cfg.dropout), seed=cfg.seed).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.generator = torch.Generator().manual_seed(cfg.seed)

    def __call__(self) -> None:
        x, y = self.data.get_batch("train", self.cfg.batch, self.cfg.ctx, self.generator)
        x, y = x.to(self.device), y.to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.precision == "bf16"):
            _, loss = self.model(x, y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def paired_step_times(cfg: TrainConfig, data: TokenData, warmup: int, steps: int) -> tuple[list, list]:
    """(minigpt step seconds, hand-written step seconds), `steps` pairs after `warmup`, alternating."""
    hand, device = HandWrittenStep(cfg, data), torch.device(cfg.device)
    hand_times: list[float] = []

    def hand_step() -> None:
        t0 = clock(device)
        hand()
        hand_times.append(clock(device) - t0)

    minigpt_times = timed_train_steps(cfg, data, warmup, steps, between=hand_step)
    return minigpt_times, hand_times[warmup : warmup + steps]


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    rows, checks, bars = [], [], []
    shrunk = []  # (preset, precision) rows run smaller because this CPU emulates bf16
    for preset in size["presets"]:
        for precision in size["precisions"]:
            batch, warmup, steps = size["batch"], size["warmup"], size["steps"]
            if precision == "bf16" and bf16_is_emulated(device) and not quick:
                # ~50 s per 10m step at batch 8 here: batch 1 keeps the row to minutes, and a smaller step
                # is the harder test of loop overhead (the same fixed costs over less compute)
                batch, warmup, steps = 1, 1, 4
                shrunk.append(f"{preset} {precision}")
            tokens = batch * size["ctx"]
            cfg = TrainConfig(preset=preset, precision=precision, batch=batch, ctx=size["ctx"], device=str(device))
            ours, hand = paired_step_times(cfg, data, warmup, steps)
            ratio, ratio_spread = median_spread([h / o for o, h in zip(ours, hand)])
            (o_med, o_spread), (h_med, h_spread) = median_spread(ours), median_spread(hand)
            passed = ratio >= TARGET
            rows.append(
                [
                    preset,
                    precision,
                    f"{tokens / o_med:,.0f}",
                    f"{o_spread:.1f}",
                    f"{tokens / h_med:,.0f}",
                    f"{h_spread:.1f}",
                    f"{ratio:.3f}",
                    f"{ratio_spread:.1f}",
                    "PASS" if passed else "FAIL",
                ]
            )
            checks.append(
                Check(
                    f"{preset} {precision}: minigpt / hand-written tokens/s >= {TARGET}",
                    f"{ratio:.3f} (spread {ratio_spread:.1f}%)",
                    passed,
                )
            )
            bars.append((f"{preset}\n{precision}", tokens / o_med, tokens / h_med, ratio))
            print(rows[-1], file=sys.stderr, flush=True)

    headers = [
        "preset",
        "precision",
        "minigpt tok/s",
        "spread %",
        "hand-written tok/s",
        "spread %",
        "ratio (median of pairs)",
        "spread %",
        f">= {TARGET}",
    ]
    body = "\n\n".join(
        [
            f"batch {size['batch']} x ctx {size['ctx']} = {size['batch'] * size['ctx']} tokens per step; "
            f"{size['warmup']} warm-up pairs, then {size['steps']} timed pairs"
            + (
                f" ({', '.join(shrunk)}: batch 1, 1 warm-up pair, 4 timed pairs, because this CPU has no bf16 "
                "instructions and emulates bf16 matmuls about 15x slower than fp32)"
                if shrunk
                else ""
            )
            + ". minigpt: `minigpt.train.train()` itself, "
            "timed between its on_step "
            "calls (forward_backward with token-count normalization, grad-norm clipping, AdamW, LR schedule, "
            "zero_grad, reading the loss and grad norm, the step record). Hand-written: forward, backward, "
            "`torch.optim.AdamW.step()`, `zero_grad()`. Ratio > 1 means minigpt was faster.",
            table(rows, headers),
        ]
    )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1] for b in bars], 0.4, label="minigpt.train step")
    ax.bar([x + 0.2 for x in xs], [b[2] for b in bars], 0.4, label="hand-written step")
    for x, b in zip(xs, bars):
        ax.text(x, max(b[1], b[2]), f"{b[3]:.3f}", ha="center", va="bottom")
    ax.set_ylim(0, 1.15 * max(max(b[1], b[2]) for b in bars))  # room for the ratio labels
    ax.set_xticks(list(xs), [b[0] for b in bars])
    ax.set_ylabel("tokens/s (median)")
    ax.set_title("Loop overhead (label: minigpt / hand-written)")
    ax.legend(loc="lower right")
    figure = save_figure(fig, out, "loop_overhead.png")
    return Section("1. Loop overhead", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
