"""Predicted vs measured memory of one training step, for every preset x precision x checkpointing mode.

    PYTHONPATH=. python benchmarks/memory_grid.py [--presets 10m 30m 125m] [--batch 2] [--ctx 128]

Exits non-zero if a predicted activation total is more than 5% off the measured one, or if a static
term (weights, gradients, AdamW state) differs by even one byte. The peak and the transient terms are
printed for information (they are predicted moment by moment; see minigpt.memory).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tabulate import tabulate

from minigpt.checkpointing import CHECKPOINTING_MODES
from minigpt.memory import estimate, measure
from minigpt.model import COURSE_PRESETS, get_config
from minigpt.precision import PRECISIONS

ACTIVATION_TOLERANCE = 0.05
TRANSIENTS = ("logits", "activation_grads", "weight_copies", "optimizer_step")


def error(predicted: int, measured: int) -> float:
    """Relative error of a prediction, in % of the measured value (0 when both are 0)."""
    return 0.0 if predicted == measured else 100.0 * (predicted - measured) / max(measured, 1)


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

    rows, failures, worst, t_start = [], [], {"activations": 0.0, "peak": 0.0}, time.perf_counter()
    worst.update({name: 0.0 for name in TRANSIENTS})
    for preset in args.presets:
        cfg = get_config(preset, dropout=args.dropout)
        for precision in args.precisions:
            for mode in args.modes:
                t0 = time.perf_counter()
                pred = estimate(cfg, args.batch, args.ctx, precision, mode, device=args.device)
                meas = measure(cfg, args.batch, args.ctx, precision, mode, device=args.device)
                act_err, peak_err = error(pred.activations, meas.activations), error(pred.peak, meas.peak)
                static_ok = (pred.weights, pred.gradients, pred.optimizer) == (
                    meas.weights, meas.gradients, meas.optimizer)
                worst["activations"] = max(worst["activations"], abs(act_err))
                worst["peak"] = max(worst["peak"], abs(peak_err))
                for name in TRANSIENTS:
                    worst[name] = max(worst[name], abs(error(getattr(pred, name), getattr(meas, name))))
                if abs(act_err) > 100 * ACTIVATION_TOLERANCE or not static_ok:
                    failures.append(f"{preset} {precision} {mode}")
                rows.append([
                    preset, precision, mode, f"{pred.activations / 2**20:.2f}", f"{meas.activations / 2**20:.2f}",
                    f"{act_err:+.2f}", f"{meas.static / 2**20:.1f}", "exact" if static_ok else "DIFFERS",
                    f"{pred.peak / 2**20:.1f}", f"{meas.peak / 2**20:.1f}", f"{peak_err:+.1f}",
                    max(pred.moments, key=pred.moments.get), f"{time.perf_counter() - t0:.1f}",
                ])
                print(*rows[-1], sep="  ", file=sys.stderr, flush=True)  # progress
    print(tabulate(rows, headers=["preset", "precision", "ckpt", "act pred MiB", "act meas MiB", "act err %",
                                  "static MiB", "static", "peak pred MiB", "peak meas MiB", "peak err %",
                                  "peak at", "s"]))
    print(f"\nbatch {args.batch}, ctx {args.ctx}, dropout {args.dropout}, device {args.device}, "
          f"torch {torch.__version__}: {len(rows)} configurations in {time.perf_counter() - t_start:.0f} s")
    print("worst |error| %: " + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()))
    if failures:
        print(f"FAILED (activations off by more than {100 * ACTIVATION_TOLERANCE:.0f}% or static not exact): "
              + "; ".join(failures))
        return 1
    print(f"OK: every activation total within {100 * ACTIVATION_TOLERANCE:.0f}%, every static term exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
