"""8. Sharding: what each process holds under DDP, ZeRO-1 and FSDP, measured on 2 and 4 processes and predicted.

Measured: `minigpt.distributed.measure_rank_state_bytes`, real CPU processes joined by gloo, each running one
training step of train's own step state; the bytes of the weights, gradients and AdamW moments the process
holds (FSDP's DTensor slices, ZeroRedundancyOptimizer's share). Predicted: `minigpt.memory.sharded_state_bytes`.
The chapter-7 formula (weights + grads + optimizer/N, or all/N) is shown beside them: ZeRO-1 hands out whole
parameters, so its split is only about even. Memory only, no timing: gloo on a CPU says nothing about a GPU
interconnect. Bytes do not depend on machine load; the 30m run takes about half a minute.

    python -m benchmarks.bench_sharding [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import MIB, Check, Section, main_for, table
from minigpt.data import TokenData
from minigpt.distributed import SHARD_MODES, measure_rank_state_bytes
from minigpt.memory import sharded_state_bytes
from minigpt.model import count_params, get_config
from minigpt.precision import static_bytes_per_param

WORLDS = (2, 4)
SIZES = {False: dict(preset="30m", precision="fp32"), True: dict(preset="tiny", precision="fp32")}
TOLERANCE = 0.05  # the target: measured within 5% of predicted, every mode and process count
SPLIT_BY_MODE = {"none": (), "zero1": ("optimizer",), "fsdp": ("weights", "grads", "optimizer")}  # chapter 7


def chapter7_formula_bytes(n_params: int, precision: str, shard: str, world: int) -> float:
    """Chapter 7's per-GPU static memory: the split parts divided by N, the others whole."""
    b = static_bytes_per_param(precision)
    parts = {"weights": b["weights"] + b["master_weights"], "grads": b["grads"], "optimizer": b["optimizer"]}
    return n_params * sum(v / world if k in SPLIT_BY_MODE[shard] else v for k, v in parts.items())


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), SIZES[quick]
    preset, precision = size["preset"], size["precision"]
    cfg = get_config(preset)
    rows, worst, zero1_share = [], 0.0, {}
    for world in WORLDS:
        for shard in SHARD_MODES:
            measured = measure_rank_state_bytes(preset, precision, shard, world)
            largest = max(measured, key=lambda d: sum(d.values()))
            for rank, got in enumerate(measured):  # every process against its own prediction
                want = sum(sharded_state_bytes(cfg, precision, shard, world, rank=rank).values())
                worst = max(worst, abs(sum(got.values()) / want - 1))
            predicted = sum(sharded_state_bytes(cfg, precision, shard, world).values())
            if shard == "zero1":  # the largest AdamW share against an even split of the whole
                even = sharded_state_bytes(cfg, precision, "none", 1)["optimizer"] / world
                zero1_share[world] = largest["optimizer"] / even
            formula = chapter7_formula_bytes(count_params(cfg), precision, shard, world)
            rows.append(
                [
                    world,
                    shard,
                    *(f"{largest[k] / MIB:.2f}" for k in ("weights", "gradients", "optimizer")),
                    f"{sum(largest.values()) / MIB:.2f}",
                    f"{predicted / MIB:.2f}",
                    f"{formula / MIB:.2f}",
                    f"{sum(largest.values()) / predicted:.4f}",
                ]
            )
            print(rows[-1], file=sys.stderr, flush=True)
    body = "\n\n".join(
        [
            f"Preset {preset} ({count_params(cfg):,} parameters), {precision} + AdamW, CPU processes joined by "
            "gloo. The process that holds the most; measured: `measure_rank_state_bytes`, predicted: "
            "`sharded_state_bytes` (both leave out AdamW's 4-byte step counters).",
            table(
                rows,
                [
                    "processes",
                    "shard",
                    "weights MiB",
                    "gradients MiB",
                    "AdamW MiB",
                    "static MiB",
                    "predicted MiB",
                    "chapter 7 formula MiB",
                    "measured / predicted",
                ],
            ),
            "ZeRO-1 gives each process whole parameters, largest first, to the one holding the fewest: its "
            "largest AdamW share measured "
            + ", ".join(f"{r:.2f}x optimizer/N on {w} processes" for w, r in zero1_share.items())
            + " (one parameter larger than optimizer/N, like a small model's embedding, cannot be split). "
            "FSDP cuts every parameter into N row slices: all/N, exactly when N divides every first dimension.",
        ]
    )
    check = Check(
        f"every process, {'/'.join(SHARD_MODES)} on {' and '.join(map(str, WORLDS))} processes: "
        f"measured static within {TOLERANCE:.0%} of predicted",
        f"worst {worst:.2%}",
        worst <= TOLERANCE,
    )
    return Section("8. Sharding: bytes per process", body, [check], [], time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
