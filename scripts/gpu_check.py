"""One prepared command for a lent GPU: run every CUDA-only path of minigpt, predicted against measured.

    python scripts/gpu_check.py                    every check on the GPU found here (make gpu-check)
    python scripts/gpu_check.py --chapters         also chapters 03, 04, 09 and 10 at SCALE = "full"
    python scripts/gpu_check.py --device cpu       the checks' plumbing on the CPU at tiny sizes (the tests)
    python scripts/gpu_check.py --only NAME ...    some checks; --list names them all

Without a CUDA GPU (and without --device cpu) it prints one line and exits 0: nothing is checked.
Each check runs in a process of its own under its own time limit, so a crash, a hang or a CUDA error in one
never stops the others; report.md and report.json in --out (default gpu_check_out/) are rewritten after
every check, so they exist whatever happens. Exit code 1 when a check failed, erred or timed out.

Time on one H100-class GPU, from FLOPs: a training step costs 6 x parameters x tokens FLOPs. The largest
default check steps are 10m (about 10M parameters with the tied embedding) on 8 x 256 = 2,048 tokens:
1.3e11 FLOPs, under 1 ms at 200 TFLOP/s. The default run does about 250 such steps (metered steps run 3 times
each; the batch search about 9 tries of up to 64 x 256 tokens; 2 x 60 fp16/fp32 steps; 20 steps each under
torchrun), about 1e14 FLOPs, under a second of compute. What takes the time is per-process start (Python,
torch, the CUDA context, cuBLAS: about 5 s, 15 processes) and the Python-side meters that see every op
(about 10 s a metered step), so about 3 minutes in all; DEFAULT_BUDGET_S (540 s) stops the run before
10 minutes whatever happens. --chapters adds about 4,000 steps of 10m and 30m (chapter 9 trains 30m, about
30M parameters, on 16 x 256 tokens: 7e11 FLOPs a step), 3e15 FLOPs, seconds of compute but several minutes of
Python; it gets a budget of its own (CHAPTER_LIMIT_S a chapter).
"""

import argparse
import contextlib
import io
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package, when the script runs from a checkout that did not install it

DEFAULT_OUT = "gpu_check_out"
DEFAULT_BUDGET_S = 540  # the whole default run, under 10 minutes on one GPU
CHAPTER_LIMIT_S = 600
CHAPTERS_AT_FULL = ("03", "04", "09", "10")

# The tolerances the CPU tests hold the same paths to (the test that sets each is named in the report)
PEAK_TOLERANCE = 0.05  # tests/test_memory.py PEAK_TOLERANCE: the moments, the transients and the peak
ACTIVATION_TOLERANCE = 0.05  # tests/test_memory.py ACTIVATION_TOLERANCE
LEVER_TOLERANCE = 0.01  # tests/test_memory.py LEVER_TOLERANCE; test_loss_chunks_and_offloading...; test_lora.py
BUDGET_TOLERANCE = 0.05  # tests/test_budget.py: the auto budget within 5% of what is free


def positive_seconds(text: str) -> float:
    """--budget-s: a number of seconds above 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return seconds


class Skip(Exception):
    """A check that cannot run here (too few GPUs, a CUDA-only path on the CPU): its reason is the report's."""


@dataclass(frozen=True)
class Sizes:
    """The shapes the checks run: real ones on a GPU, tiny ones for the plumbing on a CPU."""

    preset: str
    batch: int
    ctx: int
    precision: str  # the 16-bit precision the memory checks use (fp32 on the CPU: its tests' first case)
    checkpointing: str
    train_steps: int


def sizes_for(device: torch.device) -> Sizes:
    """10m at 8 x 256 in this GPU's 16-bit precision with full checkpointing; tiny at 2 x 32 on the CPU."""
    if device.type != "cuda":
        return Sizes("tiny", 2, 32, "fp32", "none", 6)
    from minigpt.device import device_info

    return Sizes("10m", 8, 256, "bf16" if device_info(device).bf16_is_fast else "fp16", "full", 60)


