"""The `minigpt` command line: each subcommand parses flags, calls one function, prints a table or JSON.

Every error is one line on stderr, `minigpt <command>: error: ...`, never a traceback (MINIGPT_DEBUG=1
shows it): exit code 2 for bad usage (flags that cannot work), 1 for a failure at run time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import fields
from typing import NoReturn

from tabulate import tabulate

from minigpt.cli_budget import add_budget_flags, cmd_plan_budget
from minigpt.cli_finetune import (
    add_finetune_commands,
    add_init_from_flags,
    add_lora_flags,
    lora_memory_note,
    lora_shape,
    settings_from_source,
)
from minigpt.run_state import first_line

# Bad usage, exit code 2: the flags ask for something that cannot work (a missing --corpus file, an --out
# that is a file or already holds a run...). Everything else that fails is a runtime error, exit code 1.
USAGE_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (`minigpt train: error: ...`) instead of the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    from minigpt.model import count_params, shaped_config

    rows = params_rows()
    if any(getattr(args, k) is not None for k in ("preset", "n_layer", "n_embd", "n_head")):
        c = shaped_config(args.preset or "10m", args.n_layer, args.n_embd, args.n_head)
        shape = {"layers": c.n_layer, "width": c.n_embd, "heads": c.n_head, "ctx": c.ctx, "vocab": c.vocab_size}
        rows = [{"name": "this config", **shape, "parameters": count_params(c)}]
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
    from minigpt.config import check_dropout
    from minigpt.device import pick_device
    from minigpt.memory.offloaded import lever_lines
    from minigpt.model import shaped_config

    check_dropout(args.dropout)
    cfg = shaped_config(args.preset, args.n_layer, args.n_embd, args.n_head, dropout=args.dropout)
    ctx = check_ctx(args.ctx) or cfg.ctx
    device = pick_device(args.device)
    precision = chosen_precision(args)
    shape = dict(
        batch=args.batch,
        ctx=ctx,
        precision=precision,
        checkpointing=args.checkpointing,
        master_weights=args.master_weights,
        optimizer=args.optimizer,
        optimizer_in_backward=args.optimizer_in_backward,
        loss_chunks=args.loss_chunks,
        offload_activations=args.offload_activations,
        **lora_shape(args),
    )
    predicted = memory.estimate(cfg, device=device, **shape)
    measured = memory.measure(cfg, device=device, **shape) if args.measure else None
    sharded = sharded_rows(args, cfg, precision) if args.shard != "none" or args.world > 1 else None
    if args.json:
        out = {"config": {"preset": args.preset, "device": str(device), **shape}, "predicted": predicted.to_dict()}
        if measured is not None:
            out["measured"] = measured.to_dict()
        if sharded is not None:
            out["per_process"] = sharded
        print(json.dumps(out, indent=1))
        return 0
    mib = lambda n: f"{n / 2**20:,.1f}"  # noqa: E731
    measured_rows = dict(measured.rows()) if measured is not None else {}
    rows = [(name, mib(b), mib(measured_rows[name]) if name in measured_rows else "") for name, b in predicted.rows()]
    headers = ["MiB", "predicted"] + (["measured"] if measured is not None else [])
    print(
        f"{args.preset} ({cfg.n_layer} layers), batch {args.batch} x ctx {ctx}, {precision}, "
        f"checkpointing {args.checkpointing}, {args.optimizer}{' in backward' if args.optimizer_in_backward else ''}, "
        f"on {device}"
    )
    print(tabulate([r[: len(headers)] for r in rows], headers=headers, tablefmt="github", disable_numparse=True))
    if args.optimizer != "adamw" or args.optimizer_in_backward:  # each optimizer lever as the term it changes
        plain = memory.estimate(cfg, device=device, **{**shape, "optimizer": "adamw", "optimizer_in_backward": False})
        for term, flag in (("optimizer", f"--optimizer {args.optimizer}"), ("gradients", "--optimizer-in-backward")):
            if getattr(plain, term) != getattr(predicted, term):
                print(f"{flag}: {term} {mib(getattr(plain, term))} -> {mib(getattr(predicted, term))} MiB predicted")
        print(f"peak {mib(plain.peak)} -> {mib(predicted.peak)} MiB predicted, against AdamW with an ordinary step")
    plain_head = memory.estimate(cfg, device=device, **{**shape, "loss_chunks": 1, "offload_activations": False})
    for line in lever_lines(plain_head, predicted, args.loss_chunks, args.offload_activations):
        print(line)  # --loss-chunks and --offload-activations as the terms they change
    if lora_memory_note(args):
        print(lora_memory_note(args))
    if sharded is not None:
        print(
            f"\nper process, --shard {args.shard} over {args.world} processes: the static state only "
            "(activations and transients above are each process's own, for its own micro-batch)"
        )
        measured_max = sharded.get("measured_max")
        table = [
            (k, mib(v), *([mib(measured_max[k])] if measured_max else []))
            for k, v in {**sharded["predicted"], "static": sum(sharded["predicted"].values())}.items()
        ]
        headers = ["MiB", "predicted"] + (["measured (largest process)"] if measured_max else [])
        print(tabulate(table, headers=headers, tablefmt="github", disable_numparse=True))
    return 0


def sharded_rows(args: argparse.Namespace, cfg, precision: str) -> dict:
    """Weights, gradients and AdamW bytes of the process that holds the most, under --shard over --world processes.

    With --measure, also measured: --world CPU processes each run one real step (minigpt.distributed).
    """
    from minigpt.memory import sharded_state_bytes

    shard = dict(shard=args.shard, world=args.world, master_weights=args.master_weights)
    out = {"shard": args.shard, "world": args.world, "predicted": sharded_state_bytes(cfg, precision, **shard)}
    if args.measure:
        from minigpt.distributed import measure_rank_state_bytes

        ranks = measure_rank_state_bytes(cfg, precision, **shard)
        out["measured"] = ranks
        out["measured_max"] = max(ranks, key=lambda d: sum(d.values()))
        out["measured_max"] = {**out["measured_max"], "static": sum(out["measured_max"].values())}
    return out


def check_ctx(ctx: int | None) -> int | None:
    """--ctx as given (None: the preset's maximum, decided by the caller); below 1 it is an error, as in train."""
    if ctx is not None and ctx < 1:
        raise ValueError(f"--ctx must be at least 1, got {ctx} (leave --ctx out for the preset's maximum)")
    return ctx


def cmd_plan(args: argparse.Namespace) -> int:
    """Choose precision, micro-batch, accumulation and checkpointing for a preset on some hardware."""
    from minigpt.model import COURSE_PRESETS
    from minigpt.plan import PLAN_MODELS, plan, recommended_table

    if args.budget:  # plan for a memory budget, with every lever (minigpt/cli_budget.py)
        if args.table:
            raise ValueError("--table plans the catalogued GPUs; leave it out with --budget")
        return cmd_plan_budget(args)
    if args.largest:
        raise ValueError("--largest needs --budget (the memory to fill), e.g. --budget 16GiB or --budget auto")
    if args.table:  # one row per preset x hardware, one GPU each: --preset and --ctx narrow it down
        if args.gpus != 1 or args.shard != "none":
            raise ValueError("--table plans one GPU per row; leave out --gpus and --shard, or drop --table")
        presets = (args.preset,) if args.preset else COURSE_PRESETS
        rows = recommended_table(presets, ctx=check_ctx(args.ctx), effective_batch=args.effective_batch)
        table = tabulate(rows, headers="keys", tablefmt="github")
        print(json.dumps(rows, indent=1, default=str) if args.json else table)
        return 0
    if not args.preset:
        raise ValueError("give --preset (and --hardware, --ctx, --effective-batch), or --table")
    hardware = args.hardware
    if hardware == "cpu":  # this machine's CPU: what `minigpt doctor` reports (its bf16 instructions, its RAM)
        from minigpt.hardware import detect_hardware

        hardware = detect_hardware("cpu")
    ctx = check_ctx(args.ctx) or PLAN_MODELS[args.preset].ctx
    chosen = plan(
        args.preset, hardware, ctx, args.effective_batch, gpus=args.gpus, shard=args.shard, optimizer=args.optimizer
    )
    print(json.dumps(chosen.to_dict(), indent=1, default=str) if args.json else chosen.explain())
    return 0


def add_field_flag(p: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """--name for the TrainConfig field `name`, with the field's own default (the one place defaults live)."""
    from minigpt.config import TrainConfig

    default = {f.name: f.default for f in fields(TrainConfig)}[name]
    if default not in (None, False):
        kwargs["help"] = f"{kwargs.get('help', '')} (default: %(default)s)".lstrip()
    p.add_argument("--" + name.replace("_", "-"), dest=name, default=default, **kwargs)


def add_model_shape_flags(p: argparse.ArgumentParser) -> None:
    """--n-layer, --n-embd, --n-head: any model of the preset's family, not only the preset itself."""
    add_field_flag(p, "n_layer", type=int, help="blocks (default: the preset's)")
    add_field_flag(p, "n_embd", type=int, help="width (default: the preset's); alone, it sets n_embd / 64 heads")
    add_field_flag(p, "n_head", type=int, help="attention heads (default: the preset's)")


def add_step_shape_flags(p: argparse.ArgumentParser) -> None:
    """The flags that shape one training step, shared by `minigpt train` and `minigpt memory`."""
    from minigpt.config import OPTIMIZERS, TrainConfig
    from minigpt.device import SUPPORTED_DEVICE_TYPES
    from minigpt.model import PRESETS
    from minigpt.parallel import SHARD_MODES
    from minigpt.precision import DTYPE_ALIASES, PRECISIONS
    from minigpt.recompute import CHECKPOINTING_MODES

    add_field_flag(p, "preset", choices=list(PRESETS))
    add_model_shape_flags(p)
    # no argparse default, so that --dtype (its alias) can tell whether --precision was given
    p.add_argument("--precision", choices=PRECISIONS, help=f"(default: {TrainConfig.precision})")
    p.add_argument("--dtype", choices=list(DTYPE_ALIASES), help="alias of --precision (float32 = fp32, ...)")
    add_field_flag(p, "master_weights", action="store_true", help="bf16-pure: keep fp32 master weights")
    add_field_flag(p, "batch", type=int, help="micro-batch size (sequences per forward)")
    add_field_flag(p, "ctx", type=int, help="tokens per sequence (default: the preset's maximum)")
    add_field_flag(p, "checkpointing", choices=list(CHECKPOINTING_MODES))
    add_field_flag(p, "loss_chunks", type=int, help="the loss head in N token chunks: no whole (tokens x vocab) logits")
    add_field_flag(
        p, "offload_activations", action="store_true", help="saved activations to pinned host memory (CUDA) or disk"
    )
    add_field_flag(p, "offload_dir", help="--offload-activations on a CPU: the temp file's folder (default: TMPDIR)")
    add_field_flag(p, "shard", choices=list(SHARD_MODES), help="torchrun: split AdamW (zero1) or all state (fsdp)")
    add_field_flag(p, "optimizer", choices=list(OPTIMIZERS), help="adamw8bit: 8-bit moments, about 2 bytes a parameter")
    add_field_flag(
        p, "optimizer_in_backward", action="store_true", help="step each parameter in backward and free its gradient"
    )
    add_field_flag(p, "device", help=" | ".join(("auto", *SUPPORTED_DEVICE_TYPES)))
    add_lora_flags(p, add_field_flag)


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field a user sets."""
    add_step_shape_flags(p)
    add_field_flag(p, "accum", type=int, help="micro-batches per optimizer step")
    add_field_flag(p, "compile", action="store_true", help="torch.compile the model and fuse the 8-bit step")
    add_field_flag(p, "dropout", type=float)
    add_field_flag(p, "steps", type=int, help="optimizer steps in total")
    add_field_flag(p, "lr", type=float, help="peak learning rate (cosine decay to 10%% of it)")
    add_field_flag(p, "warmup_steps", type=int, help="linear warmup steps (default: 5%% of --steps)")
    add_field_flag(p, "grad_clip", type=float, help="max gradient norm (0: no clipping)")
    add_field_flag(p, "eval_every", type=int, help="steps between val-loss evaluations (0: only at the end)")
    add_field_flag(p, "save_every", type=int, help="steps between checkpoints (0: only at the end)")
    add_field_flag(p, "seed", type=int)
    add_field_flag(p, "corpus", help="a UTF-8 text file (default: the built-in stories)")
    add_field_flag(p, "tokenizer", help="minigpt-8k (offline) or gpt2 (downloads)")
    add_field_flag(p, "out", help="run folder for checkpoint.pt and log.jsonl")
    add_field_flag(p, "resume", action="store_true", help="continue the run saved in --out")
    add_field_flag(p, "restart", action="store_true", help="move the run in --out aside (OUT.old-N) and start over")
    add_init_from_flags(p, add_field_flag)
    p.add_argument("--json", action="store_true", help="print one final JSON object")


def chosen_precision(args: argparse.Namespace) -> str:
    """--precision, or its alias --dtype, or TrainConfig's default; an error if the two flags disagree."""
    from minigpt.config import TrainConfig
    from minigpt.precision import normalize_precision

    if args.precision and args.dtype and normalize_precision(args.dtype) != args.precision:
        raise ValueError(f"--precision {args.precision} and --dtype {args.dtype} disagree; give one of them")
    return normalize_precision(args.precision or args.dtype or TrainConfig.precision)


def train_config_from_args(args: argparse.Namespace):
    """Turn parsed flags into a TrainConfig (which validates them before any work starts)."""
    from minigpt.config import TrainConfig

    flags = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    return TrainConfig(**{**flags, "precision": chosen_precision(args)}, verbose=not args.json)


def resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same launch (torchrun too) and flags, with --resume once."""
    from minigpt.run_messages import resume_command

    return resume_command(argv)


def train_warnings(cfg) -> list[str]:
    """Settings that run, but probably not the way the user expects (printed once, to stderr, before training).

    train() adds one of its own once it has the data: a step that takes more tokens than the corpus holds.
    """
    import torch

    from minigpt import memory
    from minigpt.device import cpu_matmul_slowdown, pick_device

    notes, device = [], pick_device(cfg.device)
    if device.type == "cpu" and cfg.precision != "fp32":
        dtype = torch.float16 if cfg.precision == "fp16" else torch.bfloat16
        slowdown = cpu_matmul_slowdown(dtype)
        # below 3x the CPU has the instructions (an AMX Xeon measured bf16 2x faster than fp32; an AVX2-only
        # CPU emulates bf16 about 15x slower, and fp16 can be 1000x slower)
        if slowdown >= 3:
            notes.append(
                f"{cfg.precision} is emulated on this CPU: a {str(dtype).removeprefix('torch.')} matmul measured "
                f"{slowdown:,.0f}x slower than fp32 here; --precision fp32 will train faster"
            )
    if cfg.checkpointing != "none":
        model_cfg = cfg.model_config()
        shape = dict(batch=cfg.batch, ctx=cfg.ctx, precision=cfg.precision, master_weights=cfg.master_weights)
        kept = memory.estimate(model_cfg, checkpointing=cfg.checkpointing, device=device, **shape).activations
        full = memory.estimate(model_cfg, checkpointing="none", device=device, **shape).activations
        if kept >= 0.95 * full:  # under 5% saved: the recomputation costs time for nothing
            notes.append(
                f"--checkpointing {cfg.checkpointing} saves nothing at this size (activations {full / 2**20:,.1f} MiB "
                f"without it, {kept / 2**20:,.1f} MiB with it) but recomputes: --checkpointing none is faster"
            )
    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun
    if world == 1 and cfg.shard != "none" and not cfg.verbose:  # verbose: train() says it on stdout
        notes.append(f"--shard {cfg.shard} with one process: nothing to split, so it trains as --shard none")
    if world > 1 and cfg.accum > 1:
        notes.append(
            f"effective batch = {cfg.batch} (batch) x {cfg.accum} (accum) x {world} (processes) = "
            f"{cfg.batch * cfg.accum * world} sequences, {world}x a single-process run with these flags; "
            f"to keep {cfg.batch * cfg.accum}, divide --accum by {world}"
        )
    return notes


def cmd_train(args: argparse.Namespace) -> int:
    from minigpt.train import train

    settings_from_source(args)  # --init-from: preset, tokenizer and ctx from the source run
    cfg = train_config_from_args(args)
    from minigpt.run_messages import speaks  # under torchrun, process 0 alone prints
    from minigpt.run_state import StopSignals

    for note in train_warnings(cfg) if speaks() else []:
        print(f"minigpt train: warning: {note}", file=sys.stderr)
    result = train(cfg)
    with StopSignals():  # a signal now, the run complete, must not turn its printed result into a failure
        if args.json and speaks():
            print(json.dumps(result.summary(), default=str), flush=True)
        elif result.sample and speaks():
            print(f"\nsample:\n{result.sample}", flush=True)
        if not result.interrupted:
            return 0
        steps = len(result.history)
        then = f"resume with: {resume_command(args.argv)}" if cfg.out else "nothing saved (no --out to resume from)"
        if speaks():
            print(f"interrupted at step {steps}; {then}", file=sys.stderr)
    return 128 + signal.Signals[result.interrupted].value  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


def cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from minigpt.demos import run_demo

    out = Path(args.out)  # checked before any demo runs: a demo can take minutes
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "" if existing == out else f" (its parent {existing} is a file)"
        raise NotADirectoryError(f"--out {out} is not a folder{where}; choose a folder for the figures")
    return run_demo(args.name, out, size="quick" if args.quick else "full" if args.full else "lecture")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="minigpt", description="Fit LLM training into the memory you have.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="the presets and their parameter counts, or one config's (--n-layer ...)")
    p.add_argument("--preset", help="the preset to change the shape of (default: 10m)")
    add_model_shape_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_params)
    sub.add_parser("doctor", help="versions and what this device supports").set_defaults(func=cmd_doctor)
    p = sub.add_parser("formats", help="the floating-point formats table")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_formats)
    from minigpt.config import OPTIMIZERS
    from minigpt.hardware import HARDWARE
    from minigpt.parallel import SHARD_MODES
    from minigpt.plan import PLAN_MODELS

    p = sub.add_parser("memory", help="memory of one training step: predicted, and measured with --measure")
    add_step_shape_flags(p)
    add_field_flag(p, "dropout", type=float, help="as train's --dropout: the masks it keeps count (0: none)")
    p.add_argument("--measure", action="store_true", help="also run one real step and measure it")
    p.add_argument("--world", type=int, default=1, help="processes the state is split over with --shard (default: 1)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_memory)
    p = sub.add_parser("plan", help="choose precision, micro-batch, accum and checkpointing for some hardware")
    p.add_argument("--preset", choices=list(PLAN_MODELS), help="7b: a model to plan only, too large to train here")
    p.add_argument("--hardware", default="t4", choices=list(HARDWARE))
    p.add_argument("--gpus", type=int, default=1, help="data-parallel GPUs; the plan is per GPU (default: 1)")
    p.add_argument("--shard", default="none", choices=list(SHARD_MODES), help="what the GPUs split (default: none)")
    p.add_argument("--ctx", type=int, help="default: the preset's maximum (with --largest: 256)")
    p.add_argument("--effective-batch", type=int, default=128)
    p.add_argument("--optimizer", default="adamw", choices=list(OPTIMIZERS), help="adamw8bit: 8-bit moments")
    p.add_argument("--table", action="store_true", help="the recommended-settings table, made by the planner")
    add_budget_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("train", help="train a model")
    add_train_flags(p)
    p.set_defaults(func=cmd_train)
    add_finetune_commands(sub)  # sample, export
    from minigpt.demos import DEMO_CHOICES

    p = sub.add_parser("demo", help="lecture demos: a few tables, a one-line conclusion, PNG figures")
    p.add_argument("name", nargs="?", default="all", choices=DEMO_CHOICES)
    p.add_argument("--out", default="demo_out", help="folder for the PNG figures (default: demo_out/)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="longer versions: more steps, 10m for tiny")
    size.add_argument("--quick", action="store_true", help="tiny sizes, seconds (for tests)")
    p.set_defaults(func=cmd_demo)
    return parser


def error_line(err: BaseException) -> str:
    """One line for an error: our own messages as they are; others' first line, after their type's name."""
    text = str(err).strip().split("\n")[0] or type(err).__name__
    ours = type(err).__module__.startswith("minigpt") or isinstance(err, (ValueError, OSError))
    return text if ours else f"{type(err).__name__}: {first_line(text, 200)} (MINIGPT_DEBUG=1 shows the traceback)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # for the resume command an interrupted run prints
    from minigpt.run_messages import OutputThatOutlivesItsReader

    given = sys.stdout
    if not isinstance(given, OutputThatOutlivesItsReader):  # a closed stdout never stops the work (| head)
        sys.stdout = OutputThatOutlivesItsReader(given)
    try:
        return _run(args)
    finally:
        sys.stdout = given


def _run(args: argparse.Namespace) -> int:
    """Run the command; bad input and failures become one line and an exit status."""
    try:
        return args.func(args)
    except BrokenPipeError:  # `minigpt plan --table | head`: the reader left, which is not an error
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - silences the interpreter's flush at exit
        return 0
    except KeyboardInterrupt:  # Ctrl-C outside train()'s loop (which stops cleanly by itself), or a second one
        if os.environ.get("MINIGPT_DEBUG"):
            raise
        print(f"minigpt {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if os.environ.get("MINIGPT_DEBUG"):  # for developers: the full traceback
            raise
        from minigpt.run_messages import speaks  # under torchrun: one line, from the process it happened to

        if speaks(err, usage_error=isinstance(err, USAGE_ERRORS)):
            print(f"minigpt {args.command}: error: {error_line(err)}", file=sys.stderr)
        return 2 if isinstance(err, USAGE_ERRORS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
