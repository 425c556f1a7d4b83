"""13. The planner's clock: predicted against measured step time per lever set, and the budget plan's pick.

Prediction: minigpt.step_time.step_seconds at a calibration (minigpt.calibrate) measured at the start of the run,
in this process before anything else, as `minigpt plan` measures it (not cached: the plans' cache is left as it
is). Measured: train_step of the real engine, each lever set in a fresh process of its own, as the command that
`plan --budget` prints runs it (its MALLOC_MMAP_THRESHOLD_, minigpt.budget.MALLOC_SETTING, which the calibration
times under too), median of the steps after a warm-up, by the same clock as the calibration (minigpt.timing.clock:
the process's CPU time on a CPU). A fresh process matters: the C heap's state is the process's. The machine's
speed moves from minute to minute (a 10m plain step took 1.5 s in one process and 2.0 s in another forty minutes
later, quiet both times), so each lever set is timed in GRID_ROUNDS fresh processes, the lever sets taking turns,
and its time is the median of all their steps; a lever set whose step takes more than SLOW_STEP seconds (an
emulated precision: fp16 on most CPUs) gets one process of STEPS steps instead.
Then for `plan --budget` on two budgets: every candidate that fits is measured, and the plan's pick is set
against the fastest. The fastest of dozens of candidates timed once each is partly the luckiest (a process whose
steps ran a few percent fast): the plan's pick and the CONFIRM fastest are timed again, in CONFIRM_ROUNDS more
fresh processes each, in turns, and compared by the median of all their steps. Last, the pick's printed command is
run as a learner runs it (PROOF_STEPS steps, the evaluation and the sample after them) and its peak RSS read by
getrusage in a wrapper process (minigpt.largest.prove, not minigpt's meter): the whole process must fit the budget.

    python -m benchmarks.bench_step_time [--quick] [--device cpu]
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from benchmarks.benchlib import MIB, Check, Section, main_for, table
from minigpt.budget import MALLOC_SETTING
from minigpt.calibrate import measure, small_shapes
from minigpt.config import TrainConfig
from minigpt.data import TokenData
from minigpt.heap import tame_heap
from minigpt.largest import prove
from minigpt.model import get_config
from minigpt.plan_budget import Levers, all_levers, plan_for_budget, predict, predicted_seconds
from minigpt.step import build_step_state, train_step
from minigpt.timing import clock

MAX_ERROR = 0.20  # each lever set's predicted step time within 20% of its measured one
MAX_PICK = 1.10  # the plan's pick within 10% of the fastest measured candidate that fits
PROOF_STEPS = 2  # the pick's command, run as printed: its peak comes in the first step, or after the last one
GRID = {
    "fp32": Levers(),
    "bf16": Levers("bf16"),
    "fp16": Levers("fp16"),
    "bf16-pure + master": Levers("bf16-pure", master_weights=True),
    "full": Levers(checkpointing="full"),
    "sqrt": Levers(checkpointing="sqrt"),
    "selective": Levers(checkpointing="selective"),
    "8-bit AdamW": Levers(optimizer="adamw8bit"),
    "step in backward": Levers(optimizer_in_backward=True),
    "chunked loss": Levers(loss_chunks=8),
    "offload": Levers(offload_activations=True),
    "LoRA, nf4 base": Levers(lora_rank=8, base_dtype="nf4"),
}
SIZES = {
    # budgets tight enough that every candidate that fits is timed in minutes: 20 and 34 lever sets fit 500 and
    # 540 MiB for 10m at 8 x 256 (at 900 MiB, 204 do: hours of steps on a CPU)
    False: dict(grid=[("10m", 4, 256), ("30m", 2, 512)], budgets=[("10m", 8, 256, 500), ("10m", 8, 256, 540)]),
    True: dict(grid=[("tiny", 2, 32)], budgets=[("tiny", 2, 32, 400)]),
}
# the quick run (tests/test_benchmarks.py) checks the code paths: the default step and the three levers whose timing
# runs code of its own (the 8-bit step, the offloader's files, the nf4 base), each a fresh process of a few seconds
QUICK_GRID = ("fp32", "8-bit AdamW", "offload", "LoRA, nf4 base")
QUICK_CANDIDATES = 4
WARMUP, STEPS = 1, 5  # one process's steps drift by 10-30% on a CPU (a 10m LoRA step on nf4: 1.52-2.15 s over 10)
GRID_ROUNDS, GRID_STEPS, SLOW_STEP = 3, 2, 5.0  # see the module doc
BUDGET_STEPS = 3  # each candidate of a budget, in its first pass (20 and 35 of them)
CONFIRM, CONFIRM_ROUNDS = 3, 3
ROOT = Path(__file__).resolve().parents[1]


def train_config(preset: str, batch: int, ctx: int, levers: Levers) -> TrainConfig:
    """The TrainConfig that runs these levers, as `minigpt train` would with the plan's flags."""
    grad_clip = 0.0 if levers.optimizer_in_backward else 1.0  # as Levers.flags() turns clipping off
    return TrainConfig(preset=preset, batch=batch, ctx=ctx, grad_clip=grad_clip, verbose=False, **asdict(levers))