# ----------------------------------------------------------------------------------------------------------
# Comparisons: predicted against measured, with the tolerance and where it comes from


def compare(what: str, predicted: float, measured: float, tolerance: float, source: str) -> dict:
    """One row of the report: the relative error |predicted - measured| / measured against the tolerance."""
    error = abs(predicted - measured) / measured if measured else (0.0 if predicted == measured else math.inf)
    return dict(what=what, predicted=predicted, measured=measured, error=error, tolerance=tolerance, source=source)


def condition(what: str, ok: bool, value: object, source: str) -> dict:
    """A row that is a yes/no fact rather than a number against a prediction."""
    return dict(what=what, predicted=None, measured=value, error=None, tolerance=None, source=source, ok=bool(ok))


def row_passes(row: dict) -> bool:
    return row["ok"] if "ok" in row else row["error"] <= row["tolerance"]


def breakdown_rows(pred, meas, peak_tol: float, source: str, moments_tol: float | None = None) -> list[dict]:
    """The peak, the activations and every moment of two MemoryBreakdowns, compared."""
    rows = [compare("peak", pred.peak, meas.peak, peak_tol, source)]
    rows.append(
        compare("activations", pred.activations, meas.activations, ACTIVATION_TOLERANCE, "ACTIVATION_TOLERANCE")
    )
    for moment, value in meas.moments.items():
        if moment in pred.moments:
            rows.append(compare(f"moment: {moment}", pred.moments[moment], value, moments_tol or peak_tol, source))
    return rows


# ----------------------------------------------------------------------------------------------------------
# The checks. Each takes (device, sizes, out folder) and returns {"figures": ..., "rows": [...], "note": ...}


def check_allocator_meter(device: torch.device, s: Sizes, out: Path) -> dict:
    """measure() on the device: AllocatorMeter's CUDA memory events and max_memory_allocated, against estimate()."""
    import warnings

    from minigpt import memory
    from minigpt.memory.meters import AllocatorMeter
    from minigpt.model import get_config

    cfg = get_config(s.preset)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        meas = memory.measure(cfg, s.batch, s.ctx, s.precision, s.checkpointing, device=device)
    pred = memory.estimate(cfg, s.batch, s.ctx, s.precision, s.checkpointing, device=device.type)
    fallback = [str(w.message) for w in caught if "records no allocations" in str(w.message)]
    rows = breakdown_rows(pred, meas, PEAK_TOLERANCE, "tests/test_memory.py PEAK_TOLERANCE")
    rows.append(condition("the profiler recorded the allocator's events", not fallback, not fallback, "measure.py"))
    rows.append(condition("AllocatorMeter available", AllocatorMeter(device).available, True, "meters.py"))
    figures = {"predicted": pred.to_dict(), "measured": meas.to_dict()}
    return {"figures": figures, "rows": rows, "note": f"{s.preset} {s.batch}x{s.ctx} {s.precision} {s.checkpointing}"}


def check_memory_snapshot(device: torch.device, s: Sizes, out: Path) -> dict:
    """memory_snapshot(): _record_memory_history, _dump_snapshot and stopping the recording again."""
    import pickle

    from minigpt import memory
    from minigpt.model import get_config

    if device.type != "cuda":
        with contextlib.suppress(RuntimeError):
            memory.memory_snapshot(out / "snapshot.pickle", get_config("tiny"), 1, 8, device=device)
        raise Skip("CUDA only: memory_snapshot records the CUDA allocator (its refusal on this device was checked)")
    path = memory.memory_snapshot(
        out / "snapshot.pickle", get_config(s.preset), s.batch, s.ctx, s.precision, device=device
    )
    with open(path, "rb") as f:
        snap = pickle.load(f)  # noqa: S301 - the file this process just wrote
    traces = sum(len(t) for t in snap.get("device_traces", []))
    recording_after = torch.cuda.memory._snapshot().get("device_traces", [[]])
    rows = [
        condition("snapshot has segments", bool(snap.get("segments")), len(snap.get("segments", [])), "pictures.py"),
        condition("snapshot has alloc/free events", traces > 0, traces, "pictures.py"),
        condition(
            "recording stopped afterwards", not any(recording_after), sum(map(len, recording_after)), "pictures.py"
        ),
    ]
    return {"figures": {"bytes": path.stat().st_size, "events": traces}, "rows": rows, "note": str(path.name)}


