"""11. The loss head and the activations: --loss-chunks and --offload-activations, peak and step time per lever.

Per preset (10m at batch 8 x 256, its longest ctx; 125m at batch 8 x 1024), with bf16 autocast and full
checkpointing as the baseline: the baseline, then each lever alone, both, and all four of the round's memory
levers (with --optimizer adamw8bit --optimizer-in-backward). Peak: minigpt.memory.estimate() against
minigpt.memory.measure() (the real step, metered), and for the baseline and all four levers the peak RSS of
a fresh process minus its RSS before the step (the operating system's count, not the package's meters).
Time: train_step for every lever set in turns on the same batch, the order rotating; each ratio is the
median over turns of the set's step time over the baseline's in the same turn. Offloading's bandwidth: the
bytes it wrote and read back per step over the time it added.

    python -m benchmarks.bench_loss_offload [--quick] [--device cpu]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from benchmarks.benchlib import MIB, Check, Section, clock, main_for, median_spread, pyplot, save_figure, table
from minigpt.config import TrainConfig
from minigpt.data import TokenData
from minigpt.heap import MMAP_THRESHOLD_BYTES
from minigpt.memory import estimate, measure
from minigpt.memory.breakdown import widths
from minigpt.model import get_config
from minigpt.step import build_step_state, train_step

CHUNKS = 8
LEVER_SETS = {
    "baseline": {},
    "chunked loss": dict(loss_chunks=CHUNKS),
    "offload": dict(offload_activations=True),
    "both": dict(loss_chunks=CHUNKS, offload_activations=True),
    "all four": dict(loss_chunks=CHUNKS, offload_activations=True, optimizer="adamw8bit", optimizer_in_backward=True),
}
# Not one of the four: what the remaining fp32 weights (and their bf16 autocast copies) cost. Pure bf16 weights
# with no fp32 master copy and no stochastic rounding lose every update under half a bf16 step (chapter 1's lost
# update), so this row is a memory figure, not a recommended recipe; the planner never picks it.
BF16_WEIGHTS = "all four, bf16 weights"
LEVER_SETS[BF16_WEIGHTS] = dict(LEVER_SETS["all four"], precision="bf16-pure")
MIN_HEAD_REMOVED = 0.80  # the chunked loss removes at least this share of the loss head's bytes
MAX_CHUNKED_TIME = 1.10  # and costs at most this much step time
MAX_ALL_FOUR_PEAK = 1000 * MIB  # 125m at 8 x 1024 with all four levers
MAX_PEAK_ERROR = 0.02  # predicted against measured
SIZES = {
    False: [
        dict(preset="10m", batch=8, ctx=256, warmup=1, steps=6),
        dict(preset="125m", batch=8, ctx=1024, warmup=1, steps=2),
    ],
    True: [dict(preset="tiny", batch=2, ctx=32, warmup=1, steps=1)],
}
PRECISION, MODE = "bf16", "full"


def _train_config(size: dict, levers: dict) -> TrainConfig:
    grad_clip = 0.0 if levers.get("optimizer_in_backward") else 1.0  # the step in backward cannot clip
    levers = {"precision": PRECISION, **levers}
    return TrainConfig(
        preset=size["preset"],
        checkpointing=MODE,
        batch=size["batch"],
        ctx=size["ctx"],
        grad_clip=grad_clip,
        **levers,
    )


def step_times(size: dict, data: TokenData, device: torch.device) -> dict[str, list[float]]:
    """Seconds per optimizer step of each lever set, the sets taking turns on the same batch (warm-up first)."""
    model_cfg, names = get_config(size["preset"]), list(LEVER_SETS)
    configs = {name: _train_config(size, LEVER_SETS[name]) for name in names}
    states = {name: build_step_state(model_cfg, cfg, device) for name, cfg in configs.items()}
    times: dict[str, list[float]] = {name: [] for name in names}
    gen = torch.Generator().manual_seed(0)
    for turn in range(size["warmup"] + size["steps"]):
        x, y = data.get_batch("train", size["batch"], size["ctx"], gen)
        shift = turn % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock(device)
            train_step(states[name], [(x, y)], device, configs[name].precision, configs[name].grad_clip)
            if turn >= size["warmup"]:
                times[name].append(clock(device) - start)
    return times


# The peak RSS of a fresh process over one train_step (after a warm-up step), minus its RSS before it
RSS_PROBE = textwrap.dedent(
    """
    import json, sys, torch
    from minigpt.config import TrainConfig
    from minigpt.model import get_config
    from minigpt.step import build_step_state, train_step

    def status(key):
        return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key + ":"))

    settings = json.loads(sys.argv[1])
    cfg, cpu = TrainConfig(**settings), torch.device("cpu")
    state = build_step_state(get_config(cfg.preset), cfg, cpu)
    tokens = torch.randint(0, 8192, (cfg.batch, cfg.ctx + 1), generator=torch.Generator().manual_seed(0))
    xy = (tokens[:, :-1].clone(), tokens[:, 1:].clone())
    train_step(state, [xy], cpu, cfg.precision, cfg.grad_clip)  # AdamW's state exists from here on
    open("/proc/self/clear_refs", "w").write("5")  # peak RSS := RSS now
    before = status("VmRSS")
    train_step(state, [xy], cpu, cfg.precision, cfg.grad_clip)
    print(json.dumps(status("VmHWM") - before))
    """
)


def rss_step_growth(size: dict, levers: dict) -> int | None:
    """Peak RSS growth over one step in a fresh process (Linux), malloc's mmap threshold fixed as offloading does."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    cfg = _train_config(size, levers)
    settings = {k: getattr(cfg, k) for k in ("preset", "precision", "checkpointing", "batch", "ctx", "grad_clip")}
    settings.update(levers)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES)}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, json.dumps(settings)], env=env, capture_output=True, text=True
    )
    return json.loads(run.stdout) if run.returncode == 0 else None


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    from benchmarks.benchlib import token_data

    t_start = time.perf_counter()
    data = data or token_data(quick)
    rows, checks, plot = [], [], {}
    for size in SIZES[quick]:
        preset, batch, ctx = size["preset"], size["batch"], size["ctx"]
        model_cfg, tokens, V = get_config(preset), size["batch"] * size["ctx"], get_config(preset).vocab_size
        predicted, measured = {}, {}
        for name, levers in LEVER_SETS.items():
            levers = {"precision": PRECISION, **levers}
            predicted[name] = estimate(model_cfg, batch, ctx, checkpointing=MODE, device=device, **levers)
            measured[name] = measure(model_cfg, batch, ctx, checkpointing=MODE, device=device, **levers)
        times = step_times(size, data, device)
        base_time = median_spread(times["baseline"])[0]
        rss_sets = ("all four",) if quick else ("baseline", "all four", BF16_WEIGHTS)  # quick: the code path, once
        rss = {name: rss_step_growth(size, LEVER_SETS[name]) for name in rss_sets} if device.type == "cpu" else {}
        # the loss head's bytes: its (tokens x vocabulary) tensors at once (the logits term) and what it keeps
        # for backward (the fp32 log-softmax, or one log-sum-exp per token when chunked)
        head = {
            name: measured[name].logits + (4 * V * tokens if name in ("baseline", "offload") else 4 * tokens)
            for name in LEVER_SETS
        }
        plot[preset] = []
        for name in LEVER_SETS:
            ratio, spread = median_spread([t / t0 for t, t0 in zip(times[name], times["baseline"])])
            pred, meas = predicted[name], measured[name]
            error = (pred.peak - meas.peak) / meas.peak
            offloaded = meas.offloaded or 0
            extra = (ratio - 1) * base_time
            bandwidth = 2 * offloaded / extra / 1e6 if offloaded and extra > 0 else None
            rows.append(
                [
                    f"{preset} {batch}x{ctx}",
                    name,
                    f"{pred.peak / MIB:,.1f}",
                    f"{meas.peak / MIB:,.1f}",
                    f"{100 * error:+.2f}",
                    f"{rss[name] / MIB:,.1f}" if rss.get(name) else "",
                    f"{head[name] / MIB:,.1f}",
                    f"{offloaded / MIB:,.1f}",
                    f"{1000 * median_spread(times[name])[0]:,.0f}",
                    f"{ratio:.2f} ({spread:.0f}%)",
                    f"{bandwidth:,.0f}" if bandwidth else "",
                ]
            )
            plot[preset].append((name, pred.peak / MIB, meas.peak / MIB, ratio))
        removed = 1 - head["chunked loss"] / head["baseline"]
        chunk_ratio = median_spread([t / t0 for t, t0 in zip(times["chunked loss"], times["baseline"])])[0]
        checks.append(
            Check(
                f"{preset}: --loss-chunks {CHUNKS} removes >= 80% of the loss head's bytes",
                f"{removed:.1%}",
                removed >= MIN_HEAD_REMOVED,
            )
        )
        checks.append(
            Check(
                f"{preset}: --loss-chunks {CHUNKS} step time <= {MAX_CHUNKED_TIME:.2f}x",
                f"{chunk_ratio:.2f}x",
                chunk_ratio <= MAX_CHUNKED_TIME,
            )
        )
        all_four_pred, all_four_meas = predicted["all four"].peak, measured["all four"].peak
        error = abs(all_four_pred - all_four_meas) / all_four_meas
        checks.append(
            Check(
                f"{preset}: all four levers, predicted peak within 2% of measured",
                f"{error:.2%}",
                error <= MAX_PEAK_ERROR,
            )
        )
        if preset == "125m":
            checks.append(
                Check(
                    "125m 8x1024: all four levers take the peak to <= 1,000 MiB (from 2,721)",
                    f"predicted {all_four_pred / MIB:,.0f} MiB, measured {all_four_meas / MIB:,.0f} MiB (with bf16 "
                    f"weights as well: {predicted[BF16_WEIGHTS].peak / MIB:,.0f} / "
                    f"{measured[BF16_WEIGHTS].peak / MIB:,.0f})",
                    max(all_four_pred, all_four_meas) <= MAX_ALL_FOUR_PEAK,
                )
            )

    if "125m" in plot:
        terms = predicted["all four"]  # the 125m step's, the last preset measured
        moment = max(terms.moments, key=terms.moments.get)
        cfg = get_config("125m")
        tied = widths(PRECISION).model * cfg.vocab_size * cfg.n_embd  # lm_head's gradient of the tied embedding
        block = terms.activation_grads - tied  # one recomputed block and its backward's working memory
        rest = terms.peak - terms.weights - terms.optimizer - tied - block
        room = MAX_ALL_FOUR_PEAK - terms.weights - terms.optimizer - tied
        what_remains = (
            f"What the four levers leave at the 125m peak ({moment}, {terms.peak / MIB:,.0f} MiB predicted): the "
            f"fp32 weights {terms.weights / MIB:,.0f} MiB, the 8-bit moments {terms.optimizer / MIB:,.0f}, "
            f"lm_head's fp32 gradient of the tied embedding {tied / MIB:,.0f} (it waits through the blocks' backward "
            "for the embedding's own: the step in backward updates the matrix once, with both), one recomputed "
            f"block with its backward {block / MIB:,.0f}, and {rest / MIB:,.0f} more (that block's bf16 weight "
            "copies, its offloaded input read back, the token ids). The first three are what the levers leave of "
            f"weights, optimizer state and gradients, and they leave {room / MIB:,.0f} MiB of the 1,000 for a "
            f"block's backward that needs {block / MIB:,.0f}: the target is out of their reach at 8 x 1024. bf16 "
            "weights (the last row) or a smaller micro-batch reach it."
        )
    else:
        what_remains = ""
    headers = [
        "step",
        "levers",
        "peak pred MiB",
        "peak meas MiB",
        "error %",
        "RSS growth MiB",
        "loss head MiB",
        "offloaded MiB",
        "ms/step",
        "time / baseline (spread)",
        "offload MB/s",
    ]
    body = "\n\n".join(
        [
            f"{PRECISION} autocast and {MODE} checkpointing in every row but the last; --loss-chunks {CHUNKS}; 'all "
            "four' adds --optimizer adamw8bit --optimizer-in-backward (and --grad-clip 0, which the step in backward "
            f"needs). '{BF16_WEIGHTS}' is all four with --precision bf16-pure: what the fp32 weights and their "
            "autocast copies cost. It keeps no fp32 master copy and has no stochastic rounding, so it loses every "
            "update under half a bf16 step (chapter 1's lost update): a memory figure, not a recipe. "
            "Peak: estimate() and measure() (the step's tensors, metered op by op); RSS growth: the peak RSS of a "
            "fresh process over one step after a warm-up step, minus its RSS before (malloc's mmap threshold fixed, "
            "as --offload-activations does; RSS counts touched pages, so gradients made as zeros and filled only at "
            "the batch's rows count in part). Loss head: its (tokens x vocabulary) tensors at once plus what it "
            "keeps for backward. Offload MB/s: bytes written and read back per step over the time offloading added "
            "(on a CPU the writes land in the page cache first: this is what the process sees, not the disk's own "
            "rate).",
            table(rows, headers),
            what_remains,
        ]
    )
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / max(1, 2 * len(plot))
    for k, (preset, entries) in enumerate(plot.items()):
        xs = range(len(entries))
        axes[0].bar([x + (2 * k) * width for x in xs], [e[1] for e in entries], width, label=f"{preset} predicted")
        axes[0].bar([x + (2 * k + 1) * width for x in xs], [e[2] for e in entries], width, label=f"{preset} measured")
        axes[1].bar([x + k * 2 * width for x in xs], [e[3] for e in entries], 2 * width, label=preset)
    for ax, title in ((axes[0], "peak MiB"), (axes[1], "step time / baseline")):
        ax.set_xticks(list(range(len(LEVER_SETS))), list(LEVER_SETS), rotation=20, fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=7)
    axes[0].axhline(MAX_ALL_FOUR_PEAK / MIB, color="tab:red", linestyle=":", linewidth=1)
    axes[1].axhline(MAX_CHUNKED_TIME, color="tab:red", linestyle=":", linewidth=1)
    figure = save_figure(fig, out, "loss_offload.png")
    return Section("11. The loss head and activation offloading", body, checks, [figure], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
