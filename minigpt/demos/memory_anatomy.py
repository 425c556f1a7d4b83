"""Demo `memory`: where the memory of one training step goes (weights, gradients, optimizer, activations).

The prediction, computed from the config alone, is checked against a real step measured on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from minigpt.demos.common import MIB, conclude, default_scale, mib, pyplot, save_figure, show_table
from minigpt.hardware import GIB
from minigpt.memory import activations_korthikanti, activations_rule_of_thumb, estimate, measure, static_table
from minigpt.model import COURSE_PRESETS, get_config
from minigpt.precision import static_bytes_per_param


def demo_memory(out: Path, size: str = "lecture") -> list[Path]:
    """The four costs of a training step, predicted from the config and measured on a real step."""
    quick = size == "quick"
    show_table("Static memory with AdamW, bytes per parameter", static_table())
    s = default_scale(quick)
    cfg = get_config(s.preset)
    predicted = estimate(cfg, s.batch, s.ctx, "fp32", device="cpu")
    measured = measure(cfg, s.batch, s.ctx, "fp32", device="cpu")
    got = dict(measured.rows())
    rows = [
        [name, mib(p), mib(got[name]), f"{100 * (p - got[name]) / max(got[name], 1):+.1f}"]
        for name, p in predicted.rows()
        if name in got
    ]
    show_table(
        f"{s.preset}, batch {s.batch}, ctx {s.ctx}, fp32: one training step, MiB",
        rows,
        ["term", "predicted", "measured", "error %"],
    )

    rows = []
    for preset in COURSE_PRESETS:
        c = get_config(preset)
        rows.append(
            [
                preset,
                c.ctx,
                mib(estimate(c, 8, c.ctx, "fp32", device="cpu").activations),
                mib(activations_rule_of_thumb(c, 8, c.ctx)),
                mib(estimate(c, 8, c.ctx, "bf16").activations),
                mib(activations_korthikanti(c, 8, c.ctx)),
            ]
        )
    show_table(
        "Activations at batch 8, MiB: this model vs the textbook formulas",
        rows,
        ["preset", "ctx", "ours fp32", "10 x BTCL x 4 B", "ours bf16 (CUDA)", "Korthikanti (16-bit)"],
    )

    plt = pyplot()
    terms = ("weights", "gradients", "optimizer", "activations")
    fig, axes = plt.subplots(1, len(COURSE_PRESETS), figsize=(10, 3.4))
    for ax, preset in zip(axes, COURSE_PRESETS):
        c = get_config(preset)
        precisions = ("fp32", "bf16", "bf16-pure")
        bottom = np.zeros(len(precisions))
        for term in terms:
            values = np.array([getattr(estimate(c, 8, c.ctx, p, device="cpu"), term) / GIB for p in precisions])
            ax.bar(precisions, values, bottom=bottom, label=term)
            bottom += values
        ax.set_title(f"{preset}, batch 8, ctx {c.ctx}")
        ax.set_ylabel("GiB (predicted)")
    axes[0].legend(fontsize=8)
    figures = [save_figure(fig, out, "memory_breakdown.png")]

    batches = list(range(1, 33))
    peaks = [estimate(cfg, b, s.ctx, "fp32", device="cpu").peak / MIB for b in batches]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(batches, peaks, label="predicted peak")
    ax.axhline(predicted.static / MIB, color="gray", linestyle="--", label="static (weights, grads, AdamW)")
    ax.scatter([s.batch], [measured.peak / MIB], color="tab:red", zorder=3, label="measured peak")
    ax.set_xlabel("micro-batch (sequences)")
    ax.set_ylabel("MiB")
    ax.set_title(f"{s.preset} at ctx {s.ctx}, fp32: the peak grows with the batch")
    ax.legend()
    figures.append(save_figure(fig, out, "memory_vs_batch.png"))

    error = 100 * (predicted.peak - measured.peak) / measured.peak
    conclude(
        f"{s.preset} at batch {s.batch}, ctx {s.ctx}, fp32: predicted peak {mib(predicted.peak)} MiB, "
        f"measured {mib(measured.peak)} MiB ({error:+.1f}%); static memory is "
        f"{static_bytes_per_param('fp32')['total']} B/param and activations are "
        f"{measured.activations / measured.peak:.0%} of the peak."
    )
    return figures