# `minigpt memory --measure` for each lever: (flags, tolerance on the peak and the moments, where it comes from)
LEVERS = {
    "8bit": (["--optimizer", "adamw8bit"], LEVER_TOLERANCE, "tests/test_memory.py LEVER_TOLERANCE"),
    "in_backward": (["--optimizer-in-backward"], LEVER_TOLERANCE, "tests/test_memory.py LEVER_TOLERANCE"),
    "loss_chunks": (["--loss-chunks", "4"], 0.01, "tests/test_memory.py test_loss_chunks_and_offloading (1%)"),
    "offload": (["--offload-activations"], 0.01, "tests/test_memory.py test_loss_chunks_and_offloading (1%)"),
    "lora": (["--lora-rank", "8"], 0.01, "tests/test_lora.py (1%, 5% for fp16)"),
    "qlora": (["--lora-rank", "8", "--base-dtype", "nf4"], 0.01, "tests/test_lora.py (1%, 5% for fp16)"),
}


def breakdown_from(printed: dict):
    """A MemoryBreakdown back from its to_dict() (the JSON `minigpt memory` prints)."""
    from dataclasses import fields

    from minigpt.memory import MemoryBreakdown

    return MemoryBreakdown(**{f.name: printed[f.name] for f in fields(MemoryBreakdown)})


def memory_cli(device: torch.device, s: Sizes, flags: list[str]) -> dict:
    """`minigpt memory --measure --json` with these flags, run in this process; its JSON."""
    from minigpt.cli import main

    argv = ["memory", "--measure", "--json", "--device", str(device), "--preset", s.preset]
    argv += [
        "--batch",
        str(s.batch),
        "--ctx",
        str(s.ctx),
        "--precision",
        s.precision,
        "--checkpointing",
        s.checkpointing,
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv + flags)
    if code != 0:
        raise RuntimeError(f"minigpt {' '.join(argv + flags)} exited {code}")
    return json.loads(printed.getvalue())


def lever_check(lever: str) -> Callable[[torch.device, Sizes, Path], dict]:
    """The check of one lever: `memory --measure` with it, predicted against measured."""
    flags, tolerance, source = LEVERS[lever]

    def check(device: torch.device, s: Sizes, out: Path) -> dict:
        if lever == "in_backward" and s.precision == "fp16":  # the step in backward refuses the GradScaler
            s = Sizes(s.preset, s.batch, s.ctx, "fp32", s.checkpointing, s.train_steps)
        tol = 0.05 if lever in ("lora", "qlora") and s.precision == "fp16" else tolerance
        result = memory_cli(device, s, flags)
        pred, meas = (breakdown_from(result[k]) for k in ("predicted", "measured"))
        rows = breakdown_rows(pred, meas, tol, source, moments_tol=max(tol, PEAK_TOLERANCE))
        for term in ("weights", "gradients", "optimizer"):
            rows.append(compare(term, getattr(pred, term), getattr(meas, term), tol, source))
        if lever == "offload":  # what leaves the device: to the byte in the CPU tests
            rows.append(compare("offloaded", pred.offloaded or 0, meas.offloaded or 0, 0.0, "test_loss_chunks (exact)"))
        return {"figures": result, "rows": rows, "note": " ".join(flags) + f" ({s.precision})"}

    check.__doc__ = f"`minigpt memory --measure {' '.join(flags)}` on the device, predicted against measured."
    return check


