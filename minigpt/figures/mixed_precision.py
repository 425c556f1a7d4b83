"""Figures of chapters 3 and 4 (autocast, fp16 and the GradScaler): loss curves, speed rounds, loss scales.

Each function takes numbers the chapter measured and draws them; every precision gets its course colour
(minigpt.style), and a reference curve is drawn dashed on top, so a run that follows it never hides it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from minigpt.style import precision_color

REFERENCE_COLOR = "#000000"  # a reference run: black and dashed, drawn above the runs compared with it
STYLES = ("-", ":", "-.")  # runs of one precision differ by line style; dashed is kept for the reference
_FP16 = torch.finfo(torch.float16)
# log2 of fp16's limits, read from torch: -24, -14 and log2(65504)
FP16_LIMITS = (
    (math.log2(_FP16.smallest_normal * _FP16.eps), "smallest subnormal"),
    (math.log2(_FP16.smallest_normal), "smallest normal"),
    (math.log2(_FP16.max), f"largest ({_FP16.max:.0f})"),
)


def line_styles(precisions: dict[str, str]) -> dict[str, str]:
    """A line style per run: the first run of each precision solid, the next ones dotted, dash-dotted.

    So two runs share a colour only when they share a precision, and then their style tells them apart.
    """
    seen: dict[str, int] = {}
    styles = {}
    for label, precision in precisions.items():
        styles[label] = STYLES[seen.get(precision, 0) % len(STYLES)]
        seen[precision] = seen.get(precision, 0) + 1
    return styles


def plot_loss_and_difference(
    steps: Sequence[int], losses: dict[str, Sequence[float]], precisions: dict[str, str], reference: str, title: str
) -> Figure:
    """Left: each run's loss per step in its precision's colour; right: each run minus the `reference` run.

    The reference is drawn last, thin and dashed, so a run that lies exactly on it stays visible beneath it.
    """
    fig, (ax, ax_diff) = plt.subplots(1, 2, figsize=(11, 3.8))
    styles = line_styles({reference: precisions[reference], **precisions})  # the reference counts as the first
    for label, curve in losses.items():
        if label == reference:
            continue
        color = precision_color(precisions[label])
        ax.plot(steps, curve, color=color, ls=styles[label], lw=2.2, label=label)
        diff = [a - b for a, b in zip(curve, losses[reference], strict=True)]
        ax_diff.plot(steps, diff, color=color, ls=styles[label], label=f"{label} - {reference}")
    ref_color = precision_color(precisions[reference])
    ax.plot(steps, losses[reference], color=ref_color, ls="--", lw=1.2, zorder=3, label=f"{reference} (reference)")
    ax_diff.axhline(0, color=ref_color, ls="--", lw=1.2, zorder=3, label=f"{reference} (reference)")
    ax.set(xlabel="optimizer step", ylabel="training loss (nats/token)", title=title)
    ax_diff.set(xlabel="optimizer step", ylabel="loss difference (nats/token)", title=f"difference from {reference}")
    ax.legend(fontsize=8)
    ax_diff.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_speed_rounds(speedups: dict[str, Sequence[float]], precision: str, title: str) -> Figure:
    """One column per workload: each round's speed-up of `precision` over fp32 as a dot, the median as a bar.

    Above the line at 1 the 16-bit run was faster in that round; dots on both sides mean the rounds disagree.
    """
    fig, ax = plt.subplots(figsize=(7, 3.6))
    color = precision_color(precision)
    for i, ratios in enumerate(speedups.values()):
        ax.bar(i, statistics.median(ratios), width=0.5, color=color, alpha=0.5, label="median" if i == 0 else None)
        ax.plot([i] * len(ratios), ratios, "o", color=color, label="one round" if i == 0 else None)
    ax.axhline(1.0, color=precision_color("fp32"), ls="--", lw=1.2, label="fp32 speed (1x)")
    ax.set_xticks(range(len(speedups)), list(speedups))
    ax.set(ylabel=f"{precision} speed / fp32 speed", title=title)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_gradient_histogram(log2_grads: Sequence[float], shift: int, title: str) -> Figure:
    """A histogram of log2 |gradient| (fp32 values), and the same shifted by `shift` (loss scaling by 2**shift).

    Dashed lines mark fp16's limits; left of the smallest subnormal (shaded) a value becomes exactly zero.
    """
    fig, ax = plt.subplots(figsize=(9, 4))
    low = math.floor(min(min(log2_grads), -30)) - 1
    bins = [low + 0.5 * i for i in range(int((18 - low) / 0.5) + 1)]
    ax.hist(log2_grads, bins=bins, alpha=0.7, color=precision_color("fp32"), label="logit gradients (fp32)")
    shifted = [g + shift for g in log2_grads]
    ax.hist(shifted, bins=bins, alpha=0.5, color=precision_color("fp16"), label=f"x 2^{shift} (loss scaled)")
    for value, text in FP16_LIMITS:
        ax.axvline(value, color="black", linestyle="--", linewidth=1)
        ax.text(value + 0.3, ax.get_ylim()[1] * 0.9, text, rotation=90, va="top", fontsize=8)
    ax.axvspan(low, FP16_LIMITS[0][0], color="gray", alpha=0.15)
    ax.set(xlabel="log2 |gradient of a logit|  (fp32 values)", ylabel="number of entries", title=title)
    ax.legend(loc="center right")
    return fig


def draw_loss_scale(ax: Axes, history: Sequence[dict], label: str, color: str, **style: object) -> None:
    """log2 of the scale per step as a step line, each skipped step marked with a cross."""
    steps = [r["step"] for r in history]
    ax.step(steps, [math.log2(r["scale"]) for r in history], where="post", color=color, label=label, **style)
    skipped = [r for r in history if r["skipped"]]
    if skipped:
        ax.scatter(
            [r["step"] for r in skipped],
            [math.log2(r["scale"]) for r in skipped],
            marker="x",
            s=50,
            color=color,
            label=f"{label}: skipped step",
            zorder=4,
        )


def plot_loss_scales(
    histories: dict[str, Sequence[dict]], title: str, reference: str | None = None, resume_at: float | None = None
) -> Figure:
    """log2 of GradScaler's scale per step for each fp16 run (train()'s history records), skips crossed.

    The `reference` run is drawn black and dashed above the others, so a run that follows it keeps it visible.
    """
    fig, ax = plt.subplots(figsize=(9, 4))
    others = [label for label in histories if label != reference]
    for label, style in zip(others, STYLES, strict=False):
        draw_loss_scale(ax, histories[label], label, precision_color("fp16"), ls=style, lw=2.2)
    if reference is not None:
        draw_loss_scale(ax, histories[reference], reference, REFERENCE_COLOR, ls="--", lw=1.2, zorder=3)
    if resume_at is not None:
        ax.axvline(resume_at, color="gray", linestyle=":", label="stop and resume")
    ax.set(xlabel="optimizer step", ylabel="log2(loss scale S)", title=title)
    ax.legend(fontsize=8)
    return fig


def plot_clip_order(histories: dict[str, Sequence[dict]], reference: str) -> Figure:
    """Loss (left) and logged gradient norm (right, log scale) per step of fp16 runs that clip differently.

    The `reference` run (the right order) is black and dashed, drawn above the other.
    """
    fig, (ax_loss, ax_norm) = plt.subplots(1, 2, figsize=(11, 4))
    for label, history in histories.items():
        is_ref = label == reference
        style = (
            dict(color=REFERENCE_COLOR, ls="--", lw=1.2, zorder=3)
            if is_ref
            else dict(color=precision_color("fp16"), lw=2.2)
        )
        steps = [r["step"] for r in history]
        ax_loss.plot(steps, [r["loss"] for r in history], label=label, **style)
        ax_norm.semilogy(steps, [r["grad_norm"] for r in history], label=label, **style)
    ax_loss.set(xlabel="optimizer step", ylabel="training loss (nats per token)", title="Loss")
    ax_norm.set(xlabel="optimizer step", ylabel="logged gradient norm", title="The gradient norm the loop logs")
    ax_loss.legend(fontsize=8)
    fig.tight_layout()
    return fig
