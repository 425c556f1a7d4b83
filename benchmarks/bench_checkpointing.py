"""4. Gradient checkpointing: time and saved activations of full, sqrt and selective against none, and theory.

Time: minigpt.train.train() steps, the modes taking turns in rounds (a change of load hits them all).
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
    main_for,
    median_spread,
    pyplot,
    save_figure,
    size_for,
    table,
    timed_train_steps,
    token_data,
)
from minigpt.checkpointing import CHECKPOINTING_MODES
from minigpt.data import TokenData
from minigpt.memory import estimate, measure
from minigpt.model import get_config
from minigpt.plan import relative_step_time
from minigpt.train import TrainConfig

MAX_TIME = {"full": 1.40, "selective": 1.10}  # step time over no checkpointing
MAX_ACTIVATIONS = 0.75  # "a clear memory saving": at least a quarter fewer saved bytes than none
SIZES = {
    False: dict(preset="10m", batch=8, ctx=256, precision="fp32", rounds=2, steps=3),
    True: dict(preset="tiny-deep", batch=2, ctx=32, precision="fp32", rounds=1, steps=1),
    "cuda": dict(preset="125m", batch=32, ctx=1024, precision="bf16", rounds=3, steps=5),
}


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    cfg_model = get_config(size["preset"])
    times: dict[str, list[float]] = {mode: [] for mode in CHECKPOINTING_MODES}
    for _ in range(size["rounds"]):
        for mode in CHECKPOINTING_MODES:
            cfg = TrainConfig(
                preset=size["preset"],
                precision=size["precision"],
                batch=size["batch"],
                ctx=size["ctx"],
                checkpointing=mode,
                device=str(device),
            )
            times[mode] += timed_train_steps(cfg, data, warmup=1, steps=size["steps"])
            print(mode, [f"{t:.3f}" for t in times[mode]], file=sys.stderr, flush=True)
    args = (cfg_model, size["batch"], size["ctx"], size["precision"])
    saved = {
        mode: measure(*args, checkpointing=mode, device=device).activations for mode in CHECKPOINTING_MODES
    }
    predicted = {
        mode: estimate(*args, checkpointing=mode, device=device).activations for mode in CHECKPOINTING_MODES
    }

    base_time = median_spread(times["none"])[0]
    rows, checks, plot = [], [], []
    for mode in CHECKPOINTING_MODES:
        med, spread = median_spread(times[mode])
        time_ratio, act_ratio = med / base_time, saved[mode] / saved["none"]
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

    body = "\n\n".join(
        [
            f"Preset {size['preset']}, {size['precision']}, batch {size['batch']}, ctx {size['ctx']}. "
            f"Time: median of {size['rounds'] * size['steps']} steps ({size['rounds']} rounds of "
            f"{size['steps']}, each after a "
            "warm-up step, the modes taking turns). Theory: time from the FLOP model of "
            "`minigpt.plan.relative_step_time` (full and sqrt recompute each block's forward once; selective "
            "only elementwise work, assumed a fixed share), activations from `minigpt.memory.estimate()`.",
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
        ax.bar([x - 0.2 for x in xs], [p[i] for p in plot], 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [p[i + 1] for p in plot], 0.4, label="theory")
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