def check_offload_gradients(device: torch.device, s: Sizes, out: Path) -> dict:
    """Pinned-memory offloading: the gradients are bitwise those of the same step without it (as on the CPU)."""
    from minigpt import step
    from minigpt.config import TrainConfig
    from minigpt.model import get_config

    cfg = get_config(s.preset)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (s.batch, s.ctx + 1), generator=gen)
    xy = (tokens[:, :-1].to(device), tokens[:, 1:].to(device))
    grads = {}
    for offload in (False, True):
        tc = TrainConfig(precision=s.precision, checkpointing=s.checkpointing, offload_activations=offload)
        torch.manual_seed(0)
        state = step.build_step_state(cfg, tc, device)
        offloader = step.new_offloader(state, device)
        with offloader or contextlib.nullcontext():
            step.forward_backward(state.model, [xy], device, s.precision, state.scaler, offloader)
        grads[offload] = {n: p.grad.detach().clone() for n, p in state.model.named_parameters() if p.grad is not None}
        moved = offloader.peak_offloaded_bytes if offloader else 0
    differ = [n for n in grads[False] if not torch.equal(grads[False][n], grads[True][n])]
    rows = [
        condition(
            "gradients bitwise equal with offloading", not differ, differ[:3] or "all equal", "tests/test_offload.py"
        ),
        condition("something was offloaded", moved > 0, moved, "offload.py"),
    ]
    return {"figures": {"offloaded_bytes": moved}, "rows": rows, "note": f"{s.preset} {s.precision} {s.checkpointing}"}


def check_find_max_batch_size(device: torch.device, s: Sizes, out: Path) -> dict:
    """find_max_batch_size against a real CUDA out-of-memory (a capped allocator), and the memory freed after."""
    from minigpt import memory
    from minigpt.batch_search import find_max_batch_size
    from minigpt.device import cuda_index
    from minigpt.model import get_config

    cfg, ctx, precision = get_config(s.preset), s.ctx, s.precision
    predicted = lambda b: memory.estimate(cfg, b, ctx, precision, device=device.type).peak  # noqa: E731
    high = 64 if device.type == "cuda" else 8
    target = 3 * high // 8  # a cap half-way between the predicted peaks of two batches in the middle of the range
    cap = (predicted(target) + predicted(target + 1)) // 2
    trace: list = []
    if device.type == "cuda":
        before = _allocated_without_workspaces(device)
        total = torch.cuda.get_device_properties(device).total_memory
        index = cuda_index(device)  # set_per_process_memory_fraction wants an index, not a bare `cuda`
        torch.cuda.set_per_process_memory_fraction(cap / total, index)  # past it the allocator raises OOM
        try:
            found = find_max_batch_size(cfg, ctx, precision, device=device, high=high, trace=trace)
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, index)
        after = _allocated_without_workspaces(device)
    else:
        before = after = 0
        found = find_max_batch_size(cfg, ctx, precision, device=device, budget_bytes=cap, high=high, trace=trace)
    out_of_memory = sum(1 for _, fits, peak in trace if not fits and peak is None)
    freed = condition("memory freed after the search", after <= before, f"{after - before:+,} bytes", "batch_search.py")
    if device.type == "cuda":
        # The cap limits what the allocator reserves, which is more than the tensors it hands out (its blocks are
        # rounded up and split): so the batch found sits below the one the prediction alone puts at the cap
        # (`target`). What is exact: the batch found ran and the next one ran out of memory; and the prediction
        # for the batch found matches the peak measured when it ran, within PEAK_TOLERANCE.
        tried = {batch: (fits, peak) for batch, fits, peak in trace}
        edge = tried.get(found, (False, None))[0] and (found == high or tried.get(found + 1, (True, 0))[0] is False)
        source = "batch_search.py: the largest batch that runs"
        rows = [condition(f"batch {found} ran, batch {found + 1} ran out of memory", edge, found, source)]
        measured_peak = tried.get(found, (False, None))[1]
        if measured_peak:
            src = "tests/test_memory.py PEAK_TOLERANCE"
            rows.append(compare(f"peak of batch {found}", predicted(found), measured_peak, PEAK_TOLERANCE, src))
        under = predicted(found) <= cap
        rows.append(condition(f"predicted peak of batch {found} under the cap", under, cap, "memory.py"))
        # and not far below it: what the next batch would add is within PEAK_TOLERANCE (the prediction) plus as
        # much again (the allocator's rounding of what it reserves) of the cap
        near = predicted(found + 1) >= cap * (1 - 2 * PEAK_TOLERANCE)
        gap = f"{(cap - predicted(found + 1)) / cap:+.1%} of the cap"
        rows.append(condition(f"predicted peak of batch {found + 1} near the cap", near, gap, "2 x PEAK_TOLERANCE"))
        rows += [freed, condition("a try ran out of memory", out_of_memory > 0, out_of_memory, "batch_search.py")]
    else:
        rows = [compare("batch found", target, max(found, 1), 0.0, "tests/test_batch_search.py (exact)"), freed]
    figures = {"cap_bytes": cap, "target": target, "found": found, "trace": trace, "allocated_before": before}
    figures["allocated_after"] = after
    return {"figures": figures, "rows": rows, "note": f"{s.preset} ctx {ctx} {precision}, cap {cap / 2**20:,.0f} MiB"}


