"""10b. The fine-tuning plan for a budget, run as printed and measured.

`minigpt plan --budget 1GiB --preset 125m --ctx 1024 --fine-tune` (minigpt.plan_budget.plan_for_budget with
every LoRA recipe: each base dtype, each checkpointing mode, the chunked loss). Its printed `minigpt train`
command then runs for a few steps in a fresh process (minigpt.largest.prove), and the operating system
reports its peak RSS, set against the plan's prediction. Without --init-from the frozen base is the preset's
random init: the same tensors, shapes and dtypes as a trained one, so the same memory.

    python -m benchmarks.bench_finetune_plan [--quick]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.benchlib import MIB, Check, Section, main_for, table
from minigpt.calibrate import calibration
from minigpt.data import TokenData
from minigpt.largest import prove
from minigpt.model import count_params, shaped_config
from minigpt.plan_budget import all_levers, plan_for_budget, supported_precisions

GIB = 2**30
TOLERANCE = 0.05  # the target: the measured peak RSS within 5% of the plan's prediction
SIZES = {
    False: dict(preset="125m", budget=GIB, ctx=1024, steps=3),
    True: dict(preset="10m", budget=600 * MIB, ctx=64, steps=2),
}


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start, size = time.perf_counter(), SIZES[quick]
    model = shaped_config(size["preset"])  # as `minigpt plan --preset` reads it
    choices = all_levers(supported_precisions(torch.device("cpu")), fine_tune=True)
    plan = plan_for_budget(
        model, size["budget"], size["ctx"], cal=calibration("cpu"), choices=choices, name=size["preset"]
    )
    label = f"{size['budget'] / MIB:,.0f} MiB" if size["budget"] < GIB else f"{size['budget'] / GIB:g} GiB"
    if not plan.fits:
        checks = [Check(f"{label}: the fine-tuning plan fits", plan.reasons[-1], False)]
        return Section("10b. The fine-tuning plan, run and measured", "\n".join(plan.reasons), checks, [])
    proof = prove(plan, steps=size["steps"])
    with tempfile.TemporaryDirectory() as tmp:  # as the plan advises: from a finished run, saving the adapters
        base = Path(tmp) / "base"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "minigpt",
                "train",
                "--preset",
                size["preset"],
                "--ctx",
                "64",
                "--steps",
                "1",
                "--out",
                str(base),
                "--json",
            ],
            check=True,
            capture_output=True,
        )
        tuned = prove(plan, steps=size["steps"], extra=f"--init-from {base} --out {Path(tmp) / 'tuned'}")
    b = plan.breakdown
    rows = [
        ["plan", f"{size['preset']} ({count_params(model) / 1e6:.1f}M), ctx {size['ctx']}, micro-batch {plan.batch}"],
        ["levers", " ".join(plan.levers.flags())],
        ["command run", f"`{proof.command}`"],
        [
            "predicted peak",
            f"{proof.predicted_bytes / MIB:,.1f} MiB (runtime {plan.runtime_bytes / MIB:,.0f} + step "
            f"{b.peak / MIB:,.0f}: weights {b.weights / MIB:,.0f}, grads {b.gradients / MIB:,.0f}, optimizer "
            f"{b.optimizer / MIB:,.0f}, activations {b.activations / MIB:,.0f})",
        ],
        ["measured peak RSS", f"{proof.measured_bytes / MIB:,.1f} MiB"],
        ["error", f"{proof.error:+.1%}"],
        ["with --init-from and --out", f"{tuned.measured_bytes / MIB:,.1f} MiB measured ({tuned.error:+.1%})"],
        ["budget", f"{size['budget'] / MIB:,.0f} MiB; measured peak {proof.measured_bytes / size['budget']:.0%} of it"],
        [
            "s per step",
            f"{proof.seconds_per_step:.1f} measured with {os.environ.get('OMP_NUM_THREADS', '1')} thread(s) (the "
            f"proof's setting), {sum(plan.seconds.values()):.1f} predicted for this process's "
            f"{torch.get_num_threads()}: a memory proof, not a timing (section 13 times the plans)",
        ],
        ["train loss first -> last", f"{proof.losses[0]:.3f} -> {proof.losses[-1]:.3f}"],
    ]
    checks = [
        Check(
            f"{label} fine-tune: measured peak RSS within 5% of the plan",
            f"{proof.error:+.1%}",
            abs(proof.error) <= TOLERANCE,
        ),
        Check(
            f"{label} fine-tune: measured peak RSS under the budget",
            f"{proof.measured_bytes / MIB:,.0f} MiB",
            proof.measured_bytes <= size["budget"],
        ),
        Check(
            f"{label} fine-tune from a saved run (--init-from, --out): peak RSS within 5% of the plan",
            f"{tuned.error:+.1%}",
            abs(tuned.error) <= TOLERANCE,
        ),
    ]
    why = "\n".join(f"- {reason}" for reason in plan.reasons)
    body = "\n\n".join(
        [
            f"`minigpt plan --budget {label.replace(' ', '')} --preset {size['preset']} --ctx {size['ctx']} "
            f"--fine-tune` on the CPU, then its printed command run for {size['steps']} steps in a fresh process. "
            "Measured: the peak RSS of that `minigpt train` process, read by getrusage in a wrapper process (not "
            "minigpt's meter). Without --init-from the frozen base is the preset's random init, so the loss is a "
            "from-scratch loss; the memory is a fine-tune's. The command is then run again as the plan advises a "
            "fine-tune: --init-from a finished run of the preset (trained 1 step, its checkpoint with AdamW's "
            "state) and --out, so the adapters are saved.",
            table(rows, ["what", "value"]),
            "The planner's reasons, as it prints them:\n\n" + why,
        ]
    )
    return Section(
        "10b. The fine-tuning plan, run and measured", body, checks, [], seconds=time.perf_counter() - t_start
    )


if __name__ == "__main__":
    sys.exit(main_for(run, __doc__))