def measured_seconds(preset: str, batch: int, ctx: int, levers: Levers, device: torch.device, steps: int) -> list:
    """Seconds of `steps` train_step calls after WARMUP ones, in a fresh Python process (see the module doc)."""
    job = json.dumps(dict(preset=preset, batch=batch, ctx=ctx, levers=asdict(levers), device=str(device), steps=steps))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env |= MALLOC_SETTING  # as the command `plan --budget` prints runs it
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_step_time", "--one", job],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"timing {preset} {levers.flags()} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_here(job: dict) -> list:
    """measured_seconds' child: the heap set as train() sets it, then the steps, on random tokens."""
    preset, batch, ctx, steps = job["preset"], job["batch"], job["ctx"], job["steps"]
    levers, device = Levers(**job["levers"]), torch.device(job["device"])
    tame_heap(accumulating=False)  # as minigpt train: with MALLOC_SETTING in the environment, left as it says
    cfg = train_config(preset, batch, ctx, levers)
    state = build_step_state(get_config(preset), cfg, device)
    x = torch.randint(0, get_config(preset).vocab_size, (batch, ctx + 1), generator=torch.Generator().manual_seed(0))
    window = [(x[:, :-1], x[:, 1:])]
    times = []
    for i in range(WARMUP + steps):
        start = clock(device)
        train_step(state, window, device, cfg.precision, cfg.grad_clip)
        if i >= WARMUP:
            times.append(clock(device) - start)
    return times


def in_turn(items: list, round_: int) -> list:
    """The order of one round of timings taken in turns: each round starts one item later than the last."""
    first = round_ % len(items) if items else 0
    return items[first:] + items[:first]


def confirmed(
    first: dict[Levers, list], pick: Levers, preset: str, batch: int, ctx: int, device: torch.device, rounds: int
) -> dict[Levers, float]:
    """Median step of each candidate of a budget: the plan's pick and the CONFIRM fastest of the first pass timed
    `rounds` more times, in turns (each round starts one candidate later), the others as the first pass timed them."""
    steps = {lv: list(times) for lv, times in first.items()}
    fastest = sorted(first, key=lambda lv: statistics.median(first[lv]))[:CONFIRM]
    again = [pick] + [lv for lv in fastest if lv != pick]
    for r in range(rounds):
        for lv in in_turn(again, r):
            steps[lv] += measured_seconds(preset, batch, ctx, lv, device, BUDGET_STEPS)
    return {lv: statistics.median(times) for lv, times in steps.items()}


def grid_seconds(
    preset: str, batch: int, ctx: int, grid: dict[str, Levers], pred: dict, device: torch.device, rounds: int
) -> dict[str, list]:
    """Each lever set's step times: `rounds` fresh processes of GRID_STEPS steps, the lever sets in turns (each round
    starts one later), or one process of STEPS steps where the step is predicted slower than SLOW_STEP seconds."""
    times = {name: [] for name in grid}
    slow = [name for name in grid if pred[name] > SLOW_STEP]
    for name in slow:
        times[name] = measured_seconds(preset, batch, ctx, grid[name], device, STEPS)
    turns = [name for name in grid if name not in slow]
    for r in range(rounds):
        for name in in_turn(turns, r):
            times[name] += measured_seconds(preset, batch, ctx, grid[name], device, GRID_STEPS)
    return times


