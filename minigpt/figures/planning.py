"""Figures of chapter 7 (fitting it together): what the planner searched, a planned run, sharded memory.

Each function takes numbers the chapter computed or measured and draws them; checkpointing modes and
precisions get their course colours (minigpt.style), memory limits a red line.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from minigpt.style import mode_color, precision_color

LIMIT_COLOR = "red"  # the memory a card has: every figure of this chapter draws it the same way
MODE_MARKERS = {"none": "o-", "full": "^-.", "sqrt": "D:", "selective": "s--"}


def plot_micro_batch_search(
    micro_batches: Sequence[int],
    peaks_gib: dict[str, Sequence[float]],
    step_time: dict[str, float],
    usable_gib: float,
    usable_label: str,
    title: str,
) -> Figure:
    """The predicted peak of each micro-batch per checkpointing mode, against the usable memory of a card.

    `peaks_gib[mode]` holds one peak per micro-batch; `step_time[mode]` is that mode's step time relative to none.
    """
    fig, ax = plt.subplots(figsize=(8, 4))
    for mode, peaks in peaks_gib.items():
        label = f"checkpointing {mode} ({step_time[mode]:.2f}x time)"
        ax.plot(micro_batches, peaks, MODE_MARKERS.get(mode, "o-"), color=mode_color(mode), label=label)
    ax.axhline(usable_gib, color=LIMIT_COLOR, lw=1, label=usable_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batch (sequences)")
    ax.set_ylabel("predicted peak (GiB)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_training_run(
    steps: Sequence[int],
    train_losses: Sequence[float],
    val_points: Sequence[tuple[int, float]],
    uniform_loss: float,
    precision: str,
    label: str,
    title: str,
) -> Figure:
    """A run's train loss per optimizer step (in its precision's colour), its val losses, and the uniform guess.

    `val_points` are (step, val loss) pairs; `uniform_loss` is ln(vocabulary size), the loss of guessing blindly.
    """
    color = precision_color(precision)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(steps, train_losses, color=color, label=f"train loss ({label})")
    ax.plot([s for s, _ in val_points], [v for _, v in val_points], "o", color=color, mfc="white", label="val loss")
    ax.axhline(uniform_loss, color="gray", ls=":", label="uniform guess, ln(vocab)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_sharded_static_memory(
    gpus: Sequence[int], per_gpu_gb: dict[str, dict[str, Sequence[float]]], card_gb: float, card_label: str
) -> Figure:
    """Static memory per GPU against the number of GPUs, one panel per model, one line per sharding strategy.

    `per_gpu_gb[model][strategy]` holds one value per entry of `gpus`; the card's memory is drawn on the last panel.
    """
    fig, axes = plt.subplots(1, len(per_gpu_gb), figsize=(5 * len(per_gpu_gb), 3.8), squeeze=False)
    for ax, (model, strategies) in zip(axes[0], per_gpu_gb.items(), strict=True):
        for strategy, values in strategies.items():  # strategies are not precisions: matplotlib's own colours
            ax.plot(gpus, values, "o-", label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(gpus), [str(g) for g in gpus])
        ax.set_xlabel("number of GPUs N")
        ax.set_ylabel("static memory per GPU (GB)")
        ax.set_title(f"{model}: weights + grads + AdamW per GPU")
    axes[0][-1].axhline(card_gb, color=LIMIT_COLOR, ls="--", label=card_label)
    for ax in axes[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
