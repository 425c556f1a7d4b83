"""3b. bf16 against fp32 at the claim's scale: 10m trained 1,000 steps per run, three runs per precision.

The course says bf16 autocast trains like fp32. Each run trains the 10m preset on the built-in stories with
`minigpt.train.train` (its own schedule, evaluation and data order per run seed); the two precisions share
their run seeds, so each seed gives a paired difference. Reported: the final val loss of each run, the mean
and spread (max - min) per precision, and the paired bf16 - fp32 difference with its mean and range.

    python -m benchmarks.bench_bf16_quality [--quick] [--device cpu]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import Check, Section, main_for, quiet_run, table, token_data
from minigpt.data import TokenData
from minigpt.train import train

PRECISIONS = ("fp32", "bf16")
RUN_SEEDS = (0, 1, 2)
SIZES = {
    False: dict(preset="10m", batch=8, ctx=256, steps=1000, eval_batches=20),
    True: dict(preset="tiny", batch=2, ctx=32, steps=3, eval_batches=1),
}


def final_val_loss(size: dict, precision: str, seed: int, data: TokenData, device: torch.device) -> float:
    """The val loss train() reports at the end of one run."""
    cfg = quiet_run(size, device, precision=precision, seed=seed)
    return float(train(cfg, data).summary()["final_val_loss"])


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start = time.perf_counter()
    data = data or token_data(quick)
    size = SIZES[quick]
    loss = {(p, s): final_val_loss(size, p, s, data, device) for s in RUN_SEEDS for p in PRECISIONS}
    rows = [
        [f"run {s}"] + [f"{loss[p, s]:.4f}" for p in PRECISIONS] + [f"{loss['bf16', s] - loss['fp32', s]:+.4f}"]
        for s in RUN_SEEDS
    ]
    means = {p: statistics.mean(loss[p, s] for s in RUN_SEEDS) for p in PRECISIONS}
    spreads = {p: max(loss[p, s] for s in RUN_SEEDS) - min(loss[p, s] for s in RUN_SEEDS) for p in PRECISIONS}
    paired = [loss["bf16", s] - loss["fp32", s] for s in RUN_SEEDS]
    rows.append(["mean"] + [f"{means[p]:.4f}" for p in PRECISIONS] + [f"{statistics.mean(paired):+.4f}"])
    rows.append(
        ["spread (max - min)"] + [f"{spreads[p]:.4f}" for p in PRECISIONS] + [f"{max(paired) - min(paired):.4f}"]
    )
    run_spread = max(spreads.values())
    checks = [
        Check(
            "bf16 trains like fp32: the mean paired difference is within the runs' own spread",
            f"{statistics.mean(paired):+.4f} nats (spread {run_spread:.4f})",
            abs(statistics.mean(paired)) <= run_spread,
        )
    ]
    body = "\n\n".join(
        [
            f"{size['preset']}, batch {size['batch']} x {size['ctx']}, {size['steps']:,} steps per run, val loss "
            f"over {size['eval_batches']} batches at the end; runs {', '.join(map(str, RUN_SEEDS))} per precision "
            "(the run's seed sets the init and the data order, the same for both precisions).",
            table(rows, ["run", *[f"{p} val loss" for p in PRECISIONS], "bf16 - fp32"]),
        ]
    )
    return Section("3b. bf16 against fp32 at 1,000 steps", body, checks, [], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
