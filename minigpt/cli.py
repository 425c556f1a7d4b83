"""The `minigpt` command line: each subcommand parses flags, calls one function, prints a table or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys

from tabulate import tabulate

from minigpt.run_state import CheckpointError


def params_rows() -> list[dict]:
    """One row per preset: its shape and its parameter count, computed from the config."""
    from minigpt.model import PRESETS, count_params

    return [
        {
            "name": name,
            "layers": c.n_layer,
            "width": c.n_embd,
            "heads": c.n_head,
            "ctx": c.ctx,
            "vocab": c.vocab_size,
            "parameters": count_params(c),
        }
        for name, c in PRESETS.items()
    ]


def cmd_params(args: argparse.Namespace) -> int:
    rows = params_rows()
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(tabulate(rows, headers="keys", intfmt=",", tablefmt="github"))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from minigpt.device import doctor_rows

    print(tabulate(doctor_rows(), headers=["what", "value"], tablefmt="github"))
    return 0


def cmd_formats(args: argparse.Namespace) -> int:
    from minigpt.formats import format_rows, formats_table, missing_formats

    if args.json:
        print(json.dumps(format_rows(), indent=1, default=str))
        return 0
    print(formats_table())
    for name in missing_formats():
        print(f"note: {name} is not available in this torch build; skipped")
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    """Predicted (and with --measure, measured) memory of one training step, by kind."""
    from minigpt import memory
    from minigpt.device import pick_device
    from minigpt.model import get_config

    cfg = get_config(args.preset)
    ctx = args.ctx or cfg.ctx
    device = pick_device(args.device)
    shape = dict(
        batch=args.batch,
        ctx=ctx,
        precision=args.precision,
        checkpointing=args.checkpointing,
        master_weights=args.master_weights,
    )
    predicted = memory.estimate(cfg, device=device, **shape)
    measured = memory.measure(cfg, device=device, **shape) if args.measure else None
    if args.json:
        out = {"config": {"preset": args.preset, "device": str(device), **shape}, "predicted": predicted.to_dict()}
        if measured is not None:
            out["measured"] = measured.to_dict()
        print(json.dumps(out, indent=1))
        return 0
    mib = lambda n: f"{n / 2**20:,.1f}"  # noqa: E731
    measured_rows = dict(measured.rows()) if measured is not None else {}
    rows = [(name, mib(b), mib(measured_rows[name]) if name in measured_rows else "") for name, b in predicted.rows()]
    headers = ["MiB", "predicted"] + (["measured"] if measured is not None else [])
    print(
        f"{args.preset} ({cfg.n_layer} layers), batch {args.batch} x ctx {ctx}, {args.precision}, "
        f"checkpointing {args.checkpointing}, on {device}"
    )
    print(tabulate([r[: len(headers)] for r in rows], headers=headers, tablefmt="github", disable_numparse=True))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Choose precision, micro-batch, accumulation and checkpointing for a preset on some hardware."""
    from minigpt.plan import plan, recommended_table

    if args.table:
        rows = recommended_table(effective_batch=args.effective_batch)
        table = tabulate(rows, headers="keys", tablefmt="github")
        print(json.dumps(rows, indent=1, default=str) if args.json else table)
        return 0
    if not args.preset:
        raise ValueError("give --preset (and --hardware, --ctx, --effective-batch), or --table")
    from minigpt.model import get_config

    chosen = plan(args.preset, args.hardware, args.ctx or get_config(args.preset).ctx, args.effective_batch)
    print(json.dumps(chosen.to_dict(), indent=1, default=str) if args.json else chosen.explain())
    return 0


def add_train_flags(p: argparse.ArgumentParser) -> None:
    from minigpt.device import SUPPORTED_DEVICE_TYPES
    from minigpt.model import PRESETS
    from minigpt.precision import DTYPE_ALIASES, PRECISIONS
    from minigpt.recompute import CHECKPOINTING_MODES

    p.add_argument("--preset", default="10m", choices=list(PRESETS))
    p.add_argument("--precision", choices=PRECISIONS, help=" | ".join(PRECISIONS))
    p.add_argument("--dtype", choices=list(DTYPE_ALIASES), help="alias of --precision (float32 = fp32, ...)")
    p.add_argument("--master-weights", action="store_true", help="bf16-pure: keep fp32 master weights")
    p.add_argument("--batch", type=int, default=8, help="micro-batch size (sequences per forward)")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--ctx", type=int, help="tokens per sequence (default: the preset's maximum)")
    p.add_argument("--checkpointing", default="none", choices=list(CHECKPOINTING_MODES))
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in total")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (cosine decay to 10%% of it)")
    p.add_argument("--warmup-steps", type=int, help="linear warmup steps (default: 5%% of --steps)")
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm (0: no clipping)")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", help="a UTF-8 text file (default: the built-in stories)")
    p.add_argument("--tokenizer", default="minigpt-8k", help="minigpt-8k (offline) or gpt2 (downloads)")
    p.add_argument("--out", help="run folder for checkpoint.pt and log.jsonl")
    p.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    p.add_argument("--device", default="auto", help=" | ".join(("auto", *SUPPORTED_DEVICE_TYPES)))
    p.add_argument("--json", action="store_true", help="print one final JSON object")


