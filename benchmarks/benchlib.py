"""What the benchmarks share: timing real train() steps, the matmul peak, the machine, tables, targets, plots.

Timing rule: a number is the median of several timed runs after warm-up, reported with its spread,
(max - min) / median of those runs. Steps are timed from outside train(), between its on_step calls,
so everything the teaching loop does in a step counts.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from minigpt.data import TokenData, load_tokens
from minigpt.device import device_info, torch_build
from minigpt.model import DEFAULT_VOCAB_SIZE
from minigpt.train import TrainConfig, train

MIB = 2**20


# ----------------------------------------------------------------------------------------------------------
# Results of a benchmark


@dataclass
class Check:
    """One target of the issue, judged on a measured number."""

    target: str  # what was asked, e.g. "10m fp32: minigpt / hand-written tokens/s >= 0.97"
    measured: str  # what was measured, e.g. "0.985"
    passed: bool

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.target}: {self.measured}"


@dataclass
class Section:
    """A benchmark's part of RESULTS.md: markdown text (tables, notes), its targets and its figures."""

    title: str
    body: str
    checks: list[Check] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # PNG file names, next to RESULTS.md
    seconds: float = 0.0

    def markdown(self) -> str:
        parts = [f"## {self.title}", self.body]
        if self.checks:
            parts.append(
                "Targets:\n\n"
                + "\n".join(f"- **{'PASS' if c.passed else 'FAIL'}** {c.target}: {c.measured}" for c in self.checks)
            )
        parts += [f"![{name}]({name})" for name in self.figures]
        parts.append(f"_{self.seconds:.0f} s_")
        return "\n\n".join(parts)

    def report(self) -> None:
        """Print the section's targets, PASS or FAIL each."""
        for check in self.checks:
            print(check.line())


def table(rows: list[list], headers: list[str]) -> str:
    """A GitHub-markdown table (what RESULTS.md and the terminal both show); a | in a cell is escaped."""
    cells = [[str(cell).replace("|", "\\|") for cell in row] for row in rows]
    return tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)


# ----------------------------------------------------------------------------------------------------------
# Statistics and timing


def median_spread(values: list[float]) -> tuple[float, float]:
    """Median of the runs, and their spread: (max - min) / median, in % of the median."""
    if not values:
        raise ValueError("no timed runs: ask for at least one measured step")
    med = statistics.median(values)
    return med, 100.0 * (max(values) - min(values)) / med if med else 0.0


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: a pair of order statistics of the runs.

    The k-th smallest value lies below the true median with probability P(Binomial(n, 1/2) >= k); k is the
    largest rank for which the chance that the median falls outside [x_k, x_(n+1-k)] stays under 1 - confidence.
    With fewer than 6 runs no such pair exists at 95%, and the interval is the whole range.
    """
    xs, n = sorted(values), len(values)
    below = lambda k: sum(math.comb(n, i) for i in range(k)) / 2**n  # noqa: E731 - P(fewer than k runs below)
    k = 1
    while k < n // 2 and 2 * below(k + 1) <= 1 - confidence:
        k += 1
    return xs[k - 1], xs[n - k]


def clock(device: torch.device) -> float:
    """perf_counter after the device has finished its queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def timed_train_steps(
    cfg: TrainConfig, data: TokenData, warmup: int, steps: int, between: Callable[[], None] | None = None
) -> list[float]:
    """Seconds of `steps` optimizer steps of minigpt.train.train, after `warmup` untimed ones.

    Each step is timed from the end of the previous on_step call to this one: the whole loop counts.
    `between` runs after each step, outside the timing. The last step of a run evaluates the val loss,
    so one more step is run and not timed.
    """
    if warmup < 1 or steps < 1:
        raise ValueError(
            f"need warmup >= 1 (step 1 includes building the model) and steps >= 1, got warmup={warmup}, steps={steps}"
        )
    cfg = replace(
        cfg,
        steps=warmup + steps + 1,
        sample_tokens=0,
        eval_batches=1,
        verbose=False,
        progress=False,
        out=None,
    )
    device = torch.device(cfg.device)
    times: list[float] = []
    mark = [0.0]

    def on_step(record: dict) -> None:
        times.append(clock(device) - mark[0])
        if between is not None:
            between()
        mark[0] = clock(device)

    mark[0] = clock(device)
    train(cfg, data, on_step)
    return times[warmup : warmup + steps]


