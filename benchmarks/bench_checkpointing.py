"""4. Gradient checkpointing: time and saved activations of full, sqrt and selective against none, and theory.

Time: minigpt.train.train_step (the step train() runs), the four modes taking turns step by step on the
same batch, so that a change of load on a shared machine hits every mode alike, and the order within a turn
rotating, so that no mode always runs right after the same other one; each mode's time ratio is the median
over turns of its time over none's time in the same turn.
Saved activations: minigpt.memory.measure(). Theory: minigpt.plan.relative_step_time (a FLOP model)
and minigpt.memory.estimate().

    python -m benchmarks.bench_checkpointing [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import (
    MIB,
    Check,
    Section,
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
from minigpt.memory import estimate, measure
from minigpt.model import get_config
from minigpt.plan import relative_step_time
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.step_time import SELECTIVE_RECOMPUTE_SHARE
from minigpt.style import mode_color
from minigpt.train import TrainConfig, build_step_state, train_step

MAX_TIME = {"full": 1.40, "selective": 1.10}  # step time over no checkpointing
MAX_ACTIVATIONS = 0.75  # "a clear memory saving": at least a quarter fewer saved bytes than none
SIZES = {
    False: dict(preset="10m", batch=8, ctx=256, precision="fp32", warmup=2, steps=16),
    True: dict(preset="tiny-deep", batch=2, ctx=32, precision="fp32", warmup=1, steps=2),
    "cuda": dict(preset="125m", batch=32, ctx=1024, precision="bf16", warmup=3, steps=15),
}


def interleaved_step_times(size: dict, data: TokenData, device: torch.device) -> dict[str, list[float]]:
    """Seconds per optimizer step for each checkpointing mode: one model per mode, the modes taking turns
    on the same batch every step (untimed warm-up turns first)."""
    model_cfg = get_config(size["preset"])
    states = {}
    for mode in CHECKPOINTING_MODES:
        cfg = TrainConfig(
            preset=size["preset"],
            precision=size["precision"],
            batch=size["batch"],
            ctx=size["ctx"],
            checkpointing=mode,
            device=str(device),
        )
        states[mode] = build_step_state(model_cfg, cfg, device)
    times: dict[str, list[float]] = {mode: [] for mode in CHECKPOINTING_MODES}
    gen = torch.Generator().manual_seed(0)
    for turn in range(size["warmup"] + size["steps"]):
        x, y = data.get_batch("train", size["batch"], size["ctx"], gen)
        shift = turn % len(CHECKPOINTING_MODES)  # who goes first rotates: on a CPU, the step before matters
        for mode in CHECKPOINTING_MODES[shift:] + CHECKPOINTING_MODES[:shift]:
            state = states[mode]
            start = clock(device)
            train_step(state, [(x, y)], device, size["precision"])
            if turn >= size["warmup"]:
                times[mode].append(clock(device) - start)
    return times


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    cfg_model = get_config(size["preset"])
    times = interleaved_step_times(size, data, device)
    args = (cfg_model, size["batch"], size["ctx"], size["precision"])
    saved = {mode: measure(*args, checkpointing=mode, device=device).activations for mode in CHECKPOINTING_MODES}
    predicted = {mode: estimate(*args, checkpointing=mode, device=device).activations for mode in CHECKPOINTING_MODES}

    rows, checks, plot = [], [], []
    for mode in CHECKPOINTING_MODES:
        med = median_spread(times[mode])[0]
        # the ratio within each turn, then the median over turns: drift in load cancels out
        time_ratio, spread = median_spread([t / t0 for t, t0 in zip(times[mode], times["none"])])
        if mode == "none":
            spread = median_spread(times["none"])[1]  # of its step times (its ratio is 1 by definition)
        act_ratio = saved[mode] / saved["none"]
        theory_time, theory_act = (
            relative_step_time(cfg_model, size["ctx"], mode),
            predicted[mode] / predicted["none"],
        )
        verdicts = []
        if mode in MAX_TIME:
            ok = time_ratio <= MAX_TIME[mode]
            verdicts.append(f"time {'PASS' if ok else 'FAIL'}")
            checks.append(
                Check(
                    f"{mode}: step time <= {MAX_TIME[mode]:.2f}x none",
                    f"{time_ratio:.2f}x (theory {theory_time:.2f}x, spread {spread:.1f}%)",
                    ok,
                )
            )
        if mode != "none":
            ok = act_ratio <= MAX_ACTIVATIONS
            verdicts.append(f"memory {'PASS' if ok else 'FAIL'}")
            checks.append(
                Check(
                    f"{mode}: saved activations <= {MAX_ACTIVATIONS:.2f}x none (a clear saving)",
                    f"{act_ratio:.2f}x (theory {theory_act:.2f}x)",
                    ok,
                )
            )
        rows.append(
            [
                mode,
                f"{1000 * med:.1f}",
                f"{spread:.1f}",
                f"{time_ratio:.2f}",
                f"{theory_time:.2f}",
                f"{saved[mode] / MIB:.1f}",
                f"{act_ratio:.2f}",
                f"{theory_act:.2f}",
                ", ".join(verdicts),
            ]
        )
        plot.append((mode, time_ratio, theory_time, act_ratio, theory_act))
    # the share of the blocks' forward that selective's measured ratio implies: the FLOP model's time grows
    # linearly with the share, by (relative time at share 1) - 1 = blocks' FLOP share / 3
    per_share = relative_step_time(cfg_model, size["ctx"], "selective", shares={"selective": 1.0}) - 1
    blocks = 3 * per_share
    selective = next(ratio for mode, ratio, *_ in plot if mode == "selective")
    implied_share = (selective - 1) / per_share

    body = "\n\n".join(
        [
            f"Preset {size['preset']}, {size['precision']}, batch {size['batch']}, ctx {size['ctx']}. "
            f"Time: {size['steps']} optimizer steps per mode after {size['warmup']} warm-up ones, the "
            "modes taking turns step by step on the same batch, in a rotating order; ms/step is each mode's "
            "median, the time ratio the median over turns of its step time over none's in the same turn "
            "(spread: of those ratios). Theory: time from the FLOP model of "
            "`minigpt.plan.relative_step_time` (full and sqrt recompute each block's forward once; selective "
            f"only elementwise work, at minigpt.step_time.SELECTIVE_RECOMPUTE_SHARE = {SELECTIVE_RECOMPUTE_SHARE} of "
            f"the blocks' forward, a share set from an earlier run of this section: this run's selective ratio "
            f"implies {implied_share:.2f}, the blocks being {blocks:.0%} of the FLOPs), activations from "
            "`minigpt.memory.estimate()`.",
            table(
                rows,
                [
                    "mode",
                    "ms/step",
                    "spread %",
                    "time ratio",
                    "theory",
                    "saved activations MiB",
                    "activation ratio",
                    "theory",
                    "targets",
                ],
            ),
        ]
    )
    plt = pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(9, 3.4))
    xs = range(len(plot))
    for ax, i, title in ((ax_t, 1, "step time / none"), (ax_m, 3, "saved activations / none")):
        colors = [mode_color(p[0]) for p in plot]  # the mode's colour; hatched: the theory
        ax.bar([x - 0.2 for x in xs], [p[i] for p in plot], 0.4, label="measured", color=colors)
        ax.bar(
            [x + 0.2 for x in xs], [p[i + 1] for p in plot], 0.4, label="theory", color=colors, alpha=0.45, hatch="//"
        )
        ax.set_xticks(list(xs), [p[0] for p in plot])
        ax.set_title(title)
    for mode, limit in MAX_TIME.items():
        ax_t.axhline(limit, color="tab:red", linestyle=":", linewidth=1)
        ax_t.text(len(plot) - 0.5, limit, f"{mode} target", ha="right", va="bottom", fontsize=8)
    ax_m.axhline(MAX_ACTIVATIONS, color="tab:red", linestyle=":", linewidth=1)
    ax_t.legend(loc="lower left")
    figure = save_figure(fig, out, "checkpointing.png")
    return Section("4. Gradient checkpointing", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
