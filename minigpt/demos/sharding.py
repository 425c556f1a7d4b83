"""Demo `sharding`: what each process holds under DDP, ZeRO-1 and FSDP, measured on real processes.

Two CPU processes (gloo) run one real training step in each shard mode; their bytes are set against the prediction.
"""

from __future__ import annotations

from pathlib import Path

from minigpt.demos.common import MIB, conclude, mib, pyplot, save_figure, show_table
from minigpt.distributed import SHARD_MODES, measure_rank_state_bytes
from minigpt.memory.static_state import sharded_state_bytes
from minigpt.model import count_params, get_config
from minigpt.style import MODE_COLORS, PRECISION_COLORS

STATES = ("weights", "gradients", "optimizer")
STATE_COLORS = dict(zip(STATES, (PRECISION_COLORS["fp32"], MODE_COLORS["full"], PRECISION_COLORS["bf16"])))


def demo_sharding(out: Path, size: str = "lecture") -> list[Path]:
    """Per-process memory of DDP, ZeRO-1 and FSDP: predicted for 1-8 processes, measured on 2."""
    quick = size == "quick"
    preset = "tiny" if quick else "10m"
    cfg, precision, world = get_config(preset), "fp32", 2
    rows = []
    for shard in SHARD_MODES:
        totals = [sum(sharded_state_bytes(cfg, precision, shard, n).values()) for n in (1, 2, 4, 8)]
        rows.append([shard, *(mib(t) for t in totals)])
    show_table(
        f"{preset} ({count_params(cfg):,} parameters, {precision} + AdamW): predicted MiB per process",
        rows,
        ["mode", "1 process", "2", "4", "8"],
    )

    measured = {shard: measure_rank_state_bytes(cfg, precision, shard, world) for shard in SHARD_MODES}
    ranks = range(world)
    predicted = {s: [sharded_state_bytes(cfg, precision, s, world, rank=r) for r in ranks] for s in SHARD_MODES}
    rows = [
        [shard, state, *(f"{mib(m[state])} / {mib(p[state])}" for m, p in zip(measured[shard], predicted[shard]))]
        for shard in SHARD_MODES
        for state in STATES
    ]
    show_table(
        f"Measured on {world} CPU processes after one training step: measured / predicted MiB",
        rows,
        ["mode", "state", *(f"rank {r}" for r in range(world))],
    )

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, shard in enumerate(SHARD_MODES):
        bottom = 0.0
        for state in STATES:
            value = measured[shard][0][state] / MIB
            ax.bar(shard, value, bottom=bottom, color=STATE_COLORS[state], label=state if i == 0 else None)
            bottom += value
        outline = dict(fill=False, edgecolor="black", linewidth=1.5, label="predicted" if i == 0 else None)
        ax.bar(shard, sum(predicted[shard][0].values()) / MIB, **outline)
    ax.set_ylabel("MiB held by rank 0")
    ax.set_title(f"{preset} on {world} processes: measured (bars), predicted (outline)")
    ax.legend(fontsize=8)
    figures = [save_figure(fig, out, "sharding.png")]

    none, fsdp = (sum(measured[s][0].values()) for s in ("none", "fsdp"))
    gap = max(abs(measured[s][r][k] / predicted[s][r][k] - 1) for s in SHARD_MODES for r in ranks for k in STATES)
    conclude(
        f"FSDP on {world} processes: rank 0 holds {mib(fsdp)} MiB of state, {fsdp / none:.0%} of DDP's "
        f"{mib(none)} MiB; measured within {gap:.1%} of the prediction in every mode."
    )
    return figures
