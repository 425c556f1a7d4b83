"""Demo `formats`: how fp32, bf16, fp16 and fp8 store a number, bit by bit.

Each format trades range against precision; too little precision makes a small weight update vanish.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from minigpt.demos.common import conclude, pyplot, save_figure, show_table
from minigpt.formats import (
    decode_bits,
    format_rows,
    formats_table,
    missing_formats,
    relative_error,
    smallest_update_that_survives,
    update_is_lost,
)
from minigpt.style import precision_color


def demo_formats(out: Path, size: str = "lecture") -> list[Path]:
    """Range and precision of each float format, bit by bit, and the update that vanishes."""
    quick = size == "quick"
    print(formats_table())
    names = [n for n in ("fp32", "bf16", "fp16", "fp8 e4m3fn") if n not in missing_formats()]
    rows = []
    for name in names:
        b = decode_bits(0.1, name)
        rows.append(
            [
                name,
                b.sign,
                b.exponent_bits,
                b.mantissa_bits,
                f"{b.stored_value:.10g}",
                f"{relative_error(0.1, name):.1e}",
            ]
        )
    show_table("0.1 stored in each format", rows, ["format", "sign", "exponent", "mantissa", "stored", "rel. error"])

    w, updates = 1.0, [1e-2, 1e-3, 1e-4, 1e-6, 1e-8]
    trio = ("fp32", "bf16", "fp16")
    rows = [
        [name, f"{smallest_update_that_survives(w, name):.3g}"]
        + ["lost" if update_is_lost(w, u, name) else "kept" for u in updates]
        for name in trio
    ]
    show_table(f"w = {w} + update: kept or lost?", rows, ["format", "smallest kept"] + [f"+{u:g}" for u in updates])

    plt = pyplot()
    table = [r for r in format_rows() if r["bits"] <= 32]  # fp64's range would flatten the others
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(table):
        low = r["smallest subnormal"] or r["smallest normal"]
        ax.barh(i, math.log2(r["max"]) - math.log2(low), left=math.log2(low), color="tab:blue", alpha=0.7)
        ax.text(math.log2(r["max"]) + 2, i, f"eps {r['eps']:.2g}", va="center", fontsize=8)
    ax.set_yticks(range(len(table)), [r["name"] for r in table])
    ax.set_xlabel("log2 of the magnitude: smallest (subnormal) ... largest")
    ax.set_title("Range of each 32-bit and smaller format (eps: precision near 1.0)")
    ax.set_xlim(right=ax.get_xlim()[1] + 40)
    figures = [save_figure(fig, out, "formats_range.png")]

    grid = np.logspace(-10, -1, 37 if quick else 145)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for k, name in enumerate(trio):
        kept = [0 if update_is_lost(w, u, name) else 1 for u in grid]
        ax.step(grid, np.array(kept) + 0.04 * k, where="post", label=name, color=precision_color(name))
        ax.axvline(smallest_update_that_survives(w, name), color=precision_color(name), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["lost", "kept"])
    ax.set_xlabel(f"update added to w = {w}")
    ax.set_title("Does w + update change w?")
    ax.legend()
    figures.append(save_figure(fig, out, "formats_lost_update.png"))

    facts = {r["name"]: r for r in format_rows()}
    conclude(
        f"bf16 has fp32's range (max {facts['bf16']['max']:.3g}; fp16 overflows above "
        f"{facts['fp16']['max']:g}) but only {facts['bf16']['mantissa bits']} mantissa bits: an update "
        f"below {smallest_update_that_survives(w, 'bf16'):.3g} to a weight of {w} is lost in bf16 "
        f"(fp16: {smallest_update_that_survives(w, 'fp16'):.3g}, fp32: "
        f"{smallest_update_that_survives(w, 'fp32'):.3g})."
    )
    return figures
