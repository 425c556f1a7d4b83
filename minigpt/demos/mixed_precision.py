"""Demos `autocast` and `scaler`: training in bf16 and fp16 instead of fp32.

autocast runs the matmuls in 16 bits and keeps fp32 weights; fp16 also needs its loss scaled (GradScaler).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import torch

from minigpt.demos.common import (
    CPU,
    MIB,
    Scale,
    conclude,
    default_scale,
    mib,
    pyplot,
    save_figure,
    short_training_run,
    show_table,
    token_data,
)
from minigpt.device import device_info
from minigpt.formats import format_rows, round_trip, short_name
from minigpt.memory import measure
from minigpt.model import GPT, get_config
from minigpt.precision import param_dtype, probe_precision, static_bytes_per_param
from minigpt.step import forward_backward
from minigpt.style import precision_color


def low_precision_training_scale(size: str, precision: str) -> Scale:
    """The training runs of the bf16/fp16 demos: the tiny preset where `precision` would make them slow.

    Without bf16 instructions a 10m bf16 step is ~15x slower than fp32 (a 20-step run takes minutes). A CPU
    has no fp16 matmuls of its own, so the fp16 runs are tiny ones unless --full asks for the usual preset.
    """
    s = default_scale(size == "quick")
    if size == "quick":
        return s
    if not device_info(CPU).bf16_is_fast:
        print(
            f"\n(this CPU has no bf16 instructions and emulates bf16 and fp16 about 15x slower than fp32: the "
            f"training runs below use the tiny preset instead of {s.preset})"
        )
    elif precision == "fp16" and size != "full":
        print(f"\n(fp16 is slow on a CPU: the training runs below use the tiny preset; --full trains {s.preset})")
    else:
        return s
    return dataclasses.replace(s, preset="tiny")


# ----------------------------------------------------------------------------------------------------------
# Mixed precision with autocast


def demo_autocast(out: Path, size: str = "lecture") -> list[Path]:
    """What autocast changes (the matmuls, the activations) and what it keeps (fp32 weights, the loss)."""
    quick = size == "quick"
    s = default_scale(quick)
    cfg = get_config(s.preset)
    precisions = ("fp32", "bf16", "bf16-pure")
    saved = {p: measure(cfg, s.batch, s.ctx, p, device="cpu").activations for p in precisions}
    rows = [
        [
            p,
            short_name(param_dtype(p)),
            short_name(probe_precision(CPU, p).observed_dtype),
            static_bytes_per_param(p)["total"],
            mib(saved[p]),
        ]
        for p in precisions
    ]
    show_table(
        f"{s.preset}, batch {s.batch}, ctx {s.ctx}",
        rows,
        ["precision", "weights", "matmul output", "static B/param", "activations MiB (measured)"],
    )

    t = low_precision_training_scale(size, "bf16")
    runs = {p: short_training_run(t, quick, precision=p) for p in precisions}
    base = runs["fp32"].losses
    rows = [
        [
            p,
            f"{r.losses[-1]:.3f}",
            f"{r.val_history[-1][1]:.3f}",
            f"{max(abs(a - b) for a, b in zip(r.losses, base)):.3f}",
            f"{r.summary()['tokens_per_s']:,.0f}",
        ]
        for p, r in runs.items()
    ]
    show_table(
        f"{t.preset}, {t.steps} training steps, same seed and batches",
        rows,
        ["precision", "train loss", "val loss", "max |loss - fp32 loss|", "tokens/s"],
    )

    plt = pyplot()
    fig, (ax, ax_gap) = plt.subplots(1, 2, figsize=(9, 3.4))
    for p, r in runs.items():
        steps = range(1, len(r.losses) + 1)
        ax.plot(steps, r.losses, label=p, color=precision_color(p))
        ax_gap.plot(steps, [a - b for a, b in zip(r.losses, base)], label=p, color=precision_color(p))
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(f"{t.preset}: train loss, same seed and batches")
    ax.legend()
    ax_gap.axhline(0, color="gray", linewidth=1)
    ax_gap.set_xlabel("step")
    ax_gap.set_ylabel("loss - fp32 loss")
    ax_gap.set_title("Zoomed in: the difference from fp32")
    ax_gap.legend()
    figures = [save_figure(fig, out, "autocast_loss.png")]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.bar(precisions, [saved[p] / MIB for p in precisions], color=[precision_color(p) for p in precisions])
    ax.set_ylabel("activations kept for backward, MiB")
    ax.set_title(f"{s.preset}, batch {s.batch}, ctx {s.ctx} (measured)")
    figures.append(save_figure(fig, out, "autocast_memory.png"))

    gap = max(abs(a - b) for a, b in zip(runs["bf16"].losses, base))
    conclude(
        f"bf16 autocast followed fp32's loss within {gap:.3f} over {t.steps} steps and kept "
        f"{saved['bf16'] / saved['fp32']:.0%} of fp32's activation bytes; its weights stay fp32 "
        f"({static_bytes_per_param('bf16')['total']} B/param), only bf16-pure halves them "
        f"({static_bytes_per_param('bf16-pure')['total']} B/param)."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# fp16 and the GradScaler


def demo_scaler(out: Path, size: str = "lecture") -> list[Path]:
    """fp16 gradients underflow to zero; scaling the loss moves them into fp16's range."""
    quick = size == "quick"
    facts = {r["name"]: r for r in format_rows()}
    fp16 = facts["fp16"]
    show_table(
        "fp16's range",
        [[k, f"{fp16[k]:g}"] for k in ("smallest subnormal", "smallest normal", "max")],
        ["fp16", "value"],
    )

    s = default_scale(quick)
    model = GPT(get_config(s.preset), seed=0)
    x, y = token_data(quick).get_batch("train", s.batch, s.ctx, torch.Generator().manual_seed(0))
    forward_backward(model, [(x, y)], CPU, "fp32")
    grads = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
    grads = grads[grads != 0]
    scales = [1, 2**8, 2**16, 2**24]
    rows, lost, subnormal = [], {}, {}
    for scale in scales:
        stored = round_trip(grads * scale, "fp16")
        lost[scale] = (stored == 0).double().mean().item()
        subnormal[scale] = ((stored.abs() < fp16["smallest normal"]) & (stored != 0)).double().mean().item()
        rows.append(
            [
                f"2^{int(math.log2(scale))}",
                f"{100 * lost[scale]:.2f}",
                f"{100 * subnormal[scale]:.2f}",
                f"{100 * stored.isinf().double().mean().item():.2f}",
            ]
        )
    show_table(
        f"{grads.numel():,} gradient values of {s.preset} stored in fp16 after scaling the loss",
        rows,
        ["loss scale", "% flushed to 0", "% subnormal", "% overflow to inf"],
    )

    t = low_precision_training_scale(size, "fp16")
    runs = {p: short_training_run(t, quick, precision=p) for p in ("fp32", "fp16")}
    history = runs["fp16"].history
    every = max(1, len(history) // 6)
    rows = [
        [r["step"], f"{runs['fp32'].losses[r['step'] - 1]:.3f}", f"{r['loss']:.3f}", f"{r['scale']:g}", r["skipped"]]
        for r in history[::every]
    ]
    show_table(
        f"{t.preset}: fp16 autocast + GradScaler (minigpt.train)",
        rows,
        ["step", "fp32 loss", "fp16 loss", "scale", "skipped"],
    )

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    logs = grads.abs().log2().numpy()
    bins = np.arange(math.floor(logs.min()) - 1, math.ceil(logs.max()) + 18)
    ax.hist(logs, bins=bins, alpha=0.6, label="gradients")
    ax.hist(logs + 16, bins=bins, alpha=0.6, label="gradients x 2^16")
    for key, style in (("smallest subnormal", ":"), ("smallest normal", "--"), ("max", "-")):
        ax.axvline(math.log2(fp16[key]), color="black", linestyle=style, label=f"fp16 {key}")
    ax.set_xlabel("log2 |gradient|")
    ax.set_ylabel("values")
    ax.set_title(f"{s.preset}: where the gradients fall against fp16's range")
    ax.legend(fontsize=8)
    figures = [save_figure(fig, out, "scaler_histogram.png")]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for p, r in runs.items():
        label = p + (" + GradScaler" if p == "fp16" else "")
        ax.plot([h["step"] for h in r.history], r.losses, label=label, color=precision_color(p))
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title("fp16 with loss scaling trains like fp32")
    ax.legend()
    figures.append(save_figure(fig, out, "scaler_loss.png"))

    gap = max(abs(a - b) for a, b in zip(runs["fp16"].losses, runs["fp32"].losses))
    conclude(
        f"unscaled, {lost[1]:.2%} of these gradient values flush to zero in fp16 and {subnormal[1]:.1%} "
        f"lose precision as subnormals; scaled by 2^16, {lost[2**16]:.2%} and {subnormal[2**16]:.1%}. "
        f"fp16 + GradScaler followed fp32's loss within {gap:.3f} over {t.steps} steps "
        f"({runs['fp16'].skipped_steps} skipped)."
    )
    return figures
