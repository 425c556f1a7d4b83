"""`minigpt plan --budget SIZE [--largest]`: plan for the memory you have, with every lever the engine has.

minigpt/cli.py registers the flags and calls cmd_plan_budget when --budget is given. Every error is a
ValueError that cli.main prints as one line, `minigpt plan: error: ...`, with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from minigpt.budget import auto_budget, parse_budget, total_bytes
from minigpt.calibrate import calibration
from minigpt.model import PRESETS, count_params, shaped_config
from minigpt.plan import PLAN_MODELS
from minigpt.plan_budget import NO_LEVERS, BudgetPlan, all_levers, largest, plan_for_budget, supported_precisions

MIB, GIB = 2**20, 2**30


def add_budget_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `minigpt plan` that plan for a budget instead of a catalogued GPU."""
    p.add_argument("--budget", help="memory for the whole process: 8GiB, 8GB, 8000MiB, or auto (free memory)")
    p.add_argument("--largest", action="store_true", help="with --budget: the largest model of the family that fits")
    p.add_argument("--batch", type=int, default=1, help="with --budget: the micro-batch (default: 1)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="with --budget: where it trains")
    p.add_argument("--fine-tune", action="store_true", help="with --budget: LoRA on a frozen base is a lever too")
    p.add_argument("--n-layer", type=int, dest="n_layer", help="with --budget: the preset's shape overridden")
    p.add_argument("--n-embd", type=int, dest="n_embd")
    p.add_argument(
        "--recalibrate", action="store_true", help="with --budget: time the step's costs again (minigpt.calibrate)"
    )
    p.add_argument("--n-head", type=int, dest="n_head")


def read_budget(text: str, device: torch.device) -> tuple[int, str]:
    """The budget in bytes and how it was read; a warning on stderr when it is more than the machine has."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is visible here; plan for --device cpu")
    n_bytes, how = auto_budget(device) if text == "auto" else parse_budget(text)
    have = total_bytes(device)
    if n_bytes > have:
        print(
            f"warning: --budget {n_bytes / GIB:.2f} GiB is more than this machine's {have / GIB:.2f} GiB; "
            "planning anyway",
            file=sys.stderr,
        )
    return n_bytes, how


def describe(plan: BudgetPlan, title: str) -> list[str]:
    """A plan as lines: model, levers, predicted peak of the process, reasons."""
    m, n = plan.model, count_params(plan.model)
    lines = [f"{title}: {m.n_layer} blocks x width {m.n_embd} ({m.n_head} heads), {n / 1e6:,.1f}M parameters"]
    if not plan.fits:
        return lines + [f"  does not fit: {r}" for r in plan.reasons]
    b = plan.breakdown
    lines += [
        f"  levers          {' '.join(plan.levers.flags())}",
        f"  predicted peak  {plan.predicted_process_bytes / MIB:,.0f} MiB of {plan.budget_bytes / MIB:,.0f} MiB "
        f"(runtime {plan.runtime_bytes / MIB:,.0f} + step {b.peak / MIB:,.0f}: weights {b.weights / MIB:,.0f}, "
        f"grads {b.gradients / MIB:,.0f}, optimizer {b.optimizer / MIB:,.0f}, activations {b.activations / MIB:,.0f})",
    ]
    if plan.build_bytes > plan.runtime_bytes + b.peak:
        built = plan.build_bytes / MIB
        lines.append(f"  building it     {built:,.0f} MiB: the fp32 model before its levers cast it (the peak)")
    lines += [
        f"  step time       {sum(plan.seconds.values()):.2f} s predicted ("
        + ", ".join(f"{k} {v:.2f}" for k, v in plan.seconds.items() if v)
        + ")",
        f"  timed by        {plan.timing}",
    ]
    return lines + ["  why:"] + [f"    - {r}" for r in plan.reasons]


LARGEST_CTX = 256  # --largest without --ctx: the family's sequence length for the search


def cmd_plan_budget(args: argparse.Namespace) -> int:
    """Plan one model (--preset with its shape) or the largest of the family (--largest) for --budget."""
    device = torch.device(args.device)
    budget, how = read_budget(args.budget, device)
    if args.ctx is not None and args.ctx < 1:
        raise ValueError(f"--ctx must be at least 1, got {args.ctx}")
    if args.batch < 1:
        raise ValueError(f"--batch must be at least 1, got {args.batch}")
    choices = all_levers(supported_precisions(device), fine_tune=True) if args.fine_tune else None
    if args.largest and (args.preset or args.n_layer or args.n_embd or args.n_head):
        raise ValueError("--largest chooses the model itself: leave out --preset and the shape flags")
    cal = calibration(device.type, refresh=args.recalibrate)  # cached: the same machine gives the same plan
    if args.largest:
        ctx = args.ctx or LARGEST_CTX  # no preset to take it from
        best = largest(budget, ctx, args.batch, device.type, choices=choices, cal=cal)
        naive = largest(budget, ctx, args.batch, device.type, choices=[NO_LEVERS], cal=cal)
        ratio = count_params(best.model) / count_params(naive.model)
        if args.json:
            run = best.command(device=device.type) if best.fits else None  # what a script runs, as printed
            print(
                json.dumps(
                    {"budget": how, "levers": best.to_dict(), "naive": naive.to_dict(), "ratio": ratio, "command": run}
                )
            )
            return 0
        print(f"Budget {how}; ctx {ctx}, micro-batch {args.batch}, on {device.type}")
        print("\n".join(describe(best, "Largest with every lever")))
        print("\n".join(describe(naive, "Largest with fp32 AdamW and no lever")))
        print(f"Ratio: {ratio:.2f}x the parameters")
        print(f"Run it: {best.command(device=device.type)}")
        return 0
    preset = args.preset or "125m"
    if preset in PRESETS:
        model = shaped_config(preset, args.n_layer, args.n_embd, args.n_head)
    elif args.n_layer or args.n_embd or args.n_head:
        raise ValueError(f"--preset {preset} is planned as it is: its shape flags work with {', '.join(PRESETS)}")
    else:
        model = PLAN_MODELS[preset]
    ctx = args.ctx or model.ctx  # the preset's maximum, as --ctx's help says
    if ctx > model.ctx:
        raise ValueError(f"--ctx {ctx} is above the model's maximum of {model.ctx}")
    plan = plan_for_budget(model, budget, ctx, args.batch, device.type, cal=cal, choices=choices, name=preset)
    if args.fine_tune and plan.fits and plan.levers.lora_rank:
        plan.reasons.append("fine-tuning: add --init-from RUN (the finished run whose weights are the frozen base)")
    if args.json:
        run = plan.command(device=device.type) if plan.fits else None  # what a script runs, as printed
        print(json.dumps({"budget": how, **plan.to_dict(), "command": run}))
        return 0
    print(f"Budget {how}; ctx {ctx}, micro-batch {args.batch}, on {device.type}")
    print("\n".join(describe(plan, "Plan")))
    if plan.fits:
        print(f"Run it: {plan.command(device=device.type)}")
    return 0 if plan.fits else 1
