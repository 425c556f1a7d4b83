"""Where the compiled 8-bit AdamW step's time goes against fused AdamW's: the pass over the values, or the calls?

AdamW8bit(compile=True) updates each quantized tensor by compiled calls of at most CHUNK values. A call costs a fixed
part (torch.compile's call path, the threads' start) and a part per value (the fused pass itself). This diagnostic
takes one model's parameters and the real gradients of one batch, and times:
  - the whole step of fused AdamW and of AdamW8bit compiled, taking turns;
  - every compiled call inside AdamW8bit's steps, with a line fitted through them (seconds = per call + per value x
    values: least squares over the calls, which come in several sizes);
  - what the 8-bit step would take if its calls cost nothing beyond their values (the step less the calls' fixed
    parts);
and, with --processes N, fused AdamW's step alone in N fresh processes: on a CPU its time moves between processes
(one allocation of its state streams faster than another), so a ratio from one process is one draw.

    python -m benchmarks.optimizer_call_path [--preset 10m] [--turns 20] [--processes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from tabulate import tabulate

from benchmarks.bench_optimizers import on_copies, real_gradients
from benchmarks.benchlib import token_data
from minigpt.optim import adamw8bit
from minigpt.optim.adamw8bit import AdamW8bit

ROOT = Path(__file__).resolve().parents[1]


def step_seconds(preset: str, turns: int, quick: bool = False) -> dict:
    """Median step of fused AdamW and AdamW8bit compiled (taking turns, after one untimed step each), and every
    compiled call of the 8-bit steps as (values, seconds)."""
    params, grads = real_gradients(preset, token_data(quick), torch.device("cpu"))
    fused = on_copies(lambda ps: torch.optim.AdamW(ps, fused=True), params, grads)
    eight = on_copies(lambda ps: AdamW8bit(ps, compile=True), params, grads)
    fused.step()
    eight.step()  # compiles
    compiled = adamw8bit.compiled_update()
    calls: list[tuple[int, float]] = []

    def timed_call(*args):
        start = time.perf_counter()
        out = compiled(*args)
        calls.append((args[0].numel(), time.perf_counter() - start))
        return out

    times: dict[str, list[float]] = {"fused AdamW": [], "AdamW8bit compiled": []}
    with mock.patch.object(adamw8bit, "compiled_update", lambda: timed_call):
        for _ in range(turns):
            for name, opt in (("fused AdamW", fused), ("AdamW8bit compiled", eight)):
                start = time.perf_counter()
                opt.step()
                times[name].append(time.perf_counter() - start)
    return {"steps": {k: statistics.median(v) for k, v in times.items()}, "calls": calls}


def fit_line(calls: list[tuple[int, float]]) -> tuple[float, float]:
    """(seconds per call, seconds per value): the least-squares line through the calls' (values, seconds)."""
    xs, ys = [float(n) for n, _ in calls], [t for _, t in calls]
    if len(set(xs)) < 2:
        raise ValueError("every call updated the same number of values: a line needs two sizes")
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def fused_in_fresh_processes(preset: str, processes: int, turns: int, quick: bool) -> list[float]:
    """Fused AdamW's median step in each of `processes` fresh Python processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    medians = []
    for _ in range(processes):
        args = ["--preset", preset, "--turns", str(turns), "--fused-only"] + (["--quick"] if quick else [])
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.optimizer_call_path", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        medians.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return medians


def fused_only(preset: str, turns: int, quick: bool) -> float:
    params, grads = real_gradients(preset, token_data(quick), torch.device("cpu"))
    fused = on_copies(lambda ps: torch.optim.AdamW(ps, fused=True), params, grads)
    fused.step()
    times = []
    for _ in range(turns):
        start = time.perf_counter()
        fused.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--processes", type=int, default=0, help="fused AdamW alone in this many fresh processes")
    parser.add_argument("--quick", action="store_true", help="random tokens for the gradients (no corpus)")
    parser.add_argument("--fused-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fused_only:
        print(json.dumps(fused_only(args.preset, args.turns, args.quick)))
        return
    result = step_seconds(args.preset, args.turns, args.quick)
    per_call, per_value = fit_line(result["calls"])
    fused, eight = result["steps"]["fused AdamW"], result["steps"]["AdamW8bit compiled"]
    per_step = len(result["calls"]) // args.turns
    values = sum(n for n, _ in result["calls"]) / args.turns
    free_calls = eight - per_step * per_call
    print(f"{args.preset}, {torch.get_num_threads()} threads, {args.turns} turns")
    rows = [
        ["fused AdamW step", f"{1e3 * fused:.2f} ms", "1.00"],
        ["AdamW8bit compiled step", f"{1e3 * eight:.2f} ms", f"{eight / fused:.2f}"],
        ["  its compiled calls a step", f"{per_step}", ""],
        ["  per call (fitted)", f"{1e6 * per_call:.0f} us", ""],
        ["  per value (fitted)", f"{1e9 * per_value:.3f} ns ({values / 1e6:.1f} M values a step)", ""],
        ["  the step with calls free", f"{1e3 * free_calls:.2f} ms", f"{free_calls / fused:.2f}"],
    ]
    if args.processes:
        medians = fused_in_fresh_processes(args.preset, args.processes, args.turns, args.quick)
        spread = ", ".join(f"{1e3 * m:.1f}" for m in medians)
        rows.append([f"fused AdamW in {args.processes} fresh processes", f"{spread} ms", ""])
        rows.append(["  AdamW8bit compiled / each", "", ", ".join(f"{eight / m:.2f}" for m in medians)])
    print(tabulate(rows, headers=["what", "time", "x fused AdamW"], tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
