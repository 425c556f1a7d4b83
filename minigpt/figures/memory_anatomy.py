"""Figures of chapter 2 (where a step's memory goes): the four terms, the moments of a step, growth, a timeline.

Each function takes numbers the chapter computed or measured and draws them. The memory terms (weights,
gradients, optimizer state, activations) have one colour each, the same in every figure of the chapter;
precisions and checkpointing modes get their course colours (minigpt.style). Every figure that shows the four
terms added up also marks the peak apart from them: the peak is the worst moment of the step, not their sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from minigpt.style import mode_color, precision_color

# Paul Tol's "muted" colours: none of them is a precision's or a checkpointing mode's colour.
MEMORY_TERM_COLORS = MappingProxyType(
    {"weights": "#117733", "gradients": "#332288", "optimizer": "#DDCC77", "activations": "#CC6677"}
)
# The profiler's categories, in the order of its memory timeline export; the four terms keep their colours.
TIMELINE_COLORS = MappingProxyType(
    {
        "parameter": MEMORY_TERM_COLORS["weights"],
        "optimizer state": MEMORY_TERM_COLORS["optimizer"],
        "input": "#222222",
        "temporary": "#AA4499",
        "activation": MEMORY_TERM_COLORS["activations"],
        "gradient": MEMORY_TERM_COLORS["gradients"],
        "autograd detail": "#7788EE",  # gradients in flight: a lighter shade of the gradients' indigo
        "unknown": "#BBBBBB",
    }
)
PEAK_MARKER = "kD"  # the predicted or measured peak: a black diamond in every figure
MODE_MARKERS = {"none": "o", "full": "v", "sqrt": "D", "selective": "^"}
AUTOCAST = {"bf16": " autocast", "fp16": " autocast"}  # the 16-bit names of minigpt.precision are autocast modes


def plot_step_breakdown(
    labels: Sequence[str],
    precisions: Sequence[str],
    terms_gib: Sequence[Mapping[str, float]],
    peaks_gib: Sequence[float],
    title: str,
) -> Figure:
    """The four terms of a step stacked (GiB on the left, shares on the right), the peak as a diamond apart.

    One bar per entry; `terms_gib[i]` maps "weights", "gradients", "optimizer", "activations" to GiB; each tick
    label is written in its precision's colour.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, share in zip(axes, (False, True)):
        for i, (terms, peak) in enumerate(zip(terms_gib, peaks_gib, strict=True)):
            total, bottom = sum(terms[t] for t in MEMORY_TERM_COLORS), 0.0
            for term, color in MEMORY_TERM_COLORS.items():
                value = terms[term] / total * 100 if share else terms[term]
                ax.bar(i, value, bottom=bottom, color=color, label=term if i == 0 else None)
                bottom += value
            if not share:
                ax.plot(i, peak, PEAK_MARKER, label="the peak: the worst moment, not the stack" if i == 0 else None)
        ax.set_xticks(range(len(labels)), labels)
        for tick, precision in zip(ax.get_xticklabels(), precisions, strict=True):
            tick.set_color(precision_color(precision))
        ax.set_ylabel("share of the four terms (%)" if share else "memory (GiB)")
        ax.set_title("shares of the four terms" if share else title)
    axes[0].legend(fontsize=8)
    fig.suptitle("The four terms of one training step stacked, and the predicted peak")
    fig.tight_layout()
    return fig