def predicted(preset: str, batch: int, ctx: int, levers: Levers, device: torch.device, cal) -> float:
    model = get_config(preset)
    est = predict(model, batch, ctx, levers, device.type)
    return sum(predicted_seconds(model, batch, ctx, levers, est, cal).values())


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    t_start = time.perf_counter()
    with small_shapes() if quick else contextlib.nullcontext():  # quick: the code paths, in seconds
        cal = measure(device)
    cal = replace(cal, source=f"measured at the start of this run in {time.perf_counter() - t_start:.0f} s")
    size, steps, rounds = SIZES[quick], STEPS, CONFIRM_ROUNDS if not quick else 1
    grid_rounds = 1 if quick else GRID_ROUNDS
    rows, errors = [], []
    for preset, batch, ctx in size["grid"]:
        grid = {name: lv for name, lv in GRID.items() if not quick or name in QUICK_GRID}
        pred = {name: predicted(preset, batch, ctx, lv, device, cal) for name, lv in grid.items()}
        times = grid_seconds(preset, batch, ctx, grid, pred, device, grid_rounds)
        for name in grid:
            meas = statistics.median(times[name])
            spread = (max(times[name]) - min(times[name])) / meas
            errors.append((abs(pred[name] / meas - 1), f"{preset} {name}"))
            row = [f"{preset} {batch}x{ctx}", name, f"{1000 * pred[name]:,.0f}", f"{1000 * meas:,.0f} ({spread:.0%})"]
            rows.append(row + [f"{100 * (pred[name] / meas - 1):+.0f}"])
    worst, where = max(errors)
    checks = [
        Check(
            f"every lever set's predicted step time within {MAX_ERROR:.0%} of measured",
            f"worst {worst:.0%} ({where})",
            worst <= MAX_ERROR,
        )
    ]

    budget_rows = []
    for preset, batch, ctx, mib in size["budgets"]:
        choices = all_levers(["fp32"])[:QUICK_CANDIDATES] if quick else None
        plan = plan_for_budget(get_config(preset), mib * MIB, ctx, batch, device.type, cal=cal, choices=choices)
        fitting = plan.candidates  # every set of levers whose predicted process peak fits, fastest first
        first = {lv: measured_seconds(preset, batch, ctx, lv, device, BUDGET_STEPS) for lv in fitting}
        timed = confirmed(first, plan.levers, preset, batch, ctx, device, rounds)
        fastest = min(timed, key=timed.get)
        ratio = timed[plan.levers] / timed[fastest]
        proof = prove(plan, steps=PROOF_STEPS)
        budget_rows.append(
            [
                f"{preset} {batch}x{ctx}, {mib:,} MiB",
                len(fitting),
                " ".join(plan.levers.flags()),
                f"{1000 * timed[plan.levers]:,.0f}",
                " ".join(fastest.flags()),
                f"{1000 * timed[fastest]:,.0f}",
                f"{ratio:.2f}",
                f"{proof.measured_bytes / MIB:,.0f} ({proof.predicted_bytes / MIB:,.0f})",
            ]
        )
        checks.append(
            Check(
                f"{preset} in {mib:,} MiB: the plan's pick within {MAX_PICK - 1:.0%} of the fastest measured "
                "candidate that fits",
                f"{ratio:.2f}x",
                ratio <= MAX_PICK,
            )
        )
        checks.append(
            Check(
                f"{preset} in {mib:,} MiB: the pick's printed command (steps, evaluation, sample) peaks under the "
                "budget (getrusage)",
                f"{proof.measured_bytes / MIB:,.0f} MiB",
                proof.measured_bytes <= mib * MIB,
            )
        )
    body = "\n\n".join(
        [
            f"Step times predicted by `minigpt.step_time` at the calibration ({cal.describe()}) against train_step "
            "measured by `minigpt.timing.clock` (CPU time on a CPU, as the calibration): each lever set in "
            f"{grid_rounds} fresh process{'es' if grid_rounds > 1 else ''} of {GRID_STEPS} steps after {WARMUP} "
            "warm-up, the lever sets in turns, the median of all their steps (a step predicted over "
            f"{SLOW_STEP:.0f} s: one process of {steps} steps). Error = predicted / measured - 1.",
            table(rows, ["step", "levers", "predicted ms", "measured ms (spread)", "error %"]),
            f"`plan --budget`: every candidate that fits the budget measured ({BUDGET_STEPS} steps after {WARMUP} "
            f"warm-up, a fresh process each); then the plan's pick and the {CONFIRM} fastest of that pass again, in "
            f"{rounds} more fresh process{'es' if rounds > 1 else ''} each, in turns. Their times here: the median "
            "of all their steps. "
            "(The fastest of dozens timed once is partly the luckiest; timing the leaders again evens that out.) "
            f"Process peak: the pick's printed command run as printed ({PROOF_STEPS} steps, the evaluation and the "
            "sample after them), its peak RSS read by getrusage in a wrapper process, against the plan's prediction.",
            table(
                budget_rows,
                [
                    "budget",
                    "candidates that fit",
                    "plan's pick",
                    "ms",
                    "fastest measured",
                    "ms",
                    "pick / fastest",
                    "process peak MiB (predicted)",
                ],
            ),
        ]
    )
    return Section(
        "13. The planner's clock: predicted against measured step time", body, checks, [], time.perf_counter() - t_start
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # measured_seconds' child process: print the times as JSON
        print(json.dumps(_measure_here(json.loads(argv[1]))))
        return 0
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
