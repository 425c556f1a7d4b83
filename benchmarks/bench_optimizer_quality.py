"""9b. 8-bit AdamW's quality: the val loss of the same runs with fp32 AdamW and with AdamW8bit, three seeds each.

Each seed is a whole training run of minigpt.train.train (the 10m preset, 300 steps, fp32 weights; the seed
sets the initial weights, the batches and dropout), once with --optimizer adamw and once with
--optimizer adamw8bit. Everything else equal, the difference of the final val losses is what the 8-bit
moments cost. The target: the mean over seeds within 0.03 nats of fp32 AdamW's, with the spread over
seeds shown beside it (a difference smaller than the seed-to-seed spread is noise).

    python -m benchmarks.bench_optimizer_quality [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import Check, Section, main_for, pyplot, quiet_run, save_figure, table, token_data
from minigpt.data import TokenData
from minigpt.train import train

MAX_GAP = 0.03  # nats: |mean val loss of AdamW8bit - mean val loss of AdamW|
OPTIMIZERS = ("adamw", "adamw8bit")
SIZES = {
    # batch 4 x 128 tokens: 300 steps take minutes per run on a 2-core CPU (batch 8 x 256 would take a quarter hour)
    False: dict(preset="10m", batch=4, ctx=128, steps=300, seeds=(0, 1, 2), eval_batches=16),
    True: dict(preset="tiny", batch=2, ctx=32, steps=4, seeds=(0,), eval_batches=1),
}


def final_val_losses(size: dict, data: TokenData, device: torch.device) -> dict[str, list[float]]:
    """{optimizer: [final val loss per seed]}: one train() run per optimizer and seed."""
    losses: dict[str, list[float]] = {name: [] for name in OPTIMIZERS}
    for seed in size["seeds"]:
        for name in OPTIMIZERS:
            cfg = quiet_run(size, device, optimizer=name, seed=seed)
            losses[name].append(train(cfg, data=data).val_history[-1][1])
            print(f"seed {seed} {name}: val loss {losses[name][-1]:.4f}", flush=True)
    return losses


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), SIZES[quick]
    data = data or token_data(quick)
    losses = final_val_losses(size, data, device)
    mean = {name: statistics.mean(v) for name, v in losses.items()}
    spread = {name: max(v) - min(v) for name, v in losses.items()}
    gaps = [q - f for f, q in zip(losses["adamw"], losses["adamw8bit"])]  # per seed: the same run otherwise
    gap = mean["adamw8bit"] - mean["adamw"]
    rows = [
        [name, *(f"{v:.4f}" for v in losses[name]), f"{mean[name]:.4f}", f"{spread[name]:.4f}"] for name in OPTIMIZERS
    ]
    rows.append(["8-bit - fp32", *(f"{g:+.4f}" for g in gaps), f"{gap:+.4f}", f"{max(gaps) - min(gaps):.4f}"])
    seeds = [f"seed {s}" for s in size["seeds"]]
    body = "\n\n".join(
        [
            f"Preset {size['preset']}, fp32, batch {size['batch']} x ctx {size['ctx']}, {size['steps']} steps, "
            f"val loss over {size['eval_batches']} fixed batches at the end of each run (nats per token). "
            "The last row: AdamW8bit's loss minus AdamW's, seed by seed (the same initial weights and batches).",
            table(rows, ["optimizer", *seeds, "mean", "spread (max - min)"]),
        ]
    )
    checks = [
        Check(
            f"{size['preset']}, {size['steps']} steps, {len(seeds)} seeds: |mean val loss 8-bit - fp32| <= {MAX_GAP}",
            f"{gap:+.4f} nats (seed spread: fp32 {spread['adamw']:.4f}, 8-bit {spread['adamw8bit']:.4f})",
            abs(gap) <= MAX_GAP,
        )
    ]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for i, name in enumerate(OPTIMIZERS):
        ax.scatter([i] * len(losses[name]), losses[name], color=("#0072B2", "#E69F00")[i], zorder=3)
        ax.hlines(mean[name], i - 0.2, i + 0.2, color="black")
    ax.set_xticks(range(len(OPTIMIZERS)), ["AdamW (fp32 moments)", "AdamW8bit"])
    ax.set_xlim(-0.6, len(OPTIMIZERS) - 0.4)
    ax.set_ylabel("final val loss (nats)")
    ax.set_title(f"{size['preset']}, {size['steps']} steps: one dot per seed, line = mean")
    figure = save_figure(fig, out, "optimizer_quality.png")
    return Section("9b. 8-bit AdamW: val loss", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
