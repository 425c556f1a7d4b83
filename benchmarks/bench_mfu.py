"""2. Model FLOPs utilization per precision: achieved FLOP/s of minigpt.train over this machine's matmul peak
in the same precision (bf16 training against the bf16 matmul peak, fp32 against fp32).

FLOPs per token = 3 x the forward FLOPs of minigpt.plan.forward_flops_per_token (backward = 2 forwards):
6 N for the weight matrices (the tied output head included) plus the causal attention scores and
mixing, 3 x 2 x 2 x C x ctx/2 per layer. The peak: square matmuls in the same dtype, at the size that was
fastest up front. One such matmul is timed after every training step, so that step and peak are measured
under the same load (on a shared machine, load drifts by tens of percent within minutes); MFU is the
median over steps of each step's FLOP/s over the matmul FLOP/s measured right after it. Where a CPU target
is missed, a torch.profiler profile of the same run says where the time went instead.

    python -m benchmarks.bench_mfu [--quick] [--device cpu]
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.benchlib import (
    Check,
    Section,
    bf16_is_emulated,
    main_for,
    matmul_peak,
    matmul_seconds,
    median_spread,
    profile_markdown,
    pyplot,
    save_figure,
    size_for,
    square_operands,
    step_profile,
    table,
    timed_train_steps,
    token_data,
)
from minigpt.data import TokenData
from minigpt.model import get_config
from minigpt.plan import forward_flops_per_token
from minigpt.precision import autocast_dtype, param_dtype
from minigpt.style import precision_color
from minigpt.train import TrainConfig

# On a CPU, for 30m and 125m at ctx 256, in each precision the CPU runs natively (bf16 only with bf16
# instructions: emulated bf16 has no peak worth dividing by). bf16's is lower: its matmuls are so fast
# (4-5x fp32 on AMX or avx512_bf16) that the same elementwise work, norms and AdamW weigh 4-5x more.
TARGETS = {"fp32": 0.70, "bf16": 0.50}
SIZES = {
    False: dict(
        runs=(("30m", 8), ("125m", 4)),
        precisions=("fp32", "bf16"),
        ctx=256,
        warmup=2,
        steps=8,
        peak_sizes=(1024, 2048, 4096),
        peak_repeats=5,
    ),
    True: dict(
        runs=(("tiny", 2),),
        precisions=("fp32", "bf16"),
        ctx=32,
        warmup=1,
        steps=1,
        peak_sizes=(128,),
        peak_repeats=2,
    ),
    "cuda": dict(
        runs=(("30m", 32), ("125m", 32)),
        precisions=("fp32", "bf16"),
        ctx=512,
        warmup=2,
        steps=8,
        peak_sizes=(4096, 8192),
        peak_repeats=5,
    ),
}


def flops_per_token(preset: str, ctx: int) -> float:
    """Training FLOPs per token: forward + backward (2 forwards) of minigpt.plan's forward count."""
    return 3 * sum(forward_flops_per_token(get_config(preset), ctx).values())


def matmul_dtype(precision: str) -> torch.dtype:
    """The dtype the matmuls of a precision mode run in (autocast's, else the weights')."""
    return autocast_dtype(precision) or param_dtype(precision)