def _allocated_without_workspaces(device: torch.device) -> int:
    """Bytes of live tensors, leaving out cuBLAS's workspaces: one per thread that ran a matmul (the backward
    runs on a thread of its own), kept by the caching allocator for the process's life: not a leak of the search."""
    torch.cuda.synchronize(device)
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated(device)


def check_fp16_gradscaler(device: torch.device, s: Sizes, out: Path) -> dict:
    """fp16 with the GradScaler trains as fp32 does: same data, same start, final losses within 0.1 nats."""
    from minigpt.config import TrainConfig
    from minigpt.train import train

    base = dict(preset=s.preset, batch=s.batch, ctx=s.ctx, steps=s.train_steps, device=str(device), eval_batches=1)
    base.update(sample_tokens=0, progress=False, verbose=False)
    runs = {p: train(TrainConfig(precision=p, **base)) for p in ("fp32", "fp16")}
    last = lambda r: sum(r.losses[-5:]) / len(r.losses[-5:])  # noqa: E731
    fp16 = runs["fp16"]
    scales = [r["scale"] for r in fp16.history if r["scale"] is not None]
    rows = [
        compare(
            "final loss (fp16 vs fp32, nats)", last(fp16), last(runs["fp32"]), 0.1 / last(runs["fp32"]), "0.1 nats"
        ),
        condition("every fp16 loss finite", all(math.isfinite(x) for x in fp16.losses), fp16.losses[-1], "train.py"),
        condition("the GradScaler ran", device.type != "cuda" or bool(scales), scales[-1:] or None, "step.py"),
        condition("skipped steps under a quarter", fp16.skipped_steps < s.train_steps / 4, fp16.skipped_steps, "ch. 4"),
    ]
    figures = {p: r.summary() | {"losses": r.losses} for p, r in runs.items()}
    return {"figures": figures, "rows": rows, "note": f"{s.preset} {s.batch}x{s.ctx}, {s.train_steps} steps"}


def check_plan_budget_auto(device: torch.device, s: Sizes, out: Path) -> dict:
    """`minigpt plan --budget auto`: the budget from cudaMemGetInfo (MemAvailable on a CPU), and a plan that fits."""
    from minigpt.budget import AUTO_HEADROOM, available_bytes
    from minigpt.cli import main

    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else available_bytes(device)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["plan", "--budget", "auto", "--device", device.type, "--preset", s.preset, "--json"])
    plan = json.loads(printed.getvalue())
    rows = [
        compare(
            "auto budget = free x (1 - headroom)",
            plan["budget_bytes"],
            free * (1 - AUTO_HEADROOM),
            BUDGET_TOLERANCE,
            "tests/test_budget.py (5%)",
        ),
        condition("the plan fits", code == 0 and plan["fits"], plan["fits"], "plan_budget.py"),
    ]
    return {"figures": {"free_bytes": free, "plan": plan}, "rows": rows, "note": plan["budget"]}


