"""Demos `accumulation` and `checkpointing`: two ways to fit a training step into less memory.

Gradient accumulation runs a big batch as several small ones; checkpointing recomputes activations in backward.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from minigpt.demos.common import (
    CPU,
    MIB,
    conclude,
    default_scale,
    mib,
    pyplot,
    save_figure,
    short_training_run,
    show_table,
    token_data,
)
from minigpt.memory import estimate, measure
from minigpt.model import GPT, IGNORE_INDEX, get_config
from minigpt.plan import relative_step_time
from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments
from minigpt.step import forward_backward
from minigpt.style import mode_color

# ----------------------------------------------------------------------------------------------------------
# Gradient accumulation


def demo_accumulation(out: Path, size: str = "lecture") -> list[Path]:
    """Same gradients as one big batch, in a fraction of the memory, for some speed."""
    quick = size == "quick"
    s = default_scale(quick)
    cfg, effective, ctx = get_config(s.preset), 16, (16 if quick else 32)
    model = GPT(cfg, seed=0)
    x, y = token_data(quick).get_batch("train", effective, ctx, torch.Generator().manual_seed(0))
    y = y.clone()
    for i in range(effective):  # padded sequences: the loss must count tokens, not average micro-batches
        y[i, ctx - (i * ctx) // (2 * effective) :] = IGNORE_INDEX

    def window_grads(micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss = forward_backward(model, list(zip(x.split(micro), y.split(micro))), CPU, "fp32")
        return loss, torch.cat([p.grad.flatten() for p in model.parameters()])

    accums = (1, 2, 4, 8, 16) if size == "full" else (1, 4, 16)
    _, reference = window_grads(effective)
    rows, difference = [], {}
    for accum in accums:
        loss, g = window_grads(effective // accum)
        difference[accum] = ((g - reference).abs().max() / reference.abs().max()).item()
        rows.append([accum, effective // accum, f"{loss:.5f}", f"{difference[accum]:.1e}"])
    show_table(
        f"One window of {effective} sequences (some padded), split into micro-batches",
        rows,
        ["accum", "micro-batch", "window loss", "max |grad - grad(accum 1)| / max |grad|"],
    )

    mem = {a: measure(cfg, effective // a, ctx, "fp32", device="cpu") for a in accums}
    pred = {a: estimate(cfg, effective // a, ctx, "fp32", device="cpu") for a in accums}
    speed = {
        a: short_training_run(s, quick, batch=effective // a, accum=a, ctx=ctx, steps=s.speed_steps).summary()[
            "tokens_per_s"
        ]
        for a in ((1, 4, 16) if size == "full" else (1, 16))
    }  # the median of steps 2-4
    rows = [
        [
            a,
            effective // a,
            mib(pred[a].peak),
            mib(mem[a].peak),
            mib(mem[a].activations),
            f"{speed[a]:,.0f}" if a in speed else "",
        ]
        for a in accums
    ]
    show_table(
        f"Effective batch {effective} at ctx {ctx}, fp32",
        rows,
        ["accum", "micro-batch", "predicted peak MiB", "measured peak MiB", "activations MiB", "tokens/s"],
    )

    plt = pyplot()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = [str(a) for a in accums]
    ax_m.plot(labels, [pred[a].peak / MIB for a in accums], "x--", label="predicted peak")
    ax_m.plot(labels, [mem[a].peak / MIB for a in accums], "o-", label="measured peak")
    ax_m.axhline(mem[1].static / MIB, color="gray", linestyle=":", label="static")
    ax_m.set_xlabel("accum")
    ax_m.set_ylabel("MiB")
    ax_m.set_title(f"Memory at effective batch {effective}")
    ax_m.legend()
    ax_t.bar([str(a) for a in speed], list(speed.values()))
    ax_t.set_xlabel("accum")
    ax_t.set_ylabel("tokens/s")
    ax_t.set_title("Speed (minigpt.train)")
    figures = [save_figure(fig, out, "accumulation.png")]

    conclude(
        f"at effective batch {effective}, accum 16 (micro-batch 1) cut the peak from {mib(mem[1].peak)} to "
        f"{mib(mem[16].peak)} MiB ({mem[16].peak / mem[1].peak - 1:+.0%}) with the same gradients (max "
        f"relative difference {max(difference.values()):.1e}) at {speed[16] / speed[1]:.0%} of the tokens/s."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# Gradient checkpointing


def demo_checkpointing(out: Path, size: str = "lecture") -> list[Path]:
    """Each checkpointing mode: the activations it keeps and the time it costs, measured and predicted."""
    quick = size == "quick"
    s = default_scale(quick)
    if quick:
        s = dataclasses.replace(s, preset="tiny-deep")
    cfg = get_config(s.preset)
    segments = [f"{r.start}-{r.stop - 1}" for r in sqrt_segments(cfg.n_layer)]
    print(
        f"{s.preset}: {cfg.n_layer} blocks; sqrt checkpointing keeps the inputs of {len(segments)} "
        f"segments (blocks {', '.join(segments)})"
    )
    kept = {m: measure(cfg, s.batch, s.ctx, "fp32", m, device="cpu").activations for m in CHECKPOINTING_MODES}
    pred = {m: estimate(cfg, s.batch, s.ctx, "fp32", m, device="cpu").activations for m in CHECKPOINTING_MODES}
    speed = {
        m: short_training_run(s, quick, checkpointing=m, steps=s.speed_steps).summary()["tokens_per_s"]
        for m in CHECKPOINTING_MODES
    }
    theory = {m: relative_step_time(cfg, s.ctx, m) for m in CHECKPOINTING_MODES}
    measured_time = {m: speed["none"] / speed[m] for m in CHECKPOINTING_MODES}
    rows = [
        [m, mib(pred[m]), mib(kept[m]), f"{kept[m] / kept['none']:.2f}", f"{theory[m]:.2f}", f"{measured_time[m]:.2f}"]
        for m in CHECKPOINTING_MODES
    ]
    show_table(
        f"{s.preset}, batch {s.batch}, ctx {s.ctx}, fp32",
        rows,
        ["mode", "predicted activations MiB", "measured MiB", "vs none", "time: FLOP model", "time: measured"],
    )

    plt = pyplot()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(9, 3.4))
    xs = np.arange(len(CHECKPOINTING_MODES))
    colors = [mode_color(m) for m in CHECKPOINTING_MODES]  # the mode's colour; hatched: the prediction
    hatched = dict(color=colors, alpha=0.45, hatch="//", edgecolor="white")
    ax_m.bar(xs - 0.2, [pred[m] / MIB for m in CHECKPOINTING_MODES], 0.4, label="predicted", **hatched)
    ax_m.bar(xs + 0.2, [kept[m] / MIB for m in CHECKPOINTING_MODES], 0.4, label="measured", color=colors)
    ax_m.set_ylabel("activations kept for backward, MiB")
    ax_t.bar(xs - 0.2, [theory[m] for m in CHECKPOINTING_MODES], 0.4, label="FLOP model", **hatched)
    ax_t.bar(xs + 0.2, [measured_time[m] for m in CHECKPOINTING_MODES], 0.4, label="measured", color=colors)
    ax_t.set_ylabel("step time / no checkpointing")
    for ax, title in ((ax_m, "Memory"), (ax_t, "Time")):
        ax.set_xticks(xs, CHECKPOINTING_MODES)
        ax.set_title(title)
        ax.legend(fontsize=8)
    figures = [save_figure(fig, out, "checkpointing.png")]

    conclude(
        f"full checkpointing kept {kept['full'] / kept['none']:.0%} of the activations for "
        f"{measured_time['full']:.2f}x the step time (FLOP model {theory['full']:.2f}x); selective kept "
        f"{kept['selective'] / kept['none']:.0%} for {measured_time['selective']:.2f}x."
    )
    return figures