def steps_and_peaks(cfg: TrainConfig, data: TokenData, warmup: int, steps: int, n: int) -> tuple[list, list]:
    """(seconds of each timed train() step, matmul FLOP/s of one n x n matmul timed right after it)."""
    a, b = square_operands(n, matmul_dtype(cfg.precision), torch.device(cfg.device))
    peaks: list[float] = []
    times = timed_train_steps(cfg, data, warmup, steps, between=lambda: peaks.append(2 * n**3 / matmul_seconds(a, b)))
    return times, peaks[warmup : warmup + steps]


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    skipped = ""
    if bf16_is_emulated(device) and not quick:  # an 8192^2 bf16 matmul alone would take minutes here
        size = {**size, "precisions": tuple(p for p in size["precisions"] if p != "bf16")}
        skipped = (
            "bf16 skipped: this CPU has no bf16 instructions, so bf16 matmuls are emulated (about 15x "
            "slower than fp32) and have no peak worth dividing by. "
        )
    # A GPU reaches its peak only on larger matmuls than a CPU does.
    sizes = (4096, 8192) if device.type == "cuda" and not quick else size["peak_sizes"]
    peaks = {p: matmul_peak(matmul_dtype(p), device, sizes, size["peak_repeats"]) for p in size["precisions"]}
    peak_rows = [
        [
            p,
            str(matmul_dtype(p)).removeprefix("torch."),
            f"{peaks[p]['flops'] / 1e9:,.1f}",
            f"{peaks[p]['spread']:.1f}",
            f"{peaks[p]['size']}",
        ]
        for p in size["precisions"]
    ]
    rows, checks, bars, profiles = [], [], [], []
    ctx = size["ctx"]
    compile_modes = (False,) if quick else (False, True)  # compiling takes tens of seconds: not in a quick check
    for preset, batch in size["runs"]:
        for precision in size["precisions"]:
            mfus = {}  # compile on/off -> (MFU, step spread %)
            for compile in compile_modes:
                cfg = TrainConfig(
                    preset=preset, precision=precision, batch=batch, ctx=ctx, device=str(device), compile=compile
                )
                times, step_peaks = steps_and_peaks(cfg, data, size["warmup"], size["steps"], peaks[precision]["size"])
                med, spread = median_spread(times)
                tokens_per_s = batch * ctx / med
                step_flops = [batch * ctx * flops_per_token(preset, ctx) / t for t in times]
                mfus[compile] = (statistics.median(f / peak for f, peak in zip(step_flops, step_peaks)), spread)
                rows.append(
                    [
                        preset,
                        precision,
                        "on" if compile else "off",
                        batch,
                        f"{flops_per_token(preset, ctx) / 1e6:,.1f}",
                        f"{tokens_per_s:,.0f}",
                        f"{spread:.1f}",
                        f"{tokens_per_s * flops_per_token(preset, ctx) / 1e9:,.1f}",
                        f"{statistics.median(step_peaks) / 1e9:,.1f}",
                        f"{100 * mfus[compile][0]:.1f}",
                    ]
                )
                label = f"{preset}\n{precision}{' comp.' if compile else ''}"
                bars.append((label, 100 * mfus[compile][0], precision_color(precision)))
                print(rows[-1], file=sys.stderr, flush=True)
            # judged at minigpt.train's fastest setting (nanoGPT reports its MFU with torch.compile on)
            best = max(mfus, key=lambda c: mfus[c][0])
            (mfu, spread), target = mfus[best], TARGETS.get(precision, 0.0)
            if device.type == "cpu" and precision in TARGETS:
                setting = "compiled" if best else "eager"
                checks.append(
                    Check(
                        f"{preset} {precision} at ctx {ctx} on the CPU: MFU >= {target:.0%} of the {precision} peak",
                        f"{mfu:.1%} ({setting}, step spread {spread:.1f}%)",
                        mfu >= target,
                    )
                )
                if mfu < target and not quick:
                    cfg = replace(cfg, compile=False)
                    title = f"{preset} {precision} (best MFU {mfu:.1%}, {setting}; the profile is of the eager step)"
                    profile = step_profile(cfg, data)
                    # The ceiling: the step's FLOPs over the time of its matmuls and attention alone, as if every
                    # other op took no time. Below the target, no amount of trimming elementwise work reaches it.
                    step_flop = batch * ctx * flops_per_token(preset, ctx)
                    ceiling = step_flop / (profile["matmul_ms"] / 1e3) / peaks[precision]["flops"]
                    ceiling_text = (
                        f"Its matmuls and attention alone took {profile['matmul_ms']:,.0f} ms per step: even if "
                        f"every other op took no time, the step would reach {ceiling:.0%} of the {precision} peak"
                        + (
                            f", below the {target:.0%} target: the model's matmul shapes and its attention run "
                            f"slower than the square {peaks[precision]['size']}^2 matmul the peak was measured on."
                            if ceiling < target
                            else f", above the {target:.0%} target: the time outside matmuls is what misses it."
                        )
                    )
                    profiles.append(profile_markdown(title, profile, ceiling_text))

    body = "\n\n".join(
        [
            skipped + "Matmul peak of this machine up front (square n x n matmuls, best size's median); the "
            "size n is the one timed again after every training step:",
            table(peak_rows, ["precision", "matmul dtype", "peak GFLOP/s", "spread %", "n"]),
            f"Training at ctx {ctx} ({size['warmup']} warm-up steps, median of {size['steps']} timed steps of "
            "`minigpt.train.train()`, each followed by one n x n matmul; MFU = median over steps of the step's "
            "FLOP/s over that matmul's), eager and with `compile=True` (compilation happens in the warm-up "
            "steps). The CPU targets (" + ", ".join(f"{p} {t:.0%}" for p, t in TARGETS.items()) + ") are judged "
            "at the faster of the two settings, as nanoGPT reports its MFU with torch.compile on:",
            table(
                rows,
                [
                    "preset",
                    "precision",
                    "compile",
                    "batch",
                    "MFLOP/token",
                    "tokens/s",
                    "spread %",
                    "achieved GFLOP/s",
                    "peak between steps GFLOP/s",
                    "MFU %",
                ],
            ),
            *profiles,
        ]
    )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    for (precision, target), style in zip(TARGETS.items(), ("--", ":")):
        ax.axhline(100 * target, color="tab:red", linestyle=style, label=f"CPU target {precision} {target:.0%}")
    ax.set_ylabel("MFU % of measured matmul peak")
    ax.set_title(f"Model FLOPs utilization at ctx {ctx}")
    ax.legend()
    figure = save_figure(fig, out, "mfu.png")
    return Section("2. Model FLOPs utilization per precision", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
