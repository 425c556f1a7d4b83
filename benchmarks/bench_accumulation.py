"""5. Gradient accumulation: time per optimizer step and memory at a fixed effective batch, accum 1 ... 16.

Time: minigpt.train.train() steps. Memory: minigpt.memory.measure() of one micro-batch step. With
accumulation the gradients persist between micro-batches (they are in the static memory) and each
micro-batch's activations are freed by its backward, so a window's peak is one micro-batch's peak.

    python -m benchmarks.bench_accumulation [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import (
    MIB,
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
from minigpt.data import TokenData
from minigpt.memory import estimate, measure
from minigpt.model import get_config
from minigpt.train import TrainConfig

ACCUMS = (1, 2, 4, 8, 16)
SIZES = {
    False: dict(preset="10m", effective_batch=16, ctx=128, precision="fp32", warmup=1, steps=4),
    True: dict(preset="tiny", effective_batch=16, ctx=16, precision="fp32", warmup=1, steps=1),
    "cuda": dict(preset="125m", effective_batch=32, ctx=1024, precision="bf16", warmup=1, steps=4),
}


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), size_for(SIZES, device, quick)
    data = data or token_data(quick)
    model_cfg, ctx, eff = get_config(size["preset"]), size["ctx"], size["effective_batch"]
    rows, plot = [], []
    for accum in ACCUMS:
        micro = eff // accum
        cfg = TrainConfig(
            preset=size["preset"],
            precision=size["precision"],
            batch=micro,
            accum=accum,
            ctx=ctx,
            device=str(device),
        )
        med, spread = median_spread(timed_train_steps(cfg, data, size["warmup"], size["steps"]))
        measured = measure(model_cfg, micro, ctx, size["precision"], device=device)
        predicted = estimate(model_cfg, micro, ctx, size["precision"], device=device)
        rows.append(
            [
                accum,
                micro,
                f"{1000 * med:.1f}",
                f"{spread:.1f}",
                f"{eff * ctx / med:,.0f}",
                f"{measured.static / MIB:.1f}",
                f"{measured.activations / MIB:.1f}",
                f"{measured.peak / MIB:.1f}",
                f"{predicted.peak / MIB:.1f}",
            ]
        )
        plot.append((accum, med, measured.peak / MIB, measured.activations / MIB, predicted.peak / MIB))
        print(rows[-1], file=sys.stderr, flush=True)

    body = "\n\n".join(
        [
            f"Preset {size['preset']}, {size['precision']}, ctx {ctx}, effective batch {eff} sequences "
            f"= micro-batch x accum. Time: median of {size['steps']} optimizer steps of "
            "`minigpt.train.train()` "
            f"after {size['warmup']} warm-up; memory: `minigpt.memory.measure()` of one micro-batch "
            "(static = weights + grads + AdamW moments, the same for every row).",
            table(
                rows,
                [
                    "accum",
                    "micro-batch",
                    "ms per optimizer step",
                    "spread %",
                    "tokens/s",
                    "static MiB",
                    "activations MiB",
                    "peak MiB",
                    "predicted peak MiB",
                ],
            ),
            "No target: the table shows the trade. Memory falls with the micro-batch while the work per "
            "optimizer step stays the same; time per step grows where small micro-batches use the machine "
            "less well.",
        ]
    )
    plt = pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = [str(p[0]) for p in plot]
    ax_t.bar(labels, [1000 * p[1] for p in plot], color="tab:blue")
    ax_t.set_xlabel("accum (micro-batch = effective batch / accum)")
    ax_t.set_ylabel("ms per optimizer step")
    ax_t.set_title(f"Time at effective batch {eff}")
    ax_m.plot(labels, [p[2] for p in plot], "o-", label="measured peak")
    ax_m.plot(labels, [p[4] for p in plot], "x--", label="predicted peak")
    ax_m.plot(labels, [p[3] for p in plot], "s-", label="measured activations")
    ax_m.set_xlabel("accum")
    ax_m.set_ylabel("MiB")
    ax_m.set_title("Memory")
    ax_m.legend()
    figure = save_figure(fig, out, "accumulation.png")
    return Section("5. Gradient accumulation", body, [], [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
