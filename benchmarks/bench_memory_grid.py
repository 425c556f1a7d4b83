"""6. Memory prediction grid: predicted vs measured for every preset x precision x checkpointing mode.

Runs benchmarks/memory_grid.py (minigpt.memory.estimate against minigpt.memory.measure) and keeps its
table; the target, activations within 5% and static terms exact, is memory_grid's own exit status.

    python -m benchmarks.bench_memory_grid [--quick] [--device cpu]
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

import torch

from benchmarks import memory_grid
from benchmarks.benchlib import Check, Section, main_for, pyplot, save_figure

ARGS = {
    False: [],  # memory_grid's defaults: the course presets at a small batch
    True: [
        "--presets",
        "tiny",
        "--batch",
        "1",
        "--ctx",
        "16",
        "--precisions",
        "fp32",
        "bf16-pure",
        "--modes",
        "none",
        "selective",
    ],
}


def parse_rows(text: str) -> list[dict]:
    """(preset, predicted, measured activations in MiB) of each row of memory_grid's table.

    [] if the table's layout changed: the section then goes without its plot.
    """
    rows = []
    for line in text.splitlines():
        cells = line.split()
        try:
            rows.append({"preset": cells[0], "predicted": float(cells[3]), "measured": float(cells[4])})
        except (IndexError, ValueError):
            continue  # headers, rules, the summary lines
    return rows


def run(quick: bool, out: Path, device: torch.device, data=None) -> Section:
    t_start = time.perf_counter()
    argv = ARGS[quick] + ["--device", device.type]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        status = memory_grid.main(argv)
    text = captured.getvalue().rstrip()
    print(text)
    summary = [line for line in text.splitlines() if line.startswith("worst")]
    tolerance = f"{100 * memory_grid.ACTIVATION_TOLERANCE:.0f}%"
    checks = [
        Check(
            f"predicted activations within {tolerance} of measured, static terms exact, for every configuration",
            summary[0] if summary else f"memory_grid exit status {status}",
            status == 0,
        )
    ]
    body = "\n\n".join(
        [
            f"`python benchmarks/memory_grid.py {' '.join(argv)}`; error = (predicted - measured) / measured",
            f"```\n{text}\n```",
        ]
    )
    figures = []
    rows = parse_rows(text)
    if rows:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(4.8, 4.2))
        for preset in dict.fromkeys(r["preset"] for r in rows):
            mine = [r for r in rows if r["preset"] == preset]
            ax.scatter([r["measured"] for r in mine], [r["predicted"] for r in mine], label=preset, s=18)
        top = max(max(r["measured"], r["predicted"]) for r in rows) * 1.1
        ax.plot([0, top], [0, top], color="gray", linewidth=1, label="predicted = measured")
        ax.set_xlabel("measured activations, MiB")
        ax.set_ylabel("predicted activations, MiB")
        ax.set_title("Memory prediction grid")
        ax.legend()
        figures.append(save_figure(fig, out, "memory_grid.png"))
    else:
        body += "\n\n(No plot: memory_grid's table could not be read.)"
    return Section("6. Memory prediction grid", body, checks, figures, time.perf_counter() - t_start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
