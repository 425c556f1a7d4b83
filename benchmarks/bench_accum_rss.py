"""Peak resident memory of `minigpt train` against --accum: accumulation should keep memory constant.

Each row is a fresh `python -m minigpt train` process (one optimizer step of batch x accum sequences); its
peak RSS is read with getrusage(RUSAGE_CHILDREN) in a small parent process of its own, so no row sees
another's peak. The verdict: every row within 5% of accum 1.

train() fixes glibc's mmap threshold at its start (minigpt.heap: 128 KiB when a step accumulates micro-batches,
4 MiB for one micro-batch a step): before it did, accum 256 measured +9-12%,
and as much as 256 optimizer steps without accumulation (the C heap's holes, not anything accumulation holds).

About 3 minutes on an idle 2-core machine (one 10m run each of 1, 16, 64 and 256 micro-batches); --quick (tiny
preset) takes seconds.

    python -m benchmarks.bench_accum_rss [--quick] [--accums 1,16,64,256]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.benchlib import Check, Section
from minigpt.data import TokenData

TOLERANCE = 0.05  # within 5% of accum 1
SIZES = {
    False: dict(preset="10m", batch=2, ctx=128, accums=(1, 16, 64, 256)),
    True: dict(preset="tiny", batch=2, ctx=16, accums=(1, 64)),
}

# Runs in its own interpreter: the only child it waits for is the training run, so RUSAGE_CHILDREN is that run's.
MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if done.returncode:
    sys.exit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # KiB on Linux
"""


def peak_rss_bytes(preset: str, batch: int, ctx: int, accum: int) -> int:
    """Peak RSS of one `minigpt train` run of one optimizer step with this accumulation."""
    train = [sys.executable, "-m", "minigpt", "train", "--preset", preset, "--batch", str(batch), "--ctx", str(ctx)]
    train += ["--accum", str(accum), "--steps", "1", "--device", "cpu", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", MEASURE, *train], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"accum {accum}: {done.stderr.strip()}")
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return int(done.stdout.strip()) * scale


def measure_rows(quick: bool, accums: tuple[int, ...] | None = None) -> tuple[list[dict], str]:
    """One row per accumulation (peak RSS, change from the first row) and the line that says what ran."""
    size = SIZES[quick]
    accums = accums or size["accums"]
    rows, base = [], None
    for accum in accums:
        peak = peak_rss_bytes(size["preset"], size["batch"], size["ctx"], accum)
        base = base or peak
        rows.append(
            {
                "accum": accum,
                "sequences per step": size["batch"] * accum,
                "peak RSS MiB": f"{peak / 2**20:,.0f}",
                "vs first row": f"{peak / base - 1:+.1%}",
                "growth": peak / base - 1,
            }
        )
        print(f"accum_rss: accum {accum}: {peak / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    what = f"{size['preset']}, --batch {size['batch']} --ctx {size['ctx']}, one optimizer step, fp32 on the CPU"
    return rows, what


def verdict(rows: list[dict]) -> Check:
    """Every row within TOLERANCE of the first (accum 1)."""
    worst = max(rows[1:] or rows, key=lambda r: abs(r["growth"]))
    return Check(
        f"peak RSS flat in --accum: accum {rows[0]['accum']} -> {worst['accum']} within {TOLERANCE:.0%}",
        f"{worst['growth']:+.1%}",
        abs(worst["growth"]) <= TOLERANCE,
    )


def body_of(rows: list[dict], what: str) -> str:
    shown = [{k: v for k, v in r.items() if k != "growth"} for r in rows]
    return what + "\n\n" + tabulate(shown, headers="keys", tablefmt="github", disable_numparse=True)


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    """Peak RSS of fresh CPU processes against --accum (the C heap is a CPU matter: `device` is not used)."""
    t0 = time.perf_counter()
    rows, what = measure_rows(quick)
    return Section("Peak RSS against --accum", body_of(rows, what), [verdict(rows)], seconds=time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset, two rows (seconds)")
    parser.add_argument("--accums", help="comma-separated accumulation steps (default: 1,16,64,256)")
    args = parser.parse_args(argv)
    accums = tuple(int(a) for a in args.accums.split(",")) if args.accums else None
    rows, what = measure_rows(args.quick, accums)
    print(body_of(rows, what))
    check = verdict(rows)
    print(check.line())
    return 0 if check.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