def torchrun_check(shard: str) -> Callable[[torch.device, Sizes, Path], dict]:
    """A short `minigpt train` on 2 GPUs under torchrun (NCCL): DDP, or FSDP with its bf16 policy."""

    def check(device: torch.device, s: Sizes, out: Path) -> dict:
        gpus = torch.cuda.device_count() if device.type == "cuda" else 0
        if gpus < 2:
            raise Skip(f"needs 2 or more CUDA GPUs for NCCL, found {gpus}")
        precision = "bf16" if s.precision == "bf16" else "fp32"
        argv = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "minigpt", "train"]
        argv += ["--preset", "tiny", "--steps", "20", "--batch", "4", "--ctx", "64", "--device", "cuda"]
        argv += ["--precision", precision, "--shard", shard, "--json", "--sample-tokens", "0"]
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        first, final = summary["first_train_loss"], summary["final_train_loss"]
        rows = [condition("the loss went down over 20 steps", final < first, f"{first:.3f} -> {final:.3f}", "train.py")]
        return {"figures": summary, "rows": rows, "note": f"--shard {shard} --precision {precision}, NCCL"}

    check.__doc__ = f"`torchrun --nproc_per_node 2 -m minigpt train --shard {shard}` over NCCL: it runs and learns."
    return check


def set_scale(source: str, scale: str) -> str:
    """A chapter's text with its one SCALE line set to `scale` (ValueError if the chapter has none)."""
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith('SCALE = "')]
    if len(hits) != 1:
        raise ValueError(f"expected one SCALE line, found {len(hits)}")
    lines[hits[0]] = f'SCALE = "{scale}"\n'
    return "".join(lines)


def chapter_check(number: str) -> Callable[[torch.device, Sizes, Path], dict]:
    """Chapter `number` run top to bottom at SCALE = "full" in a fresh kernel; the executed notebook kept."""

    def check(device: torch.device, s: Sizes, out: Path) -> dict:
        import jupytext
        import nbformat
        from nbclient import NotebookClient

        if device.type != "cuda":
            raise Skip('SCALE = "full" is sized for a GPU')
        source = next((ROOT / "chapters").glob(f"{number}_*.md"))
        nb = jupytext.reads(set_scale(source.read_text(encoding="utf-8"), "full"), fmt="md:myst")
        started = time.perf_counter()
        client = NotebookClient(nb, timeout=CHAPTER_LIMIT_S, kernel_name="python3")
        client.resources = {"metadata": {"path": str(ROOT / "chapters")}}
        try:
            client.execute()
        finally:
            (out / "chapters").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out / "chapters" / f"{source.stem}_full.ipynb")
        rows = [condition("every cell ran", True, f"{len(nb.cells)} cells", source.name)]
        return {"figures": {"seconds": time.perf_counter() - started}, "rows": rows, "note": source.name}

    check.__doc__ = f'chapter {number} at SCALE = "full", executed in a fresh kernel'
    return check


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[torch.device, Sizes, Path], dict]
    limit_s: int  # its own time limit, in seconds
    optional: bool = False  # runs only when asked for (--chapters)


CHECKS = [
    Check("allocator_meter", check_allocator_meter, 90),
    Check("memory_snapshot", check_memory_snapshot, 60),
    *[Check(f"memory_lever_{lever}", lever_check(lever), 60) for lever in LEVERS],
    Check("offload_gradients", check_offload_gradients, 60),
    Check("find_max_batch_size", check_find_max_batch_size, 120),
    Check("fp16_gradscaler", check_fp16_gradscaler, 90),
    Check("plan_budget_auto", check_plan_budget_auto, 60),
    Check("nccl_ddp", torchrun_check("none"), 120),
    Check("nccl_fsdp_bf16", torchrun_check("fsdp"), 120),
    *[Check(f"chapter_{n}_full", chapter_check(n), CHAPTER_LIMIT_S, optional=True) for n in CHAPTERS_AT_FULL],
]
BY_NAME = {c.name: c for c in CHECKS}


# ----------------------------------------------------------------------------------------------------------
# Running a check: in a process of its own (the default), or in this one under SIGALRM (--in-process)


class CheckTimeout(Exception):
    pass


def first_line(check: Check) -> str:
    return (check.run.__doc__ or check.name).strip().splitlines()[0]


