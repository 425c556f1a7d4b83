"""Figures of chapters 5 and 6 (accumulation, checkpointing): step time with its spread, memory moment by moment.

Each function takes numbers the chapter measured or predicted and draws them; precisions and checkpointing
modes get their course colours (minigpt.style). Timings come as seconds per interleaved round, so every
figure can show the spread between rounds next to the median.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from minigpt.recompute import sqrt_segments
from minigpt.style import mode_color, precision_color
from minigpt.timing import Ratio

MiB = 2**20
# The moments of a step, in step order: viridis shades, so that no moment looks like a precision or a mode.
PHASE_COLORS = ("#440154", "#3b528b", "#21918c", "#5ec962", "#b5de2b")


def draw_round_seconds(ax: Axes, labels: Sequence[str], seconds: dict[str, Sequence[float]], color: str) -> None:
    """Bars at the median seconds of each candidate, with a line from its fastest to its slowest round.

    The line is the spread a shared machine adds: a difference smaller than it is not a measurement.
    """
    medians = [statistics.median(seconds[name]) for name in labels]
    low = [m - min(seconds[name]) for m, name in zip(medians, labels, strict=True)]
    high = [max(seconds[name]) - m for m, name in zip(medians, labels, strict=True)]
    ax.bar(labels, medians, color=color, yerr=[low, high], capsize=6, label="median of the rounds")
    ax.set_ylabel("seconds per optimizer step")
    ax.set_ylim(bottom=0)


def draw_step_moments(ax: Axes, moments: dict[str, dict[str, int]], always_live: dict[str, int]) -> None:
    """For each setting, one bar per moment of the step (the live bytes at its worst); the tallest is the peak.

    The hatched base is what is alive at every moment (weights and AdamW's moments): the floor no setting goes under.
    """
    phases = list(next(iter(moments.values())))
    width = 0.8 / len(phases)
    for i, (setting, live) in enumerate(moments.items()):
        peak_phase = max(live, key=live.get)
        for j, phase in enumerate(phases):
            x = i - 0.4 + (j + 0.5) * width
            color = PHASE_COLORS[j % len(PHASE_COLORS)]
            ax.bar(x, live[phase] / MiB, width, color=color, label=phase if i == 0 else None)
            ax.bar(x, always_live[setting] / MiB, width, fill=False, hatch="//", edgecolor="white", lw=0)
        x_peak = i - 0.4 + (phases.index(peak_phase) + 0.5) * width
        ax.plot(x_peak, live[peak_phase] / MiB, "kD", label="measured peak" if i == 0 else None)
    ax.set_xticks(range(len(moments)), list(moments))
    ax.set_ylabel("live MiB at the worst point of each moment")
    handles, _ = ax.get_legend_handles_labels()
    floor = Patch(facecolor="gray", hatch="//", edgecolor="white", label="alive at every moment (weights, AdamW)")
    ax.legend(handles=[*handles, floor], fontsize=8)


def plot_accumulation_cost(
    seconds: dict[str, Sequence[float]],
    moments: dict[str, dict[str, int]],
    always_live: dict[str, int],
    precision: str,
    title: str,
) -> Figure:
    """Chapter 5: time per optimizer step (left) and the measured memory of the step, moment by moment (right).

    Keys are settings such as "4 x 4"; `seconds` holds each one's seconds per round, `moments` its live bytes.
    """
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    draw_round_seconds(ax_t, list(seconds), seconds, precision_color(precision))
    ax_t.set_xlabel("micro-batch x accum")
    ax_t.set_title(f"Time per step, {precision} (bar: median, line: fastest to slowest round)", fontsize=10)
    draw_step_moments(ax_m, moments, always_live)
    ax_m.set_xlabel("micro-batch x accum")
    ax_m.set_title("Memory of one step (measured): the peak is the worst moment", fontsize=10)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def draw_mode_row(ax: Axes, row: int, mode: str, n_layer: int) -> None:
    """One row of the checkpointing picture: per block a thin box (its input) and a wide box (its inner tensors).

    Kept boxes are filled in the mode's colour; dropped ones, recomputed in backward, are white and hatched.
    """

    def box(x: float, y: float, w: float, h: float, kept: bool) -> None:
        face = mode_color(mode) if kept else "white"
        ax.add_patch(Rectangle((x, y), w, h, facecolor=face, hatch=None if kept else "///", edgecolor="black"))

    starts = {s.start for s in sqrt_segments(n_layer)}
    for i in range(n_layer):
        x = i * 1.25
        box(x, row, 0.25, 0.8, kept=mode != "sqrt" or i in starts)
        if mode == "selective":  # matmul and attention outputs kept (top), elementwise results redone
            box(x + 0.25, row + 0.4, 0.85, 0.4, kept=True)
            box(x + 0.25, row, 0.85, 0.4, kept=False)
        else:
            box(x + 0.25, row, 0.85, 0.8, kept=mode == "none")
    if mode == "sqrt":  # brackets under the segments
        for s in sqrt_segments(n_layer):
            ax.plot([s.start * 1.25, (s.stop - 1) * 1.25 + 1.1], [row - 0.1, row - 0.1], color="black", lw=2)


def plot_checkpointing_modes(n_layer: int, keeps: dict[str, str]) -> Figure:
    """Chapter 6's picture of what the forward keeps for backward in each mode, `n_layer` blocks wide.

    `keeps[mode]` is the line written beside the mode's row (what it keeps, in words).
    """
    modes = list(keeps)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for row, mode in enumerate(reversed(modes)):
        draw_mode_row(ax, row, mode, n_layer)
        ax.text(n_layer * 1.25 + 0.2, row + 0.4, keeps[mode], va="center")
    ax.set_xlim(-0.2, n_layer * 1.25 + 5.5)
    ax.set_ylim(-0.4, len(modes))
    ax.set_yticks([r + 0.4 for r in range(len(modes))], list(reversed(modes)))
    ax.set_xticks([i * 1.25 + 0.55 for i in range(n_layer)], [str(i) for i in range(n_layer)])
    ax.set_xlabel("block (thin box: its input; wide box: the tensors inside it that backward needs)")
    sizes = [len(s) for s in sqrt_segments(n_layer)]
    ax.set_title(f"What the forward keeps for backward, {n_layer} blocks (sqrt: segments of {sizes})")
    handles = [
        Patch(facecolor="lightgray", edgecolor="black", label="kept from the forward (in the mode's colour)"),
        Patch(facecolor="white", hatch="///", edgecolor="black", label="dropped, recomputed in backward"),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.45, -0.16), ncol=2, fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def plot_held_in_blocks(layers: Sequence[int], held: dict[str, Sequence[float]], crossover: int) -> Figure:
    """Chapter 6: what each mode holds at backward's worst moment, in blocks' activations, against depth.

    `held[mode]` has one value per entry of `layers`; `crossover` is where sqrt segments start to win.
    """
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for mode, values in held.items():
        ax.plot(layers, values, color=mode_color(mode), label=mode)
    ax.axvline(crossover, color="gray", ls=":", label=f"sqrt beats full from L = {crossover}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of blocks L")
    ax.set_ylabel("held at backward's worst moment (x one block's activations)")
    ax.set_title("The O(sqrt L) picture with a transformer block's real sizes")
    ax.legend()
    return fig


def draw_measured_and_predicted(
    ax: Axes,
    measured_x: Sequence[float],
    measured: dict[str, Sequence[float]],
    predicted_x: Sequence[float],
    predicted: dict[str, Sequence[float]],
) -> None:
    """Per mode: measured points on the line `memory.estimate` predicts, both in the mode's colour.

    Values are in the unit the caller chose (the chapter passes MiB).
    """
    for mode, values in measured.items():
        ax.plot(predicted_x, predicted[mode], color=mode_color(mode), alpha=0.6, label=f"{mode}: predicted")
        ax.plot(measured_x, values, "o", color=mode_color(mode), label=f"{mode}: measured")
    ax.set_ylim(bottom=0)


def draw_time_ratios(
    ax: Axes, x: Sequence[float], ratios: dict[str, Sequence[Ratio]], predicted: dict[str, Sequence[float]]
) -> None:
    """Per mode: its time over none's (median of the rounds, bar from the lowest to the highest round's ratio).

    Dashed in the same colour: `plan.relative_step_time`'s prediction; dotted grey: the 4/3 rule.
    """
    for mode, values in ratios.items():
        medians = [r.median for r in values]
        spread = [[r.median - r.low for r in values], [r.high - r.median for r in values]]
        ax.errorbar(x, medians, yerr=spread, fmt="o-", capsize=4, color=mode_color(mode), label=f"{mode}: measured")
        ax.plot(x, predicted[mode], "--", color=mode_color(mode), alpha=0.6, label=f"{mode}: predicted")
    ax.axhline(4 / 3, color="gray", ls=":", label="4/3 rule")
    ax.axhline(1, color="black", lw=0.8)
    ax.set_ylabel("forward+backward time / none's")


def plot_depth_sweep(
    layers: Sequence[int],
    measured: dict[str, dict[str, Sequence[float]]],
    dense_layers: Sequence[int],
    predicted: dict[str, dict[str, Sequence[float]]],
    outside_blocks_mib: float,
    title: str,
) -> Figure:
    """Chapter 6: saved activations (left) and the step's peak (right) against depth, per mode, in MiB.

    `measured[field][mode]` has one value per entry of `layers`, `predicted[field][mode]` one per `dense_layers`.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, field in zip(axes, ("activations", "peak"), strict=True):
        draw_measured_and_predicted(ax, layers, measured[field], dense_layers, predicted[field])
        ax.set_xlabel("number of blocks L")
        ax.set_ylabel("MiB")
    axes[0].axhline(outside_blocks_mib, color="gray", ls=":", label="saved outside the blocks (head, loss)")
    axes[0].set_title("Saved activations")
    axes[1].set_title("Peak of the training step")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_time_ratios(
    x: Sequence[float],
    ratios: dict[str, Sequence[Ratio]],
    predicted: dict[str, Sequence[float]],
    xlabel: str,
    title: str,
) -> Figure:
    """Chapter 6: each checkpointing mode's forward+backward time over none's, measured in rounds and predicted.

    One figure of `draw_time_ratios`, for a sweep over depth or over the sequence length.
    """
    fig, ax = plt.subplots(figsize=(8, 4.5))
    draw_time_ratios(ax, x, ratios, predicted)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_ctx_sweep(
    ctxs: Sequence[int],
    measured_mib: dict[str, Sequence[float]],
    predicted_mib: dict[str, Sequence[float]],
    ratios: dict[str, Sequence[Ratio]],
    predicted_ratios: dict[str, Sequence[float]],
    title: str,
) -> Figure:
    """Chapter 6: saved activations (left) and time ratios to none (right) against the sequence length.

    Memory in MiB, measured and predicted per mode; ratios as in `draw_time_ratios`.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    draw_measured_and_predicted(axes[0], ctxs, measured_mib, ctxs, predicted_mib)
    draw_time_ratios(axes[1], ctxs, ratios, predicted_ratios)
    axes[0].set_ylabel("saved activations (MiB)")
    axes[0].set_title("Memory grows linearly in ctx (lines: memory.estimate)")
    axes[1].set_title("Time ratio against ctx (bars: spread of the rounds)")
    for ax in axes:
        ax.set_xlabel("tokens per sequence (ctx)")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig
