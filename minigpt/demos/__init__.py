"""Lecture demos: `minigpt demo NAME` runs a short live demonstration an instructor can project.

Each demo prints a few tables and a one-line conclusion, and saves its figures as PNG files in `out`.
Every number comes from the package (minigpt.precision, memory, train, plan): a demo only calls and
shows. On the CPU each takes well under a minute; `quick=True` shrinks the sizes (for the tests).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments
from minigpt.data import TokenData, load_tokens
from minigpt.device import device_info
from minigpt.memory import (
    activations_korthikanti,
    activations_rule_of_thumb,
    estimate,
    measure,
    static_table,
)
from minigpt.model import COURSE_PRESETS, GPT, IGNORE_INDEX, PRESETS, get_config
from minigpt.plan import (
    GIB,
    compare_with_book,
    detect_hardware,
    plan,
    recommended_table,
    relative_step_time,
)
from minigpt.precision import (
    decode_bits,
    format_rows,
    formats_table,
    missing_formats,
    param_dtype,
    probe_precision,
    relative_error,
    round_trip,
    short_name,
    smallest_update_that_survives,
    static_bytes_per_param,
    update_is_lost,
)
from minigpt.train import TrainConfig, TrainResult, forward_backward, train

CPU = torch.device("cpu")
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a demo's runs are: a preset, a micro-batch, a context length and training steps."""

    preset: str
    batch: int
    ctx: int
    steps: int  # of the runs whose loss curves are shown
    speed_steps: int  # of the runs that only measure tokens/s (the median leaves the first step out)


def _scale(quick: bool, preset: str = "10m") -> Scale:
    return Scale("tiny", 2, 32, 3, 2) if quick else Scale(preset, 4, 64, 20, 4)


def _low_precision_training_scale(quick: bool) -> Scale:
    """The training runs of the bf16/fp16 demos: the tiny preset on a CPU that emulates bf16 and fp16.

    Without bf16 instructions a 10m bf16 step is ~15x slower than fp32 (a 20-step run takes minutes).
    """
    s = _scale(quick)
    if quick or device_info(CPU).bf16_is_fast:
        return s
    print(f"\n(this CPU has no bf16 instructions and emulates bf16 and fp16 about 15x slower than fp32: the "
          f"training runs below use the tiny preset instead of {s.preset})")
    return dataclasses.replace(s, preset="tiny")


# ----------------------------------------------------------------------------------------------------------
# Showing things


def _show(title: str, rows: list, headers: list[str] | str = "keys") -> None:
    print(f"\n{title}\n")
    print(tabulate(rows, headers=headers, tablefmt="github", floatfmt="g", intfmt=","))


def _conclude(text: str) -> None:
    print(f"\nConclusion: {text}")


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / MIB:,.1f}"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works in a terminal, over ssh and in CI
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> Path:
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    print(f"saved {out / name}")
    return out / name


@functools.lru_cache(maxsize=2)
def _data(quick: bool) -> TokenData:
    """The built-in stories (tokenized once, then cached); random tokens in quick mode."""
    if not quick:
        return load_tokens()
    tokens = np.random.default_rng(0).integers(0, PRESETS["tiny"].vocab_size, 20_000).astype(np.uint16)
    return TokenData(tokens[:18_000], tokens[18_000:], "minigpt-8k", "random tokens (quick)")


def _train(scale: Scale, quick: bool, **overrides) -> TrainResult:
    """A short, quiet training run on the CPU (same seed, so the same batches, whatever the overrides)."""
    settings = dict(
        preset=scale.preset,
        batch=scale.batch,
        ctx=scale.ctx,
        steps=scale.steps,
        lr=2e-3,
        eval_batches=2,
        sample_tokens=0,
        device="cpu",
        verbose=False,
        progress=False,
    )
    return train(TrainConfig(**{**settings, **overrides}), data=_data(quick))


# ----------------------------------------------------------------------------------------------------------
# 0. A real GPT, training


def train_demo(out: Path, quick: bool = False) -> list[Path]:
    """The 10m GPT trains on the built-in stories: the loss falls, tokens/s, and what it writes after."""
    s = Scale("tiny", 2, 32, 6, 2) if quick else Scale("10m", 8, 64, 80, 4)
    run = _train(s, quick, lr=4e-3, sample_tokens=40, eval_every=s.steps // 2)
    losses, summary, vocab = run.losses, run.summary(), run.model.cfg.vocab_size
    guessing = math.log(vocab)  # the loss of a uniform guess over the vocabulary
    every = max(1, s.steps // 8)
    rows = [[r["step"], f"{r['loss']:.3f}", f"{r['tokens_per_s']:,.0f}"] for r in run.history[::every]]
    _show(f"{s.preset} ({run.model.num_params():,} parameters), batch {s.batch} x ctx {s.ctx}, fp32", rows,
          ["step", "train loss", "tokens/s"])  # fmt: skip
    print(f"\nSample after {s.steps} steps:\n\n{run.sample}\n")

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(range(1, len(losses) + 1), losses, label="train")
    ax.plot(*zip(*run.val_history), "o-", label="val")
    ax.axhline(guessing, color="gray", linestyle="--", label="ln(vocab): guessing")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss, nats per token")
    ax.set_title(f"{s.preset} on the built-in stories")
    ax.legend()
    figures = [_save(fig, out, "train_loss.png")]
    _conclude(
        f"in {s.steps} steps the loss fell from {losses[0]:.2f} (ln {vocab} = {guessing:.2f} is guessing) "
        f"to {losses[-1]:.2f}, val {summary['final_val_loss']:.2f}, "
        f"at {summary['tokens_per_s']:,.0f} tokens/s on this CPU."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 1. Number formats


def formats(out: Path, quick: bool = False) -> list[Path]:
    """Range and precision of each float format, bit by bit, and the update that vanishes."""
    print(formats_table())
    names = [n for n in ("fp32", "bf16", "fp16", "fp8 e4m3fn") if n not in missing_formats()]
    rows = []
    for name in names:
        b = decode_bits(0.1, name)
        rows.append(
            [
                name,
                b.sign,
                b.exponent_bits,
                b.mantissa_bits,
                f"{b.stored_value:.10g}",
                f"{relative_error(0.1, name):.1e}",
            ]
        )
    _show(
        "0.1 stored in each format", rows, ["format", "sign", "exponent", "mantissa", "stored", "rel. error"]
    )

    w, updates = 1.0, [1e-2, 1e-3, 1e-4, 1e-6, 1e-8]
    trio = ("fp32", "bf16", "fp16")
    rows = [
        [name, f"{smallest_update_that_survives(w, name):.3g}"]
        + ["lost" if update_is_lost(w, u, name) else "kept" for u in updates]
        for name in trio
    ]
    _show(
        f"w = {w} + update: kept or lost?", rows, ["format", "smallest kept"] + [f"+{u:g}" for u in updates]
    )

    plt = _pyplot()
    table = [r for r in format_rows() if r["bits"] <= 32]  # fp64's range would flatten the others
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(table):
        low = r["smallest subnormal"] or r["smallest normal"]
        ax.barh(i, math.log2(r["max"]) - math.log2(low), left=math.log2(low), color="tab:blue", alpha=0.7)
        ax.text(math.log2(r["max"]) + 2, i, f"eps {r['eps']:.2g}", va="center", fontsize=8)
    ax.set_yticks(range(len(table)), [r["name"] for r in table])
    ax.set_xlabel("log2 of the magnitude: smallest (subnormal) ... largest")
    ax.set_title("Range of each 32-bit and smaller format (eps: precision near 1.0)")
    ax.set_xlim(right=ax.get_xlim()[1] + 40)
    figures = [_save(fig, out, "formats_range.png")]

    grid = np.logspace(-10, -1, 37 if quick else 145)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for k, name in enumerate(trio):
        kept = [0 if update_is_lost(w, u, name) else 1 for u in grid]
        ax.step(grid, np.array(kept) + 0.04 * k, where="post", label=name)
        ax.axvline(smallest_update_that_survives(w, name), color=f"C{k}", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["lost", "kept"])
    ax.set_xlabel(f"update added to w = {w}")
    ax.set_title("Does w + update change w?")
    ax.legend()
    figures.append(_save(fig, out, "formats_lost_update.png"))

    facts = {r["name"]: r for r in format_rows()}
    _conclude(
        f"bf16 has fp32's range (max {facts['bf16']['max']:.3g}; fp16 overflows above "
        f"{facts['fp16']['max']:g}) but only {facts['bf16']['mantissa bits']} mantissa bits: an update "
        f"below {smallest_update_that_survives(w, 'bf16'):.3g} to a weight of {w} is lost in bf16 "
        f"(fp16: {smallest_update_that_survives(w, 'fp16'):.3g}, fp32: "
        f"{smallest_update_that_survives(w, 'fp32'):.3g})."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 2. Memory anatomy


def memory(out: Path, quick: bool = False) -> list[Path]:
    """The four costs of a training step, predicted from the config and measured on a real step."""
    _show("Static memory with AdamW, bytes per parameter", static_table())
    s = _scale(quick)
    cfg = get_config(s.preset)
    predicted = estimate(cfg, s.batch, s.ctx, "fp32", device="cpu")
    measured = measure(cfg, s.batch, s.ctx, "fp32", device="cpu")
    got = dict(measured.rows())
    rows = [
        [name, _mib(p), _mib(got[name]), f"{100 * (p - got[name]) / max(got[name], 1):+.1f}"]
        for name, p in predicted.rows()
        if name in got
    ]
    _show(
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
                _mib(estimate(c, 8, c.ctx, "fp32", device="cpu").activations),
                _mib(activations_rule_of_thumb(c, 8, c.ctx)),
                _mib(estimate(c, 8, c.ctx, "bf16").activations),
                _mib(activations_korthikanti(c, 8, c.ctx)),
            ]
        )
    _show(
        "Activations at batch 8, MiB: this model vs the textbook formulas",
        rows,
        ["preset", "ctx", "ours fp32", "10 x BTCL x 4 B", "ours bf16 (CUDA)", "Korthikanti (16-bit)"],
    )

    plt = _pyplot()
    terms = ("weights", "gradients", "optimizer", "activations")
    fig, axes = plt.subplots(1, len(COURSE_PRESETS), figsize=(10, 3.4))
    for ax, preset in zip(axes, COURSE_PRESETS):
        c = get_config(preset)
        precisions = ("fp32", "bf16", "bf16-pure")
        bottom = np.zeros(len(precisions))
        for term in terms:
            values = np.array(
                [getattr(estimate(c, 8, c.ctx, p, device="cpu"), term) / GIB for p in precisions]
            )
            ax.bar(precisions, values, bottom=bottom, label=term)
            bottom += values
        ax.set_title(f"{preset}, batch 8, ctx {c.ctx}")
        ax.set_ylabel("GiB (predicted)")
    axes[0].legend(fontsize=8)
    figures = [_save(fig, out, "memory_breakdown.png")]

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
    figures.append(_save(fig, out, "memory_vs_batch.png"))

    error = 100 * (predicted.peak - measured.peak) / measured.peak
    _conclude(
        f"{s.preset} at batch {s.batch}, ctx {s.ctx}, fp32: predicted peak {_mib(predicted.peak)} MiB, "
        f"measured {_mib(measured.peak)} MiB ({error:+.1f}%); static memory is "
        f"{static_bytes_per_param('fp32')['total']} B/param and activations are "
        f"{measured.activations / measured.peak:.0%} of the peak."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 3. Mixed precision with autocast


def autocast(out: Path, quick: bool = False) -> list[Path]:
    """What autocast changes (the matmuls, the activations) and what it keeps (fp32 weights, the loss)."""
    s = _scale(quick)
    cfg = get_config(s.preset)
    precisions = ("fp32", "bf16", "bf16-pure")
    saved = {p: measure(cfg, s.batch, s.ctx, p, device="cpu").activations for p in precisions}
    rows = [
        [
            p,
            short_name(param_dtype(p)),
            short_name(probe_precision(CPU, p).observed_dtype),
            static_bytes_per_param(p)["total"],
            _mib(saved[p]),
        ]
        for p in precisions
    ]
    _show(
        f"{s.preset}, batch {s.batch}, ctx {s.ctx}",
        rows,
        ["precision", "weights", "matmul output", "static B/param", "activations MiB (measured)"],
    )

    t = _low_precision_training_scale(quick)
    runs = {p: _train(t, quick, precision=p) for p in precisions}
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
    _show(
        f"{t.preset}, {t.steps} training steps, same seed and batches",
        rows,
        ["precision", "train loss", "val loss", "max |loss - fp32 loss|", "tokens/s"],
    )

    plt = _pyplot()
    fig, (ax, ax_gap) = plt.subplots(1, 2, figsize=(9, 3.4))
    for p, r in runs.items():
        steps = range(1, len(r.losses) + 1)
        ax.plot(steps, r.losses, label=p)
        ax_gap.plot(steps, [a - b for a, b in zip(r.losses, base)], label=p)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(f"{t.preset}: train loss, same seed and batches")
    ax.legend()
    ax_gap.axhline(0, color="gray", linewidth=1)
    ax_gap.set_xlabel("step")
    ax_gap.set_ylabel("loss - fp32 loss")
    ax_gap.set_title("Zoomed in: the difference from fp32")
    ax_gap.legend()
    figures = [_save(fig, out, "autocast_loss.png")]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.bar(precisions, [saved[p] / MIB for p in precisions], color=["tab:blue", "tab:orange", "tab:green"])
    ax.set_ylabel("activations kept for backward, MiB")
    ax.set_title(f"{s.preset}, batch {s.batch}, ctx {s.ctx} (measured)")
    figures.append(_save(fig, out, "autocast_memory.png"))

    gap = max(abs(a - b) for a, b in zip(runs["bf16"].losses, base))
    _conclude(
        f"bf16 autocast followed fp32's loss within {gap:.3f} over {t.steps} steps and kept "
        f"{saved['bf16'] / saved['fp32']:.0%} of fp32's activation bytes; its weights stay fp32 "
        f"({static_bytes_per_param('bf16')['total']} B/param), only bf16-pure halves them "
        f"({static_bytes_per_param('bf16-pure')['total']} B/param)."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 4. fp16 and the GradScaler


def scaler(out: Path, quick: bool = False) -> list[Path]:
    """fp16 gradients underflow to zero; scaling the loss moves them into fp16's range."""
    facts = {r["name"]: r for r in format_rows()}
    fp16 = facts["fp16"]
    _show(
        "fp16's range",
        [[k, f"{fp16[k]:g}"] for k in ("smallest subnormal", "smallest normal", "max")],
        ["fp16", "value"],
    )

    s = _scale(quick)
    model = GPT(get_config(s.preset), seed=0)
    x, y = _data(quick).get_batch("train", s.batch, s.ctx, torch.Generator().manual_seed(0))
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
    _show(
        f"{grads.numel():,} gradient values of {s.preset} stored in fp16 after scaling the loss",
        rows,
        ["loss scale", "% flushed to 0", "% subnormal", "% overflow to inf"],
    )

    t = _low_precision_training_scale(quick)
    runs = {p: _train(t, quick, precision=p) for p in ("fp32", "fp16")}
    history = runs["fp16"].history
    every = max(1, len(history) // 6)
    rows = [
        [
            r["step"],
            f"{runs['fp32'].losses[r['step'] - 1]:.3f}",
            f"{r['loss']:.3f}",
            f"{r['scale']:g}",
            r["skipped"],
        ]
        for r in history[::every]
    ]
    _show(
        f"{t.preset}: fp16 autocast + GradScaler (minigpt.train)",
        rows,
        ["step", "fp32 loss", "fp16 loss", "scale", "skipped"],
    )

    plt = _pyplot()
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
    figures = [_save(fig, out, "scaler_histogram.png")]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for p, r in runs.items():
        ax.plot([h["step"] for h in r.history], r.losses, label=p + (" + GradScaler" if p == "fp16" else ""))
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title("fp16 with loss scaling trains like fp32")
    ax.legend()
    figures.append(_save(fig, out, "scaler_loss.png"))

    gap = max(abs(a - b) for a, b in zip(runs["fp16"].losses, runs["fp32"].losses))
    _conclude(
        f"unscaled, {lost[1]:.2%} of these gradient values flush to zero in fp16 and {subnormal[1]:.1%} "
        f"lose precision as subnormals; scaled by 2^16, {lost[2**16]:.2%} and {subnormal[2**16]:.1%}. "
        f"fp16 + GradScaler followed fp32's loss within {gap:.3f} over {t.steps} steps "
        f"({runs['fp16'].skipped_steps} skipped)."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 5. Gradient accumulation


def accumulation(out: Path, quick: bool = False) -> list[Path]:
    """Same gradients as one big batch, in a fraction of the memory, for some speed."""
    s = _scale(quick)
    cfg, effective, ctx = get_config(s.preset), 16, (16 if quick else 32)
    model = GPT(cfg, seed=0)
    x, y = _data(quick).get_batch("train", effective, ctx, torch.Generator().manual_seed(0))
    y = y.clone()
    for i in range(effective):  # padded sequences: the loss must count tokens, not average micro-batches
        y[i, ctx - (i * ctx) // (2 * effective) :] = IGNORE_INDEX

    def window_grads(micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss = forward_backward(model, list(zip(x.split(micro), y.split(micro))), CPU, "fp32")
        return loss, torch.cat([p.grad.flatten() for p in model.parameters()])

    accums = (1, 2, 4, 8, 16)
    _, reference = window_grads(effective)
    rows, difference = [], {}
    for accum in accums:
        loss, g = window_grads(effective // accum)
        difference[accum] = ((g - reference).abs().max() / reference.abs().max()).item()
        rows.append([accum, effective // accum, f"{loss:.5f}", f"{difference[accum]:.1e}"])
    _show(
        f"One window of {effective} sequences (some padded), split into micro-batches",
        rows,
        ["accum", "micro-batch", "window loss", "max |grad - grad(accum 1)| / max |grad|"],
    )

    mem = {a: measure(cfg, effective // a, ctx, "fp32", device="cpu") for a in accums}
    pred = {a: estimate(cfg, effective // a, ctx, "fp32", device="cpu") for a in accums}
    speed = {
        a: _train(s, quick, batch=effective // a, accum=a, ctx=ctx, steps=s.speed_steps).summary()[
            "tokens_per_s"
        ]
        for a in (1, 4, 16)
    }  # the median of steps 2-4
    rows = [
        [
            a,
            effective // a,
            _mib(pred[a].peak),
            _mib(mem[a].peak),
            _mib(mem[a].activations),
            f"{speed[a]:,.0f}" if a in speed else "",
        ]
        for a in accums
    ]
    _show(
        f"Effective batch {effective} at ctx {ctx}, fp32",
        rows,
        ["accum", "micro-batch", "predicted peak MiB", "measured peak MiB", "activations MiB", "tokens/s"],
    )

    plt = _pyplot()
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
    figures = [_save(fig, out, "accumulation.png")]

    _conclude(
        f"at effective batch {effective}, accum 16 (micro-batch 1) cut the peak from {_mib(mem[1].peak)} to "
        f"{_mib(mem[16].peak)} MiB ({mem[16].peak / mem[1].peak - 1:+.0%}) with the same gradients (max "
        f"relative difference {max(difference.values()):.1e}) at {speed[16] / speed[1]:.0%} of the tokens/s."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 6. Gradient checkpointing


def checkpointing(out: Path, quick: bool = False) -> list[Path]:
    """Each checkpointing mode: the activations it keeps and the time it costs, measured and predicted."""
    s = _scale(quick)
    if quick:
        s = dataclasses.replace(s, preset="tiny-deep")
    cfg = get_config(s.preset)
    segments = [f"{r.start}-{r.stop - 1}" for r in sqrt_segments(cfg.n_layer)]
    print(
        f"{s.preset}: {cfg.n_layer} blocks; sqrt checkpointing keeps the inputs of {len(segments)} "
        f"segments (blocks {', '.join(segments)})"
    )
    kept = {m: measure(cfg, s.batch, s.ctx, "fp32", m, device="cpu").activations for m in CHECKPOINTING_MODES}
    pred = {
        m: estimate(cfg, s.batch, s.ctx, "fp32", m, device="cpu").activations for m in CHECKPOINTING_MODES
    }
    speed = {
        m: _train(s, quick, checkpointing=m, steps=s.speed_steps).summary()["tokens_per_s"]
        for m in CHECKPOINTING_MODES
    }
    theory = {m: relative_step_time(cfg, s.ctx, m) for m in CHECKPOINTING_MODES}
    measured_time = {m: speed["none"] / speed[m] for m in CHECKPOINTING_MODES}
    rows = [
        [
            m,
            _mib(pred[m]),
            _mib(kept[m]),
            f"{kept[m] / kept['none']:.2f}",
            f"{theory[m]:.2f}",
            f"{measured_time[m]:.2f}",
        ]
        for m in CHECKPOINTING_MODES
    ]
    _show(
        f"{s.preset}, batch {s.batch}, ctx {s.ctx}, fp32",
        rows,
        [
            "mode",
            "predicted activations MiB",
            "measured MiB",
            "vs none",
            "time: FLOP model",
            "time: measured",
        ],
    )

    plt = _pyplot()
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(9, 3.4))
    xs = np.arange(len(CHECKPOINTING_MODES))
    ax_m.bar(xs - 0.2, [pred[m] / MIB for m in CHECKPOINTING_MODES], 0.4, label="predicted")
    ax_m.bar(xs + 0.2, [kept[m] / MIB for m in CHECKPOINTING_MODES], 0.4, label="measured")
    ax_m.set_ylabel("activations kept for backward, MiB")
    ax_t.bar(xs - 0.2, [theory[m] for m in CHECKPOINTING_MODES], 0.4, label="FLOP model")
    ax_t.bar(xs + 0.2, [measured_time[m] for m in CHECKPOINTING_MODES], 0.4, label="measured")
    ax_t.set_ylabel("step time / no checkpointing")
    for ax, title in ((ax_m, "Memory"), (ax_t, "Time")):
        ax.set_xticks(xs, CHECKPOINTING_MODES)
        ax.set_title(title)
        ax.legend(fontsize=8)
    figures = [_save(fig, out, "checkpointing.png")]

    _conclude(
        f"full checkpointing kept {kept['full'] / kept['none']:.0%} of the activations for "
        f"{measured_time['full']:.2f}x the step time (FLOP model {theory['full']:.2f}x); selective kept "
        f"{kept['selective'] / kept['none']:.0%} for {measured_time['selective']:.2f}x."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# 7. Planning a run


def plan_demo(out: Path, quick: bool = False) -> list[Path]:
    """The planner's choices for each preset on common hardware, and why, against the book's table."""
    t4 = plan("125m", "t4", PRESETS["125m"].ctx, 128)
    print(t4.explain())
    hardware = ("cpu", "t4") if quick else ("cpu", "mps", "t4", "a100-80")
    rows = recommended_table(hardware=hardware)
    _show("Recommended settings, computed (effective batch 128, each preset's full ctx)", rows)
    book = compare_with_book()
    _show("The book's table against the planner", [{k: v for k, v in r.items() if k != "why"} for r in book])
    for r in book:
        if not r["agrees"]:
            print(f"  {r['preset']} on {r['hardware']}: {r['why']}")
    here = detect_hardware()
    mine = plan("30m", here, PRESETS["30m"].ctx, 32)
    print(
        f"\nThis machine ({here.name}, {here.memory_bytes / GIB:.1f} GiB): 30m at ctx {mine.ctx}, effective "
        f"batch 32 -> {mine.precision_label}, micro-batch {mine.micro_batch} x accum {mine.accum}, "
        f"checkpointing {mine.checkpointing}" + ("" if mine.fits else f" - does not fit: {mine.lever}")
    )

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{r['preset']}\n{r['hardware']}" for r in rows]
    colors = ["tab:green" if r["fits"] else "tab:red" for r in rows]
    ax.bar(labels, [100 * r["peak_GiB"] / r["usable_GiB"] for r in rows], color=colors)
    ax.axhline(100, color="black", linestyle="--", linewidth=1)
    ax.set_ylabel("predicted peak, % of usable memory")
    ax.set_title("The plan for each preset x hardware (green: fits)")
    figures = [_save(fig, out, "plan.png")]

    _conclude(
        f"125m at ctx {t4.ctx} on a {t4.hardware.name}: {t4.precision_label}, micro-batch {t4.micro_batch} "
        f"x accum {t4.accum}, checkpointing {t4.checkpointing}; predicted peak "
        f"{t4.predicted_peak_bytes / GIB:.2f} of {t4.usable_bytes / GIB:.2f} GiB usable."
    )
    return figures


# ----------------------------------------------------------------------------------------------------------
# Running them

DEMOS: dict[str, Callable[[Path, bool], list[Path]]] = {
    "train": train_demo,
    "formats": formats,
    "memory": memory,
    "autocast": autocast,
    "scaler": scaler,
    "accumulation": accumulation,
    "checkpointing": checkpointing,
    "plan": plan_demo,
}
DEMO_CHOICES = (*DEMOS, "all")


def run_demo(name: str, out: Path = Path("demo_out"), quick: bool = False) -> int:
    """Run the demo called `name` ("all": every demo in order), saving its figures in `out`; 0 on success."""
    if name not in DEMO_CHOICES:
        raise ValueError(f"unknown demo {name!r}; choose one of: {', '.join(DEMO_CHOICES)}")
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        print(
            "minigpt demo: error: the demos draw their figures with matplotlib, which is not installed; "
            "pip install matplotlib (or pip install -e '.[course]')",
            file=sys.stderr,
        )
        return 2
    out = Path(out)
    t_all = time.perf_counter()
    for demo in DEMOS if name == "all" else [name]:
        print(f"\n{'=' * 20} demo: {demo} {'=' * 20}\n{DEMOS[demo].__doc__.splitlines()[0]}\n")
        t0 = time.perf_counter()
        DEMOS[demo](out, quick)
        print(f"({demo}: {time.perf_counter() - t0:.0f} s)")
    if name == "all":
        print(f"\nall demos: {time.perf_counter() - t_all:.0f} s; figures in {out}/")
    return 0
