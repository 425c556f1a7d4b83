"""Predicted vs measured memory of one training step, for every preset x precision x checkpointing mode.

    PYTHONPATH=. python benchmarks/memory_grid.py [--presets 10m 30m 125m] [--batch 2] [--ctx 128]

Exits non-zero if a predicted activation total is more than 5% off the measured one, or if a static
term (weights, gradients, AdamW state) differs by even one byte. The peak and the transient terms
(predicted moment by moment, see minigpt.memory) are compared too, for information.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tabulate import tabulate

from minigpt.memory import estimate, measure
from minigpt.model import COURSE_PRESETS, get_config
from minigpt.precision import PRECISIONS
from minigpt.recompute import CHECKPOINTING_MODES

ACTIVATION_TOLERANCE = 0.05
TRANSIENTS = ("logits", "activation_grads", "weight_copies", "optimizer_step")
HEADERS = [
    "preset",
    "precision",
    "ckpt",
    "act pred MiB",
    "act meas MiB",
    "act err %",
    "static MiB",
    "static",
    "peak pred MiB",
    "peak meas MiB",
    "peak err %",
    "peak at",
    "transients |err| %",
    "s",
]


def error(predicted: int, measured: int) -> float:
    """Error of a prediction in % of the measured value (0 when both are 0)."""
    return 0.0 if predicted == measured else 100.0 * (predicted - measured) / max(measured, 1)


def compare(preset: str, precision: str, mode: str, args) -> tuple[list, dict[str, float], bool]:
    """One configuration: its table row, its errors in %, and whether it meets the targets."""
    t0 = time.perf_counter()
    cfg = get_config(preset, dropout=args.dropout)
    pred = estimate(cfg, args.batch, args.ctx, precision, mode, device=args.device)
    meas = measure(cfg, args.batch, args.ctx, precision, mode, device=args.device)
    names = ("activations", "peak", *TRANSIENTS)
    errors = {name: error(getattr(pred, name), getattr(meas, name)) for name in names}
    static_ok = all(getattr(pred, n) == getattr(meas, n) for n in ("weights", "gradients", "optimizer"))
    ok = static_ok and abs(errors["activations"]) <= 100 * ACTIVATION_TOLERANCE
    mib = [f"{n / 2**20:.2f}" for n in (pred.activations, meas.activations)]
    row = [
        preset,
        precision,
        mode,
        *mib,
        f"{errors['activations']:+.2f}",
        f"{meas.static / 2**20:.1f}",
        "exact" if static_ok else "DIFFERS",
        f"{pred.peak / 2**20:.1f}",
        f"{meas.peak / 2**20:.1f}",
        f"{errors['peak']:+.2f}",
        max(pred.moments, key=pred.moments.get),
        f"{max(abs(errors[name]) for name in TRANSIENTS):.2f}",
        f"{time.perf_counter() - t0:.1f}",
    ]
    return row, errors, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(COURSE_PRESETS))
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS))
    parser.add_argument("--modes", nargs="+", default=list(CHECKPOINTING_MODES))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    start, rows, failures, worst = time.perf_counter(), [], [], {}
    for preset in args.presets:
        for precision in args.precisions:
            for mode in args.modes:
                row, errors, ok = compare(preset, precision, mode, args)
                rows.append(row)
                print(*row, sep="  ", file=sys.stderr, flush=True)  # progress
                for name, err in errors.items():
                    worst[name] = max(worst.get(name, 0.0), abs(err))
                if not ok:
                    failures.append(f"{preset} {precision} {mode}")
    print(tabulate(rows, headers=HEADERS, disable_numparse=True))
    print(
        f"\nbatch {args.batch}, ctx {args.ctx}, dropout {args.dropout}, device {args.device}, "
        f"torch {torch.__version__}: {len(rows)} configurations in {time.perf_counter() - start:.0f} s"
    )
    print("worst |error| %: " + ", ".join(f"{name} {err:.2f}" for name, err in worst.items()))
    if failures:
        print(
            f"FAILED (activations off by more than {100 * ACTIVATION_TOLERANCE:.0f}% or static not exact): "
            + "; ".join(failures)
        )
        return 1
    print(f"OK: every activation total within {100 * ACTIVATION_TOLERANCE:.0f}%, every static term exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