def unfinished(check: Check, verdict: str, note: str, started: float | None = None) -> dict:
    """The result of a check that gave none of its own: timed out, crashed, or never started."""
    seconds = 0.0 if started is None else round(time.perf_counter() - started, 2)
    return dict(
        name=check.name,
        what=first_line(check),
        limit_s=check.limit_s,
        verdict=verdict,
        note=note[:500],
        seconds=seconds,
    )


def run_here(check: Check, device: torch.device, out: Path, fail: set[str], hang: set[str]) -> dict:
    """Run one check in this process: its result with verdict and seconds, whatever it raises."""
    started = time.perf_counter()
    result: dict = {
        "name": check.name,
        "what": (check.run.__doc__ or "").strip().splitlines()[0],
        "limit_s": check.limit_s,
    }
    try:
        if check.name in fail:
            raise RuntimeError("injected failure (--fail)")
        if check.name in hang:
            time.sleep(10 * check.limit_s)
        result.update(check.run(device, sizes_for(device), out))
        result["verdict"] = "PASS" if all(row_passes(r) for r in result["rows"]) else "FAIL"
    except Skip as why:
        result.update(verdict="SKIP", note=str(why))
    except CheckTimeout:
        result.update(verdict="TIMEOUT", note=f"over its limit of {check.limit_s} s")
    except Exception as error:  # noqa: BLE001 - a failing check is reported, and the others still run
        result.update(verdict="ERROR", note=f"{type(error).__name__}: {error}"[:500])
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def run_in_process(check: Check, limit: float, device, out: Path, fail: set[str], hang: set[str]) -> dict:
    """run_here with a SIGALRM time limit (main thread, POSIX): for the tests, which cannot afford a process a check."""

    def alarm(*_):
        raise CheckTimeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return run_here(check, device, out, fail, hang)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_in_subprocess(check: Check, limit: float, args: argparse.Namespace, out: Path) -> dict:
    """The check in a fresh Python process of its own, killed with its process group past `limit` seconds."""
    result_file = out / f".{check.name}.json"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--run-one", check.name, "--device", args.device, "--out", str(out)]
    cmd += [f"--fail={n}" for n in args.fail] + [f"--hang={n}" for n in args.hang]
    started = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # its own group: torchrun's workers and a notebook's kernel too
        output, _ = child.communicate()
        return unfinished(check, "TIMEOUT", f"killed after its limit of {limit:.0f} s", started)
    if result_file.exists():
        result = json.loads(result_file.read_text())
        result_file.unlink()
        return result
    tail = output.decode(errors="replace").strip().splitlines()[-3:]
    return unfinished(
        check, "ERROR", f"the process exited {child.returncode} with no result: {' | '.join(tail)}", started
    )


# ----------------------------------------------------------------------------------------------------------
# The report