def square_operands(n: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random n x n matrices in `dtype` on `device`, to time a matmul with."""
    return torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)


def matmul_seconds(a: torch.Tensor, b: torch.Tensor) -> float:
    """Wall seconds of one a @ b, the device's queue drained before and after."""
    t0 = clock(a.device)
    a @ b
    return clock(a.device) - t0


def matmul_peak(dtype: torch.dtype, device: torch.device, sizes: tuple[int, ...], repeats: int) -> dict:
    """This machine's measured matmul FLOP/s in `dtype`: square n x n matmuls, the best size's median.

    Returns {"flops": FLOP/s, "spread": % of that size's runs, "size": n}.
    """
    best = {"flops": 0.0, "spread": 0.0, "size": 0}
    for n in sizes:
        a, b = square_operands(n, dtype, device)
        for _ in range(2):  # warm-up: kernel selection, caches, clocks
            a @ b
        med, spread = median_spread([matmul_seconds(a, b) for _ in range(repeats)])
        if 2 * n**3 / med > best["flops"]:
            best = {"flops": 2 * n**3 / med, "spread": spread, "size": n}
    return best


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::_scaled_dot_product")


def step_profile(cfg: TrainConfig, data: TokenData, steps: int = 2, top: int = 8) -> dict:
    """Where the time of `steps` train() steps goes (after one untimed step), by op, from torch.profiler.

    Returns {"top": [(op, self ms per step, % of the total)], "outside_matmuls": % of self time spent in
    ops that are not matmuls or attention, "matmul_ms": self ms per step in matmuls and attention}. A missed
    speed target points here: what ran instead of matmuls, and how fast the matmuls themselves ran.
    """
    from torch.profiler import ProfilerActivity, profile

    cfg = replace(cfg, steps=steps + 2, sample_tokens=0, eval_batches=1, verbose=False, progress=False, out=None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cfg.device.startswith("cuda") else [])
    prof = profile(activities=activities)
    seen = [0]

    def on_step(record: dict) -> bool:
        seen[0] += 1
        if seen[0] == 1:
            prof.start()  # after the first step: model built, kernels chosen, caches warm
        elif seen[0] == steps + 1:
            prof.stop()
            return True
        return False

    train(cfg, data, on_step)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events) or 1
    ranked = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    matmul = sum(e.self_cpu_time_total for e in events if e.key.startswith(MATMUL_OPS))
    return {
        "top": [(e.key, e.self_cpu_time_total / 1e3 / steps, 100 * e.self_cpu_time_total / total) for e in ranked],
        "outside_matmuls": 100 * (1 - matmul / total),
        "matmul_ms": matmul / 1e3 / steps,
    }


def profile_markdown(title: str, profile: dict, ceiling: str = "") -> str:
    """A step_profile as a sentence and a table, for RESULTS.md; `ceiling` adds a sentence after the first."""
    rows = [[op, f"{ms:,.1f}", f"{share:.1f}"] for op, ms, share in profile["top"]]
    return "\n\n".join(
        [
            f"{title}: {profile['outside_matmuls']:.0f}% of the step's self time is outside matmuls and attention. "
            + (ceiling + " " if ceiling else "")
            + "Top ops by self time (torch.profiler):",
            table(rows, ["op", "self ms per step", "% of step"]),
        ]
    )


# ----------------------------------------------------------------------------------------------------------
# Data, machine, files


def bf16_is_emulated(device: torch.device) -> bool:
    """True on a CPU without bf16 instructions, where a bf16 matmul runs ~15-20x slower than fp32
    (measured on an AVX2-only AMD EPYC): benchmarks shrink or skip their bf16 work there."""
    return device.type == "cpu" and not device_info(device).bf16_is_fast


def size_for(sizes: dict, device: torch.device, quick: bool) -> dict:
    """A benchmark's shape: sizes[quick] on the CPU; sizes["cuda"] on a GPU, where CPU-sized steps take
    a few ms and measure kernel launches rather than the lever being benchmarked."""
    return sizes["cuda"] if device.type == "cuda" and not quick and "cuda" in sizes else sizes[quick]


def quiet_run(size: dict, device: torch.device, **fields) -> TrainConfig:
    """A train() config at a benchmark's size (preset, batch, ctx, steps, eval_batches): no output, no samples."""
    shape = {k: size[k] for k in ("preset", "batch", "ctx", "steps", "eval_batches")}
    return TrainConfig(**shape, device=str(device), sample_tokens=0, verbose=False, progress=False, **fields)


def token_data(quick: bool) -> TokenData:
    """The built-in corpus (tokenized once, cached); in quick mode random tokens (speed and memory
    do not depend on which tokens a batch holds)."""
    if not quick:
        return load_tokens()
    tokens = np.random.default_rng(0).integers(0, DEFAULT_VOCAB_SIZE, 40_000).astype(np.uint16)
    return TokenData(tokens[:36_000], tokens[36_000:], "minigpt-8k", "random tokens (quick)")


def machine_rows(device: torch.device) -> list[tuple[str, str]]:
    """(what, value) rows saying where and when the numbers were measured."""
    info = device_info(device)
    cpu = device_info(torch.device("cpu"))
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    rows = [
        ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("device", info.describe()),
        ("CPU", f"{cpu.name}, {os.cpu_count()} logical CPUs, torch uses {torch.get_num_threads()} threads"),
        ("torch", torch_build()),
        ("python", f"{platform.python_version()} on {platform.platform()}"),
    ]
    if load is not None:
        rows.append(("load average at start (1, 5, 15 min)", ", ".join(f"{x:.2f}" for x in load)))
    return rows


def machine_is_busy() -> str | None:
    """A warning when other programs were using the CPU (timings then mean little), else None."""
    if not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > max(1.0, 0.5 * cores):
        return (
            f"the machine was busy when the run started (load average {load:.1f} on {cores} logical "
            f"CPUs): timings are unreliable; run again on a quiet machine"
        )
    return None


def save_figure(fig, out: Path, name: str) -> str:
    """Save a matplotlib figure as out/name and close it; return the file name."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def pyplot():
    """matplotlib.pyplot with the Agg backend (files only, no window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def main_for(run, doc: str, argv: list[str] | None = None) -> int:
    """The command line every benchmark module shares: --quick, --device, --out; prints its section.

    Exit status 1 when a target is missed (so a script can tell), 0 otherwise.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the code path in seconds")
    parser.add_argument("--device", default="cpu", help="cpu (the course machine) or cuda")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="where the PNG plots go")
    args = parser.parse_args(argv)
    section = run(args.quick, args.out, torch.device(args.device))
    print(section.body)
    section.report()
    return 0 if all(c.passed for c in section.checks) else 1
