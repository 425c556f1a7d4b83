"""Where torch.compile's 8-bit AdamW step's time goes against fused AdamW's: the pass over the values, or the calls?

(The diagnostic that led to the C loop --compile runs on a CPU now: minigpt/optim/kernel.py.)
AdamW8bit(compile=True, kernel="inductor") updates each quantized tensor by compiled calls of at most CHUNK values.
A call costs a fixed part (torch.compile's call path, the threads' start) and a part per value (the fused pass).
This diagnostic takes one model's parameters and the real gradients of one batch, and times:
  - the whole step of fused AdamW and of AdamW8bit compiled, taking turns;
  - every compiled call inside AdamW8bit's steps, with a line fitted through them (seconds = per call + per value x
    values: least squares over the calls, which come in several sizes);
  - what the 8-bit step would take if its calls cost nothing beyond their values (the step less the calls' fixed
    parts);
and, with --processes N, fused AdamW's step alone in N fresh processes: on a CPU its time moves between processes
(one allocation of its state streams faster than another), so a ratio from one process is one draw.

With --floor, what the pass itself could come down to, per value over every whole block of the model's quantized
tensors (the same chunks the optimizer updates), the passes taking turns:
  - the fused pass as AdamW8bit compiles it (two loops: the blocks' new largest values, then everything else);
  - the same pass with the new scales known in advance (the old ones stand in: its codes are wrong, its time is
    what one loop that never recomputes m and v would cost, the best a pass over the blocks can do);
  - AdamW with fp32 moments, compiled by the same inductor (the update without decoding and encoding codes);
  - torch's fused AdamW on the same tensors.

    python -m benchmarks.optimizer_call_path [--preset 10m] [--turns 20] [--processes 3] [--floor]
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
from minigpt.optim.adamw8bit import CHUNK, AdamW8bit, _decode
from minigpt.optim.codes import BLOCK, M_CODE, V_CODE, quantize

ROOT = Path(__file__).resolve().parents[1]


def step_seconds(preset: str, turns: int, quick: bool = False) -> dict:
    """Median step of fused AdamW and AdamW8bit compiled (taking turns, after one untimed step each), and every
    compiled call of the 8-bit steps as (values, seconds)."""
    params, grads = real_gradients(preset, token_data(quick), torch.device("cpu"))
    fused = on_copies(lambda ps: torch.optim.AdamW(ps, fused=True), params, grads)
    eight = on_copies(lambda ps: AdamW8bit(ps, compile=True, kernel="inductor"), params, grads)
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


def one_loop_update_(param, grad, m_codes, m_scales, v_codes, v_scales, hyper) -> None:
    """fused_update_ with the old block scales standing in for the new ones: one loop, no recomputing of m and v.
    Its codes are wrong (values above the old scale saturate); only its time means something."""
    m, v = _decode(m_codes, m_scales, M_CODE), _decode(v_codes, v_scales, V_CODE)
    g = grad.float()
    m = m + hyper[1] * (g - m)
    v = v * hyper[2] + hyper[3] * g * g
    root = v.sqrt()
    param.copy_(param.float() * hyper[0] + (hyper[6] * m) / (root * hyper[4] + hyper[5]))
    m_inverse = m_scales.clamp_min(torch.finfo(torch.float32).tiny).reciprocal()
    m_codes.copy_((m.abs() * m_inverse[:, None]).sqrt().mul(M_CODE.levels).round().copysign(m).clamp(-127, 127))
    v_inverse = v_scales.clamp_min(torch.finfo(torch.float32).tiny).sqrt().reciprocal()
    v_codes.copy_((root * v_inverse[:, None]).sqrt().mul(V_CODE.levels).round().clamp(0, 255))


def fp32_update_(param, grad, m, v, hyper) -> None:
    """The same AdamW update on fp32 moments (no codes), for inductor to compile the same way."""
    m.copy_(m + hyper[1] * (grad - m))
    v.copy_(v * hyper[2] + hyper[3] * grad * grad)
    param.copy_(param * hyper[0] + (hyper[6] * m) / (v.sqrt() * hyper[4] + hyper[5]))


def pass_floor(preset: str, turns: int, quick: bool) -> tuple[dict[str, float], int]:
    """Seconds per value of each pass (see the module docstring) over every whole-block chunk of the preset's
    quantized tensors, the passes taking turns (median over turns), and the number of values."""
    params, grads = real_gradients(preset, token_data(quick), torch.device("cpu"))
    chunks = []  # (param, grad, m codes, m scales, v codes, v scales, m fp32, v fp32) of each chunk of whole blocks
    for p, g in zip(params, grads):
        whole = p.numel() // BLOCK * BLOCK
        if p.numel() < adamw8bit.MIN_QUANTIZED or whole < 2 * BLOCK:
            continue
        p_rows, g_rows = p.detach().clone().view(-1)[:whole].view(-1, BLOCK), g.view(-1)[:whole].view(-1, BLOCK)
        m_codes, m_scales = quantize(0.1 * g_rows, M_CODE)  # moments of the gradient's size and shape
        v_codes, v_scales = quantize(0.01 * g_rows * g_rows, V_CODE)
        for first in range(0, whole // BLOCK, CHUNK // BLOCK):
            rows = slice(first, first + CHUNK // BLOCK)
            chunk = [p_rows[rows], g_rows[rows], m_codes.view(-1, BLOCK)[rows], m_scales[rows]]
            chunk += [v_codes.view(-1, BLOCK)[rows], v_scales[rows], 0.1 * g_rows[rows], 0.01 * g_rows[rows] ** 2]
            for t in chunk:
                torch._dynamo.maybe_mark_dynamic(t, 0)
            chunks.append(chunk)
    hyper = torch.tensor(adamw8bit.hyper_parameters(10, 1e-3, (0.9, 0.999), 1e-8, 0.01))
    fused = adamw8bit.compiled_update()
    one_loop = torch.compile(one_loop_update_, options=adamw8bit.INDUCTOR_OPTIONS)
    fp32 = torch.compile(fp32_update_, options=adamw8bit.INDUCTOR_OPTIONS)
    torch_params = [torch.nn.Parameter(c[0].clone()) for c in chunks]
    for tp, c in zip(torch_params, chunks):
        tp.grad = c[1].clone()
    torch_fused = torch.optim.AdamW(torch_params, fused=True)
    passes = {
        "the fused pass (AdamW8bit compiled)": lambda: [fused(*c[:6], hyper) for c in chunks],
        "one loop, scales known (a stand-in)": lambda: [one_loop(*c[:6], hyper) for c in chunks],
        "AdamW with fp32 moments, compiled": lambda: [fp32(c[0], c[1], c[6], c[7], hyper) for c in chunks],
        "torch fused AdamW": torch_fused.step,
    }
    times: dict[str, list[float]] = {name: [] for name in passes}
    for turn in range(turns + 1):  # the first turn compiles and is not timed
        for name, run in passes.items():
            start = time.perf_counter()
            run()
            if turn:
                times[name].append(time.perf_counter() - start)
    values = sum(c[0].numel() for c in chunks)
    return {name: statistics.median(t) / values for name, t in times.items()}, values


def print_floor(preset: str, turns: int, quick: bool) -> None:
    per_value, values = pass_floor(preset, turns, quick)
    fused_adamw = per_value["torch fused AdamW"]
    print(f"\nthe pass alone, per value: {values / 1e6:.1f} M values in whole blocks, {turns} turns")
    rows = [[name, f"{1e9 * t:.3f} ns", f"{t / fused_adamw:.2f}"] for name, t in per_value.items()]
    print(tabulate(rows, headers=["pass", "per value", "x fused AdamW"], tablefmt="github", disable_numparse=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--processes", type=int, default=0, help="fused AdamW alone in this many fresh processes")
    parser.add_argument("--quick", action="store_true", help="random tokens for the gradients (no corpus)")
    parser.add_argument("--floor", action="store_true", help="also time the pass against what one loop could do")
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
    if args.floor:
        print_floor(args.preset, args.turns, args.quick)


if __name__ == "__main__":
    main()