def train_config_from_args(args: argparse.Namespace):
    """Turn parsed flags into a TrainConfig (which validates them before any work starts)."""
    from minigpt.precision import normalize_precision
    from minigpt.train import TrainConfig

    if args.precision and args.dtype and normalize_precision(args.dtype) != args.precision:
        raise ValueError(f"--precision {args.precision} and --dtype {args.dtype} disagree; give one of them")
    return TrainConfig(
        preset=args.preset,
        precision=args.precision or args.dtype or "fp32",
        master_weights=args.master_weights,
        batch=args.batch,
        accum=args.accum,
        ctx=args.ctx,
        checkpointing=args.checkpointing,
        dropout=args.dropout,
        steps=args.steps,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        grad_clip=args.grad_clip,
        eval_every=args.eval_every,
        save_every=args.save_every,
        seed=args.seed,
        corpus=args.corpus,
        tokenizer=args.tokenizer,
        out=args.out,
        resume=args.resume,
        device=args.device,
        verbose=not args.json,
    )


def cmd_train(args: argparse.Namespace) -> int:
    from minigpt.train import train

    result = train(train_config_from_args(args))
    if args.json:
        print(json.dumps(result.summary(), default=str))
    else:
        print(f"\nsample:\n{result.sample}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from minigpt.demos import run_demo

    return run_demo(args.name, Path(args.out), quick=args.quick)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minigpt", description="Fit LLM training into the memory you have.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="the presets and their parameter counts")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_params)
    sub.add_parser("doctor", help="versions and what this device supports").set_defaults(func=cmd_doctor)
    p = sub.add_parser("formats", help="the floating-point formats table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_formats)
    from minigpt.device import SUPPORTED_DEVICE_TYPES
    from minigpt.hardware import HARDWARE
    from minigpt.model import PRESETS
    from minigpt.precision import PRECISIONS
    from minigpt.recompute import CHECKPOINTING_MODES

    p = sub.add_parser("memory", help="memory of one training step: predicted, and measured with --measure")
    p.add_argument("--preset", default="10m", choices=list(PRESETS))
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--master-weights", action="store_true")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--ctx", type=int, help="default: the preset's maximum")
    p.add_argument("--checkpointing", default="none", choices=list(CHECKPOINTING_MODES))
    p.add_argument("--measure", action="store_true", help="also run one real step and measure it")
    p.add_argument("--device", default="cpu", help=" | ".join((*SUPPORTED_DEVICE_TYPES, "auto")))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_memory)
    p = sub.add_parser("plan", help="choose precision, micro-batch, accum and checkpointing for some hardware")
    p.add_argument("--preset", choices=list(PRESETS))
    p.add_argument("--hardware", default="t4", choices=list(HARDWARE))
    p.add_argument("--ctx", type=int, help="default: the preset's maximum")
    p.add_argument("--effective-batch", type=int, default=128)
    p.add_argument("--table", action="store_true", help="the recommended-settings table, made by the planner")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("train", help="train a model")
    add_train_flags(p)
    p.set_defaults(func=cmd_train)
    from minigpt.demos import DEMO_CHOICES

    p = sub.add_parser("demo", help="lecture demos: a few tables, a one-line conclusion, PNG figures")
    p.add_argument("name", nargs="?", default="all", choices=DEMO_CHOICES)
    p.add_argument("--out", default="demo_out", help="folder for the PNG figures (default: demo_out/)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds (for tests)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, CheckpointError) as err:
        # Errors we raise on purpose say what was wrong and what to do: show just that.
        print(f"minigpt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `minigpt plan --table | head`: the reader left, which is not an error
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - silences the interpreter's flush at exit
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
