"""3. Precision modes: time per step and measured memory (static + activations) of each precision mode.

Time: minigpt.train.train() steps. Memory: minigpt.memory.measure(), one real step with its tensors
counted (the same numbers on any device). Runs on the CPU, and on the GPU too when there is one.

    python -m benchmarks.bench_precision [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import (
    MIB,
    Section,
    bf16_is_emulated,
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
from minigpt.device import device_info
from minigpt.memory import estimate, measure
from minigpt.model import get_config
from minigpt.precision import PRECISIONS, PrecisionNotSupportedError, check_precision
from minigpt.style import precision_color
from minigpt.train import TrainConfig

SIZES = {
    False: dict(preset="10m", batch=8, ctx=256, warmup=1, steps=5),
    True: dict(preset="tiny", batch=2, ctx=32, warmup=1, steps=1),
    "cuda": dict(preset="125m", batch=8, ctx=1024, warmup=2, steps=10),
    # a CPU without bf16 instructions runs the 16-bit modes ~15x slower than fp32: a smaller step
    "emulated": dict(preset="10m", batch=2, ctx=256, warmup=1, steps=3),
}
HEADERS = [
    "device",
    "precision",
    "ms/step",
    "spread %",
    "tokens/s",
    "static MiB",
    "activations MiB",
    "static + act. MiB",
    "predicted MiB",
    "peak MiB",
]


def measure_precision(
    preset: str,
    batch: int,
    ctx: int,
    precision: str,
    device: torch.device,
    data: TokenData,
    warmup: int,
    steps: int,
) -> dict | None:
    """Time per step and measured memory of one precision mode; None if this device cannot run it."""
    try:
        check_precision(device, precision)
    except PrecisionNotSupportedError:
        return None
    cfg = TrainConfig(preset=preset, precision=precision, batch=batch, ctx=ctx, device=str(device))
    med, spread = median_spread(timed_train_steps(cfg, data, warmup, steps))
    measured = measure(get_config(preset), batch, ctx, precision, device=device)
    predicted = estimate(get_config(preset), batch, ctx, precision, device=device)
    return {
        "seconds": med,
        "spread": spread,
        "static": measured.static,
        "activations": measured.activations,
        "predicted": predicted.static + predicted.activations,
        "peak": measured.peak,
    }


def caveat(device: torch.device) -> str:
    """What CPU timings of the precision modes do and do not say, for this CPU."""
    cpu = device_info(torch.device("cpu"))
    bf16 = (
        f"this CPU has bf16 instructions ({cpu.note.removeprefix('bf16 hardware: ')}), so bf16 matmuls run natively"
        if cpu.bf16_is_fast
        else "this CPU has no bf16 instructions, so bf16 is emulated through fp32 and is slower than fp32"
    )
    return (
        f"**CPU caveat.** The memory columns hold on any device. The time columns are this CPU's and say "
        f"little about a GPU: {bf16}; fp16 on a CPU has no tensor cores to gain from, and the GradScaler "
        "adds an inf/NaN check and an unscale per step; the elementwise work (norms, RoPE, casts) is a "
        "larger share of a CPU step than of a GPU step. On a GPU, 16-bit autocast runs the matmuls on "
        "tensor cores; `make bench` fills the cuda rows when torch sees a GPU."
    )


def shape(device: torch.device, quick: bool) -> dict:
    """This benchmark's step on this device: smaller where the CPU emulates bf16."""
    return SIZES["emulated"] if bf16_is_emulated(device) and not quick else size_for(SIZES, device, quick)


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start = time.perf_counter()
    data = data or token_data(quick)
    devices = [device] + ([torch.device("cuda")] if device.type == "cpu" and torch.cuda.is_available() else [])
    rows, results = [], {}
    for dev in devices:
        size = shape(dev, quick)
        for precision in PRECISIONS:
            r = measure_precision(
                size["preset"],
                size["batch"],
                size["ctx"],
                precision,
                dev,
                data,
                size["warmup"],
                size["steps"],
            )
            results[(dev.type, precision)] = r
            if r is None:
                rows.append([dev.type, precision, "not supported on this device"] + [""] * 7)
            else:
                rows.append(
                    [
                        dev.type,
                        precision,
                        f"{1000 * r['seconds']:.1f}",
                        f"{r['spread']:.1f}",
                        f"{size['batch'] * size['ctx'] / r['seconds']:,.0f}",
                        f"{r['static'] / MIB:.1f}",
                        f"{r['activations'] / MIB:.1f}",
                        f"{(r['static'] + r['activations']) / MIB:.1f}",
                        f"{r['predicted'] / MIB:.1f}",
                        f"{r['peak'] / MIB:.1f}",
                    ]
                )
            print(rows[-1], file=sys.stderr, flush=True)
    if not any(d.type == "cuda" for d in devices):
        rows += [["cuda", p, "- (no GPU on this machine)"] + ["-"] * 7 for p in PRECISIONS]

    body = "\n\n".join(
        [
            "; ".join(
                f"{d.type}: preset {z['preset']}, batch {z['batch']}, ctx {z['ctx']}, time = median of "
                f"{z['steps']} steps of `minigpt.train.train()` after {z['warmup']} warm-up"
                for d in devices
                for z in [shape(d, quick)]
            )
            + "; memory: "
            "`minigpt.memory.measure()` (static = weights + grads + AdamW moments; activations = what "
            "autograd keeps for backward; peak = "
            "the step's high-water mark), predicted = `minigpt.memory.estimate()` static + activations.",
            table(rows, HEADERS),
            caveat(device) if device.type == "cpu" else "",
        ]
    )
    plt = pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(9, 3.4))
    measured = [(f"{d}\n{p}", r) for (d, p), r in results.items() if r is not None]
    labels = [m[0] for m in measured]
    colors = [precision_color(p) for (_, p), r in results.items() if r is not None]
    ax_t.bar(labels, [1000 * r["seconds"] for _, r in measured], color=colors)
    ax_t.set_ylabel("ms per step (median)")
    ax_t.set_title("Time per step")
    ax_m.bar(labels, [r["static"] / MIB for _, r in measured], label="static")
    ax_m.bar(
        labels,
        [r["activations"] / MIB for _, r in measured],
        bottom=[r["static"] / MIB for _, r in measured],
        label="activations",
    )
    ax_m.set_ylabel("MiB (measured)")
    ax_m.set_title("Memory")
    ax_m.legend()
    figure = save_figure(fig, out, "precision_modes.png")
    return Section("3. Precision modes", body, [], [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