def plot_step_moments(moments_mib: Mapping[str, Mapping[str, float]], sum_of_terms_mib: float, title: str) -> Figure:
    """Live memory at the worst point of each phase of a step, per source, next to the four terms added up.

    `moments_mib[source]` maps each phase ("forward", "backward: loss head", ...) to MiB; the tallest bar of a
    source is its peak, marked with a diamond; the dashed line is weights + gradients + optimizer + activations.
    """
    phases = list(next(iter(moments_mib.values())))
    width = 0.8 / len(moments_mib)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for k, (source, moments) in enumerate(moments_mib.items()):
        x = np.arange(len(phases)) + (k - (len(moments_mib) - 1) / 2) * width
        values = [moments[p] for p in phases]
        ax.bar(x, values, width, color=precision_color("fp32"), alpha=1.0 - 0.45 * k, label=source)
        worst = int(np.argmax(values))
        ax.plot(x[worst], values[worst] * 1.03, PEAK_MARKER, label="peak" if k == 0 else None)
    ax.axhline(sum_of_terms_mib, color="black", ls="--", lw=1, label="the four terms added up")
    tallest = max(sum_of_terms_mib, *(v for moments in moments_mib.values() for v in moments.values()))
    ax.set_ylim(0, tallest * 1.25)  # room above the bars for the line, the diamonds and the legend
    ax.set_xticks(range(len(phases)), [p.replace(": ", ":\n") for p in phases])
    ax.set_ylabel("live memory (MiB)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", ncol=4)
    fig.tight_layout()
    return fig


