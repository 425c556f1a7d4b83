"""Figures of chapter 1 (number formats): the formats' ranges, master weights, gradients against the ranges.

Each function takes numbers the chapter computed or measured and draws them; fp32, bf16, fp16 and bf16-pure
get their course colours (minigpt.style), formats without a training precision (fp8, tf32) a neutral grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from minigpt.style import precision_color

OTHER_FORMAT_COLOR = "#777777"  # fp8 and tf32: formats the course never trains in


def format_color(name: str) -> str:
    """The colour of a format in chapter 1's figures: its precision's colour, or grey for fp8 and tf32.

    fp64 and the fp8 formats are not training precisions of the course, so they share one neutral colour.
    """
    return precision_color(name) if name in ("fp32", "fp16", "bf16") else OTHER_FORMAT_COLOR


def plot_format_ranges(rows: Sequence[dict]) -> Figure:
    """Each format's magnitudes on a log2 axis: the normal range solid, the subnormal range pale.

    `rows` are minigpt.formats.format_rows() entries ("name", "max", "smallest normal", "smallest subnormal").
    """
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for i, row in enumerate(rows):
        color = format_color(row["name"])
        low_normal, high = math.log2(row["smallest normal"]), math.log2(row["max"])
        ax.barh(i, high - low_normal, left=low_normal, color=color)
        if row["smallest subnormal"] is not None:
            low_sub = math.log2(row["smallest subnormal"])
            ax.barh(i, low_normal - low_sub, left=low_sub, color=color, alpha=0.3)
    ax.set_yticks(range(len(rows)), [row["name"] for row in rows])
    ax.invert_yaxis()
    ax.axvline(0, color="gray", lw=0.8)
    ax.set_xlabel("log2 of the magnitude (0 = the value 1.0)")
    ax.set_title("Representable magnitudes: normal range (solid), subnormal range (pale)")
    fig.tight_layout()
    return fig


def plot_master_weights(history: dict[str, Sequence[float]], update: float) -> Figure:
    """A weight after each step of the same update, kept three ways: pure bf16, fp32 master, bf16 copy of it.

    `history` maps "pure bf16", "fp32 master" and "bf16 copy of master" to the weight after each step.
    """
    styles = {"pure bf16": ("bf16-pure", "-"), "fp32 master": ("fp32", "--"), "bf16 copy of master": ("bf16", "-")}
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for name, values in history.items():
        precision, line = styles[name]
        steps = "steps-post" if "bf16" in name else "default"
        ax.plot(values, line, color=precision_color(precision), label=name, drawstyle=steps)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("weight value")
    ax.set_title(f"{len(next(iter(history.values()))) - 1} updates of +{update:g} to a weight of 1.0")
    ax.legend()
    fig.tight_layout()
    return fig


def format_limits() -> list[tuple[float, str, str, str]]:
    """(log2 position, label, colour, line style) of the fp16 and bf16 limits a gradient can fall past.

    fp16's smallest subnormal, smallest normal and max in fp16's colour; bf16's smallest normal in bf16's.
    """
    fp16, bf16 = torch.finfo(torch.float16), torch.finfo(torch.bfloat16)
    return [
        (math.log2(fp16.smallest_normal * fp16.eps), "fp16 smallest subnormal", precision_color("fp16"), ":"),
        (math.log2(fp16.smallest_normal), "fp16 smallest normal", precision_color("fp16"), "--"),
        (math.log2(fp16.max), "fp16 max", precision_color("fp16"), "-."),
        (math.log2(bf16.smallest_normal), "bf16 smallest normal", precision_color("bf16"), "--"),
    ]


def plot_gradient_histogram(log2_grads: np.ndarray, loss_scale: float) -> Figure:
    """Histogram of log2 |gradient| (fp32, as computed) and its shift by a loss scale, against the fp16/bf16 limits.

    Top panel: the whole bf16 range; bottom panel: a zoom on fp16's range. Bins are a quarter power of two.
    """
    counts, edges = np.histogram(log2_grads, bins=np.arange(-135, 135.25, 0.25))
    bf16 = torch.finfo(torch.bfloat16)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5))
    for ax, low, high in [(top, -135, 135), (bottom, -45, 20)]:
        ax.stairs(counts, edges, fill=True, color=precision_color("fp32"), alpha=0.7, label="|grad| (fp32)")
        ax.stairs(counts, edges + math.log2(loss_scale), color="black", label=f"|grad| x 2**{math.log2(loss_scale):g}")
        for position, label, color, style in format_limits():
            if low <= position <= high:
                ax.axvline(position, color=color, ls=style, label=label)
        ax.set_xlim(low, high)
        ax.set_xlabel("log2 |gradient|")
        ax.set_ylabel("number of parameters")
    top.axvspan(math.log2(bf16.smallest_normal), math.log2(bf16.max), color=precision_color("bf16"), alpha=0.08)
    top.legend(fontsize=8, loc="upper right")
    top.set_title("Gradients of one backward pass; shaded: the bf16 normal range")
    bottom.set_title("Zoom: the fp16 range")
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_matmul_seconds(seconds: dict[str, Sequence[float]], title: str) -> Figure:
    """Seconds of each format's matmul in every interleaved round: one dot per round, a bar at the median.

    `seconds` maps a precision ("fp32", "bf16", "fp16") to its per-round seconds; the spread is the noise.
    """
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, (name, values) in enumerate(seconds.items()):
        ms = np.array(values) * 1e3
        ax.plot(ms, [i] * len(ms), "o", color=precision_color(name), alpha=0.7)
        ax.plot([float(np.median(ms))], [i], "|", ms=22, mew=3, color=precision_color(name))
    ax.set_yticks(range(len(seconds)), list(seconds))
    ax.set_ylim(len(seconds) - 0.5, -0.5)
    ax.set_xscale("log")  # a format can be 1000x slower than another: only a log axis shows both
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xlabel("milliseconds per call (log scale; dots: rounds, bar: median)")
    ax.set_title(title)
    fig.tight_layout()
    return fig
