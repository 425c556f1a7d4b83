"""Demo `largest`: the largest model this machine can train in a memory budget, planned, then run and measured.

The planner picks the levers (minigpt.plan_budget); the printed `minigpt train` command runs in a fresh process
whose peak resident memory the operating system reports (minigpt.largest). --quick shrinks the budget.
"""

from __future__ import annotations

from pathlib import Path

from minigpt.demos.common import conclude, pyplot, save_figure, show_table
from minigpt.largest import prove
from minigpt.model import count_params
from minigpt.plan_budget import NO_LEVERS, largest

MIB, GIB = 2**20, 2**30


def demo_largest(out: Path, size: str = "lecture") -> list[Path]:
    """Plan the largest model for a budget with every lever and with none, run the first, and compare."""
    quick = size == "quick"
    budget = 450 * MIB if quick else 1 * GIB
    ctx = 32 if quick else 256
    best = largest(budget, ctx)
    naive = largest(budget, ctx, choices=[NO_LEVERS])
    print(f"Budget {budget / MIB:,.0f} MiB for the whole process, ctx {ctx}, micro-batch 1, on the CPU\n")
    rows = []
    for title, p in (("every lever", best), ("fp32 AdamW, no lever", naive)):
        rows.append(
            {
                "plan": title,
                "model": f"{p.model.n_layer} x {p.model.n_embd}",
                "parameters (M)": round(count_params(p.model) / 1e6, 1),
                "levers": " ".join(p.levers.flags()),
                "predicted peak (MiB)": round(p.predicted_process_bytes / MIB),
            }
        )
    show_table("The largest model of the family in the budget", rows)
    steps = 5 if size == "full" else 3  # the first step is left out of the time per step
    print(f"Run: {best.command(steps=steps)}\n")
    run = prove(best, steps=steps)
    show_table(
        "The run, measured by the operating system",
        [
            {
                "predicted peak RSS (MiB)": round(run.predicted_bytes / MIB),
                "measured peak RSS (MiB)": round(run.measured_bytes / MIB),
                "difference": f"{run.error:+.1%}",
                "loss first -> last": f"{run.losses[0]:.3f} -> {run.losses[-1]:.3f}",
                "s per step": round(run.seconds_per_step, 1),
            }
        ],
    )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(["fp32 AdamW,\nno lever", "every lever"], [count_params(naive.model) / 1e6, count_params(best.model) / 1e6])
    ax.set_ylabel("parameters (M)")
    ax.set_title(f"Largest model in {budget / MIB:,.0f} MiB")
    figures = [save_figure(fig, out, "largest.png")]
    ratio = count_params(best.model) / count_params(naive.model)
    conclude(
        f"{budget / MIB:,.0f} MiB trains {count_params(best.model) / 1e6:.0f}M parameters with the levers, "
        f"{ratio:.1f}x the {count_params(naive.model) / 1e6:.0f}M of fp32 AdamW; the run's peak RSS was "
        f"{run.error:+.1%} from the prediction."
    )
    return figures
