"""12. The largest model this machine can train: the budget planner's choice, run in a fresh process and measured.

For each budget, `minigpt plan --largest --budget B` (minigpt.plan_budget.largest) with every lever and with fp32
AdamW alone; then the lever plan's printed `minigpt train` command runs for a few steps in a fresh process,
and the operating system reports its peak RSS (minigpt.largest.prove), set against the plan's prediction.
The other budgets, up to 16 GiB (billions of parameters), are planned and predicted only, to keep the section short:
their rows say "not run" and give the planner's predicted seconds per step instead.

    python -m benchmarks.bench_largest [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from benchmarks.benchlib import MIB, Check, Section, main_for, pyplot, save_figure, table
from minigpt.data import TokenData
from minigpt.largest import prove
from minigpt.model import count_params
from minigpt.plan_budget import NO_LEVERS, largest

GIB = 2**30
TOLERANCE = 0.05  # the target: the measured peak RSS within 5% of the plan's prediction
SIZES = {
    False: dict(
        proved=(1 * GIB, 2 * GIB), curve=(GIB // 2, GIB, 2 * GIB, 4 * GIB, 8 * GIB, 16 * GIB), ctx=256, steps=5
    ),
    True: dict(proved=(600 * MIB,), curve=(600 * MIB, GIB), ctx=64, steps=3),
}


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), SIZES[quick]
    ctx, checks, rows, curve = size["ctx"], [], [], {"levers": [], "naive": []}
    for budget in size["curve"]:
        best, naive = largest(budget, ctx), largest(budget, ctx, choices=[NO_LEVERS])
        curve["levers"].append(count_params(best.model))
        curve["naive"].append(count_params(naive.model))
        ratio = curve["levers"][-1] / curve["naive"][-1]
        label = f"{budget / MIB:,.0f} MiB" if budget < GIB else f"{budget / GIB:g} GiB"
        row = [
            label,
            f"{curve['naive'][-1] / 1e6:,.1f}M",
            f"{curve['levers'][-1] / 1e6:,.1f}M ({best.model.n_layer} x {best.model.n_embd})",
            f"{ratio:.2f}x",
            " ".join(best.levers.flags()),
            f"{best.predicted_process_bytes / MIB:,.0f}",
        ]
        if budget in size["proved"]:
            proof = prove(best, steps=size["steps"])
            row += [
                f"{proof.measured_bytes / MIB:,.0f}",
                f"{proof.error:+.1%}",
                f"{proof.seconds_per_step:.1f}",
                f"{proof.losses[0]:.3f} -> {proof.losses[-1]:.3f}",
            ]
            checks.append(
                Check(
                    f"{label}: measured peak RSS within 5% of the plan",
                    f"{proof.error:+.1%}",
                    abs(proof.error) <= TOLERANCE,
                )
            )
            checks.append(Check(f"{label}: the loss falls", row[-1], proof.loss_fell))
        else:
            row += ["not run", "", f"{sum(best.seconds.values()):.1f} (predicted)", ""]
        if budget == 16 * GIB:
            checks.append(
                Check("16 GiB: at least 1B parameters", f"{curve['levers'][-1] / 1e9:.2f}B", curve["levers"][-1] >= 1e9)
            )
            checks.append(Check("16 GiB: at least 2.5x the fp32-AdamW plan", f"{ratio:.2f}x", ratio >= 2.5))
        rows.append(row)
        print(row, file=sys.stderr, flush=True)

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    budgets_gib = [b / GIB for b in size["curve"]]
    ax.plot(budgets_gib, [n / 1e6 for n in curve["levers"]], "o-", label="every lever")
    ax.plot(budgets_gib, [n / 1e6 for n in curve["naive"]], "s--", label="fp32 AdamW, no lever")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("budget for the whole process (GiB)")
    ax.set_ylabel("largest model (M parameters)")
    ax.set_title(f"The largest model of the family that trains (ctx {ctx}, micro-batch 1, CPU)")
    ax.legend()
    figures = [save_figure(fig, out, "largest.png")]
    headers = [
        "budget",
        "fp32 AdamW largest",
        "levers largest",
        "ratio",
        "levers",
        "predicted peak MiB",
        "measured peak MiB",
        "error",
        "s per step",
        "loss first -> last",
    ]
    proved = ", ".join(r[0] for r in rows if r[6] != "not run")
    body = "\n\n".join(
        [
            f"ctx {ctx}, micro-batch 1, on the CPU. The model family: k blocks of width 64 k with k heads "
            "(`minigpt.plan_budget.family_model`). Measured: the peak RSS of the `minigpt train` process the plan "
            f"prints, read by getrusage in a wrapper process (not minigpt's meter), for the {proved} plans. The "
            'rows marked "not run" are planned and predicted only, to keep this section short; their seconds per '
            "step are the planner's prediction.",
            table(rows, headers),
        ]
    )
    return Section(
        "12. The largest model this machine can train", body, checks, figures, seconds=time.perf_counter() - t_start
    )


if __name__ == "__main__":
    sys.exit(main_for(run, __doc__))