def plot_activations_vs_batch(
    batches: Sequence[int], measured_mib: Sequence[float], predicted_mib: Sequence[float], static_mib: float, ctx: int
) -> Figure:
    """fp32 activations measured (dots) and predicted (line) against the batch, next to the static memory.

    The static memory (weights + gradients + AdamW) does not depend on the batch: a horizontal line.
    """
    fig, ax = plt.subplots(figsize=(8, 4))
    color = MEMORY_TERM_COLORS["activations"]
    ax.plot(batches, measured_mib, "o", ms=8, color=color, label="activations, measured (saved-tensor meter)")
    ax.plot(batches, predicted_mib, "-", color=color, label="activations, memory.estimate")
    ax.axhline(static_mib, color="gray", ls="--", label="static: weights + gradients + AdamW (fp32)")
    ax.set_xlabel(f"batch (sequences of {ctx} tokens)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title("10m model, fp32: activations grow linearly with the batch, static memory does not")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_activations_vs_context(
    ctxs: Sequence[int],
    sdpa_bytes: Sequence[float],
    naive_bytes: Sequence[float],
    fine_ctxs: Sequence[float],
    naive_predicted_bytes: Sequence[float],
    title: str,
) -> Figure:
    """Saved activations against the sequence length, fused SDPA and naive attention: whole pass and per token.

    Bytes at batch 1; `naive_predicted_bytes` (at `fine_ctxs`) is the prediction for the naive attention.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    ctx, fine = np.asarray(ctxs, dtype=float), np.asarray(fine_ctxs, dtype=float)
    for ax, per_token in zip(axes, (False, True)):
        scale, fine_scale = (1024 * ctx, 1024 * fine) if per_token else (2**20, 2**20)
        ax.plot(ctx, np.asarray(sdpa_bytes) / scale, "o-", color="#555555", label="fused SDPA, measured")
        ax.plot(
            ctx,
            np.asarray(naive_bytes) / scale,
            "s-",
            color=MEMORY_TERM_COLORS["activations"],
            label="naive attention (stores T x T), measured",
        )
        ax.plot(
            fine,
            np.asarray(naive_predicted_bytes) / fine_scale,
            ":",
            color=MEMORY_TERM_COLORS["activations"],
            label="naive: SDPA's table + the extra per token and layer (4hT + T + ...)",
        )
        ax.set_xlabel("sequence length T (tokens, batch 1)")
        ax.set_ylabel("activations per token (KiB)" if per_token else "activations (MiB)")
        ax.set_title("per token" if per_token else "whole forward pass")
    axes[1].legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_calculator(
    terms_gib: Mapping[str, float], peak_gib: float, cards_gib: Mapping[str, float], title: str
) -> Figure:
    """One step's four terms as a horizontal stack, its peak as a diamond, and the memory of some GPUs.

    `terms_gib` maps the four terms to GiB; `cards_gib` maps a card's name to its memory in GiB.
    """
    fig, ax = plt.subplots(figsize=(10, 2.4))
    left = 0.0
    for term, color in MEMORY_TERM_COLORS.items():
        ax.barh(0, terms_gib[term], left=left, color=color, label=term)
        left += terms_gib[term]
    ax.plot(peak_gib, 0, PEAK_MARKER, ms=9, label=f"predicted peak {peak_gib:.2f} GiB")
    for i, (card, size) in enumerate(cards_gib.items()):
        ax.axvline(size, color="gray", ls=":")
        ax.text(size, 0.45 - 0.12 * i, card, fontsize=8, ha="right")
    ax.set_xlim(0, max(peak_gib, left, *cards_gib.values()) * 1.05)
    ax.set_yticks([])
    ax.set_xlabel("memory (GiB)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def plot_peak_vs_micro_batch(
    micro_batches: Sequence[int],
    peaks_gib: Mapping[tuple[str, str], Sequence[float]],
    cards_gib: Mapping[str, float],
    title: str,
) -> Figure:
    """Predicted peak against the micro-batch, one line per (precision, checkpointing mode), and the cards.

    The line has its precision's colour, its markers its checkpointing mode's colour and shape.
    """
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for (precision, mode), peaks in peaks_gib.items():
        ax.plot(
            micro_batches,
            peaks,
            "-",
            marker=MODE_MARKERS[mode],
            color=precision_color(precision),
            mfc=mode_color(mode),
            mec=mode_color(mode),
            label=f"{precision}{AUTOCAST.get(precision, '')}, checkpointing {mode}",
        )
    for card, size in cards_gib.items():
        ax.axhline(size, color="gray", ls=":", lw=1)
        ax.text(micro_batches[0], size * 1.04, card, fontsize=8, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batch (sequences)")
    ax.set_ylabel("predicted peak (GiB)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def timeline_phases(gradient: np.ndarray, activation: np.ndarray) -> list[tuple[int, str, int, int]]:
    """(step, phase, first index, last index) of forward, backward and optimizer in a profiler memory timeline.

    Read from two categories: zero_grad frees the gradients at a step's end; activations top out at the end of
    the forward; the gradients are complete at the end of the backward.
    """
    ends = [i for i in range(1, len(gradient)) if gradient[i - 1] > 0 and gradient[i] == 0]
    bounds = [0, *ends, len(gradient) - 1]
    windows = [(s, e) for s, e in zip(bounds[:-1], bounds[1:]) if activation[s : e + 1].max() > 0]  # a forward ran
    spans = []
    for step, (start, end) in enumerate(windows, start=1):
        forward_end = start + int(np.argmax(activation[start : end + 1]))
        g = gradient[start : end + 1]
        backward_end = start + int(np.argmax(g >= 0.999 * g.max())) if g.max() > 0 else end
        spans += [(step, "forward", start, forward_end), (step, "backward", forward_end, backward_end)]
        spans.append((step, "optimizer", backward_end, end))
    return spans


def plot_memory_timeline(
    times_ms: np.ndarray, sizes: np.ndarray, spans: Sequence[tuple[int, str, int, int]], title: str
) -> Figure:
    """The profiler's memory by category over time, stacked, with each step's phases shaded and labelled.

    `sizes` has one column per category of TIMELINE_COLORS (in its order); `spans` come from timeline_phases.
    """
    fig, ax = plt.subplots(figsize=(12, 5))
    ax.stackplot(
        times_ms,
        sizes.T / 2**20,
        labels=list(TIMELINE_COLORS),
        colors=list(TIMELINE_COLORS.values()),
        step="post",
        alpha=0.85,
    )
    shades = {"forward": "#fff3b0", "backward": "#cde7ff", "optimizer": "#e2f5d0"}
    top = sizes.sum(axis=1).max() / 2**20
    for step, phase, i, j in spans:
        ax.axvspan(times_ms[i], times_ms[j], color=shades[phase], alpha=0.6, zorder=0)
        short = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}[phase]
        ax.text((times_ms[i] + times_ms[j]) / 2, top * 1.02, f"{short}\n{step}", ha="center", fontsize=8)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("time (ms, as the profiler recorded it: only the order of events matters here)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
