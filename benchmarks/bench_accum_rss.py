"""Peak resident memory of `minigpt train` against --accum: accumulation should keep memory constant.

Each row is a fresh `python -m minigpt train` process (one optimizer step of batch x accum sequences); its
peak RSS is read with getrusage(RUSAGE_CHILDREN) in a small parent process of its own, so no row sees
another's peak. The verdict: every row within 5% of accum 1.

A control column: accum 1 run for as many optimizer steps as the row has micro-batches. It runs the same number
of forward/backward passes without accumulating; where it grows as much as the row, the growth is the C
allocator's heap (glibc keeps freed memory, in pieces, as a process runs), not something accumulation holds.

    python -m benchmarks.bench_accum_rss [--quick] [--accums 1,16,64,256]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tabulate import tabulate

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


def peak_rss_bytes(preset: str, batch: int, ctx: int, accum: int, steps: int = 1) -> int:
    """Peak RSS of one `minigpt train` run of `steps` optimizer steps with this accumulation."""
    train = [sys.executable, "-m", "minigpt", "train", "--preset", preset, "--batch", str(batch), "--ctx", str(ctx)]
    train += ["--accum", str(accum), "--steps", str(steps), "--device", "cpu", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", MEASURE, *train], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"accum {accum}: {done.stderr.strip()}")
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return int(done.stdout.strip()) * scale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset, two rows (seconds)")
    parser.add_argument("--accums", help="comma-separated accumulation steps (default: 1,16,64,256)")
    parser.add_argument("--no-control", action="store_true", help="skip the accum-1 control runs (half the time)")
    args = parser.parse_args(argv)
    size = SIZES[args.quick]
    accums = tuple(int(a) for a in args.accums.split(",")) if args.accums else size["accums"]
    rows, base = [], None
    for accum in accums:
        peak = peak_rss_bytes(size["preset"], size["batch"], size["ctx"], accum)
        base = base or peak
        rows.append(
            {
                "accum": accum,
                "sequences per step": size["batch"] * accum,
                "peak RSS MiB": peak / 2**20,
                "vs first row": f"{peak / base - 1:+.1%}",
            }
        )
        if not args.no_control:  # the same number of forward/backward passes, without accumulation
            control = peak_rss_bytes(size["preset"], size["batch"], size["ctx"], 1, steps=accum)
            rows[-1]["control: accum 1 x steps MiB"] = control / 2**20
    print(f"{size['preset']}, --batch {size['batch']} --ctx {size['ctx']}, one step, fp32 on the CPU")
    print(tabulate(rows, headers="keys", tablefmt="github", floatfmt=",.0f"))
    worst = max(abs(r["peak RSS MiB"] * 2**20 / base - 1) for r in rows)
    flat = worst <= TOLERANCE
    print(
        f"{'flat' if flat else 'NOT flat'}: the largest difference from the first row is {worst:.1%} "
        f"(target: within {TOLERANCE:.0%})"
    )
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