def environment(device: torch.device) -> dict:
    """Where the checks ran: device, torch, CUDA, the GPUs."""
    from minigpt.device import device_info

    return {
        "device": device_info(device).describe(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def fmt(value: object) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.4g}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{int(value):,}"
    return str(value)


def write_report(out: Path, env: dict, results: list[dict], seconds: float) -> None:
    """report.json (everything) and report.md (a table of verdicts, then each check's comparisons)."""
    counts = {
        v: sum(r["verdict"] == v for r in results) for v in ("PASS", "FAIL", "ERROR", "TIMEOUT", "SKIP", "NOT RUN")
    }
    report = {**env, "seconds": round(seconds, 1), "counts": counts, "checks": results}
    write_text(out / "report.json", json.dumps(report, indent=1, default=str) + "\n")
    lines = ["# minigpt gpu check", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += [f"- total: {seconds:.0f} s; " + ", ".join(f"{v} {k}" for k, v in counts.items() if v), ""]
    lines += ["| check | verdict | seconds | what |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['verdict']} | {r['seconds']:.1f} | {r.get('note') or r['what']} |" for r in results]
    for r in results:
        if not r.get("rows"):
            continue
        lines += ["", f"## {r['name']}: {r['verdict']}", "", r["what"], ""]
        lines += ["| figure | predicted | measured | error | tolerance (from) | verdict |", "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            error = "" if row["error"] is None else f"{row['error']:.2%}"
            tol = "" if row["tolerance"] is None else f"{row['tolerance']:.0%} "
            verdict = "PASS" if row_passes(row) else "FAIL"
            predicted = "" if row["predicted"] is None else fmt(row["predicted"])
            cells = [row["what"], predicted, fmt(row["measured"]), error, f"{tol}({row['source']})", verdict]
            lines.append("| " + " | ".join(cells) + " |")
    write_text(out / "report.md", "\n".join(lines) + "\n")


def write_text(path: Path, text: str) -> None:
    """The file whole or not at all (minigpt.files): a run killed while writing keeps the last whole report."""
    from minigpt.files import write_atomically

    write_atomically(path, lambda f: f.write(text.encode("utf-8")))


# ----------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the plumbing at tiny sizes")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"report folder (default: {DEFAULT_OUT}/)")
    p.add_argument("--only", nargs="+", choices=list(BY_NAME), metavar="NAME", help="these checks alone")
    p.add_argument("--chapters", action="store_true", help='also chapters 03, 04, 09, 10 at SCALE = "full" (minutes)')
    p.add_argument(
        "--budget-s", type=positive_seconds, default=DEFAULT_BUDGET_S, help="stop starting checks after this long"
    )
    p.add_argument("--in-process", action="store_true", help="every check in this process (SIGALRM limits)")
    p.add_argument("--list", action="store_true", help="name the checks and stop")
    p.add_argument("--run-one", help=argparse.SUPPRESS)  # the child's side of run_in_subprocess
    p.add_argument("--fail", action="append", default=[], help=argparse.SUPPRESS)  # tests: make a check raise
    p.add_argument("--hang", action="append", default=[], help=argparse.SUPPRESS)  # tests: make a check hang
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if args.list:
        for c in CHECKS:
            print(f"{c.name:28} {c.limit_s:4d} s  {first_line(c)}")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA GPU found (torch {torch.__version__}): nothing was checked")
        return 0
    device = torch.device(args.device)
    fail, hang = set(args.fail), set(args.hang)
    if args.run_one:  # the child: one check, its result as a file for the parent
        out.mkdir(parents=True, exist_ok=True)
        result = run_here(BY_NAME[args.run_one], device, out, fail, hang)
        (out / f".{args.run_one}.json").write_text(json.dumps(result, default=str))
        return 0
    chosen = [BY_NAME[n] for n in args.only] if args.only else [c for c in CHECKS if args.chapters or not c.optional]
    env, results, started = environment(device), [], time.perf_counter()
    print(f"gpu-check on {env['device']}, torch {env['torch']}, CUDA {env['cuda']}: {len(chosen)} checks -> {out}/")
    if env["gpus"] < 2:
        print(f"  NCCL checks (nccl_ddp, nccl_fsdp_bf16) skipped: they need 2 or more GPUs, found {env['gpus']}")
    for check in chosen:
        left = args.budget_s - (time.perf_counter() - started)
        budget = CHAPTER_LIMIT_S if check.optional else left  # the chapters have a budget of their own
        if budget < 5:
            result = unfinished(check, "NOT RUN", f"the run's budget of {args.budget_s:.0f} s was spent")
        elif args.in_process:
            result = run_in_process(check, min(check.limit_s, budget), device, out, fail, hang)
        else:
            result = run_in_subprocess(check, min(check.limit_s, budget), args, out)
        results.append(result)
        print(
            f"  {result['verdict']:7} {check.name:26} {result['seconds']:6.1f} s  {result.get('note', '')}", flush=True
        )
        write_report(out, env, results, time.perf_counter() - started)
    bad = [
        r["name"] for r in results if r["verdict"] in ("FAIL", "ERROR", "TIMEOUT", "NOT RUN")
    ]  # unchecked is not green
    print(f"report: {out / 'report.md'} and report.json; " + (f"not green: {', '.join(bad)}" if bad else "all green"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
