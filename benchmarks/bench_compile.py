"""7. torch.compile as a lever: what it does to step time and to the activations a step keeps.

Two step states built by minigpt.train.build_step_state from the same config, one with compile=True,
take turns step by step on the same batches (train.train_step, the step train() runs); the time ratio is
taken within each turn, then the median over turns. Compilation happens in the first (untimed) step and
is reported on its own. Memory: the bytes autograd saves for backward in one forward, counted by
minigpt.memory's SavedTensorMeter (compiled kernels fuse elementwise ops, so fewer intermediates are
saved); on a GPU also the allocator's peak over one whole step.

    python -m benchmarks.bench_compile [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.benchlib import (
    MIB,
    Check,
    Section,
    bf16_is_emulated,
    clock,
    main_for,
    median_spread,
    pyplot,
    save_figure,
    size_for,
    table,
    token_data,
)
from minigpt.data import TokenData
from minigpt.memory import SavedTensorMeter
from minigpt.model import get_config
from minigpt.precision import autocast_context
from minigpt.train import StepState, TrainConfig, build_step_state, train_step, window_micro_batches

SIZES = {
    False: dict(preset="10m", precisions=("fp32", "bf16"), batch=8, ctx=256, warmup=2, turns=8),
    True: dict(preset="tiny", precisions=("fp32",), batch=2, ctx=32, warmup=1, turns=1),
    "cuda": dict(preset="125m", precisions=("fp32", "bf16"), batch=16, ctx=1024, warmup=3, turns=10),
}


def saved_activation_bytes(state: StepState, micro: list, device: torch.device, precision: str) -> int:
    """Bytes autograd keeps for backward after one forward of the first micro-batch (the step's forward)."""
    x, y = micro[0]
    meter = SavedTensorMeter(state.model)
    with meter, autocast_context(device, precision):
        _, loss = state.forward(x.to(device), y.to(device), reduction="sum")
    saved = sum(meter.alive().values())
    del loss  # frees the graph and what it saved
    return saved


def device_peak_bytes(state: StepState, micro: list, device: torch.device, cfg: TrainConfig) -> int | None:
    """The allocator's peak over one whole step (CUDA only; None elsewhere)."""
    if device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(device)
    train_step(state, micro, device, cfg.precision, cfg.grad_clip)
    return torch.cuda.max_memory_allocated(device)


def compare(cfg: TrainConfig, data: TokenData, warmup: int, turns: int) -> dict:
    """Eager and compiled steps taking turns on the same batches: times, compile time, memory."""
    device = torch.device(cfg.device)
    model_cfg = get_config(cfg.preset, dropout=cfg.dropout)
    states = {
        "eager": build_step_state(model_cfg, cfg, device),
        "compiled": build_step_state(model_cfg, replace(cfg, compile=True), device),
    }
    gen = torch.Generator().manual_seed(cfg.seed)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    first_step: dict[str, float] = {}
    for turn in range(warmup + turns):
        micro = window_micro_batches(data, cfg, gen)
        for name in ("eager", "compiled") if turn % 2 == 0 else ("compiled", "eager"):  # alternate who goes first
            t0 = clock(device)
            train_step(states[name], micro, device, cfg.precision, cfg.grad_clip)
            seconds = clock(device) - t0
            if turn == 0:
                first_step[name] = seconds  # the compiled one compiles here
            elif turn >= warmup:
                times[name].append(seconds)
    micro = window_micro_batches(data, cfg, gen)
    return {
        "times": times,
        "ratio": median_spread([c / e for e, c in zip(times["eager"], times["compiled"])]),
        "compile_s": first_step["compiled"] - first_step["eager"],
        "saved": {name: saved_activation_bytes(s, micro, device, cfg.precision) for name, s in states.items()},
        "peak": {name: device_peak_bytes(s, micro, device, cfg) for name, s in states.items()},
    }


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    precisions = [p for p in size["precisions"] if not (p == "bf16" and bf16_is_emulated(device))]
    skipped = [p for p in size["precisions"] if p not in precisions]
    rows, checks, bars = [], [], []
    for precision in precisions:
        cfg = TrainConfig(
            preset=size["preset"], precision=precision, batch=size["batch"], ctx=size["ctx"], device=str(device)
        )
        r = compare(cfg, data, size["warmup"], size["turns"])
        (ratio, spread), saved = r["ratio"], r["saved"]
        eager_ms, compiled_ms = (1e3 * median_spread(r["times"][n])[0] for n in ("eager", "compiled"))
        peak = r["peak"]
        rows.append(
            [
                precision,
                f"{r['compile_s']:.1f}",
                f"{eager_ms:,.0f}",
                f"{compiled_ms:,.0f}",
                f"{1 / ratio:.2f}x",
                f"{spread:.1f}",
                f"{saved['eager'] / MIB:,.1f}",
                f"{saved['compiled'] / MIB:,.1f}",
                f"{1 - saved['compiled'] / saved['eager']:.0%}",
                "-" if peak["eager"] is None else f"{peak['eager'] / MIB:,.0f} / {peak['compiled'] / MIB:,.0f}",
            ]
        )
        checks.append(
            Check(
                f"{precision}: the compiled forward saves no more activations than eager",
                f"{saved['compiled'] / MIB:,.1f} vs {saved['eager'] / MIB:,.1f} MiB",
                saved["compiled"] <= saved["eager"],
            )
        )
        bars.append((precision, eager_ms, compiled_ms, saved["eager"] / MIB, saved["compiled"] / MIB))
        print(f"compile: {precision}: speed-up {1 / ratio:.2f}x", file=sys.stderr, flush=True)
    headers = [
        "precision",
        "compile s (first step)",
        "eager ms/step",
        "compiled ms/step",
        "speed-up (median of turns)",
        "spread %",
        "eager saved MiB",
        "compiled saved MiB",
        "saved less",
        "allocator peak MiB eager / compiled",
    ]
    body = "\n\n".join(
        [
            f"Preset {size['preset']}, batch {size['batch']} x ctx {size['ctx']}, no checkpointing. Eager and "
            f"`TrainConfig(compile=True)` step states take turns on the same batches ({size['warmup']} warm-up "
            f"turns, then {size['turns']} timed); speed-up = median over turns of eager / compiled step time. "
            "Compile s = the compiled state's first step minus the eager one's. Saved MiB = what autograd keeps "
            "for backward after one forward (SavedTensorMeter)."
            + (f" {', '.join(skipped)} skipped: this CPU emulates it (no bf16 instructions)." if skipped else ""),
            table(rows, headers),
        ]
    )
    plt = pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(8, 3.4))
    xs = range(len(bars))
    for ax, (i, j), unit in ((ax_t, (1, 2), "ms per step"), (ax_m, (3, 4), "saved activations, MiB")):
        ax.bar([x - 0.2 for x in xs], [b[i] for b in bars], 0.4, label="eager", color="tab:gray")
        ax.bar([x + 0.2 for x in xs], [b[j] for b in bars], 0.4, label="torch.compile", color="tab:purple")
        ax.set_xticks(list(xs), [b[0] for b in bars])
        ax.set_ylabel(unit)
    ax_t.set_title("Step time")
    ax_m.set_title("Activations kept for backward")
    ax_m.legend()
    figure = save_figure(fig, out, "compile.png")
    return Section("7. torch.compile", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
