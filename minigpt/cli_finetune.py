"""The fine-tuning part of the `minigpt` command: LoRA flags, --init-from, `minigpt sample` and `minigpt export`.

minigpt/cli.py registers these; every error is a ValueError (or FileNotFoundError) that cli.main prints as
one line, `minigpt <command>: error: ...`, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from minigpt.finetune import FROM_SOURCE, read_checkpoint
from minigpt.lora import DEFAULT_TARGETS, LINEARS, TARGET_GROUPS
from minigpt.quantize import BASE_DTYPES
from minigpt.sampling import TEMPERATURE, TOP_K

FieldFlag = Callable[..., None]  # cli.add_field_flag: a flag named and defaulted like its TrainConfig field
LORA_SHAPE = ("lora_rank", "lora_targets", "base_dtype", "quant_block", "train_norms", "train_embedding")


def add_lora_flags(p: argparse.ArgumentParser, field_flag: FieldFlag) -> None:
    """The LoRA flags that shape a step, for `minigpt train` and `minigpt memory`."""
    targets = " | ".join([*TARGET_GROUPS, ",".join(LINEARS)])
    field_flag(p, "lora_rank", type=int, help="train rank-R adapters on a frozen model (default: train every weight)")
    field_flag(p, "lora_targets", help=f"{targets}; {DEFAULT_TARGETS}: attention only, as Hu et al. 2021")
    field_flag(p, "base_dtype", choices=list(BASE_DTYPES), help="LoRA: storage of the frozen block weights")
    field_flag(p, "quant_block", type=int, help="int8/nf4: values per absmax scale (0: one per output channel)")
    field_flag(p, "train_norms", action="store_true", help="LoRA: train the RMSNorm gains too")
    field_flag(p, "train_embedding", action="store_true", help="LoRA: train the tied embedding too")


def add_init_from_flags(p: argparse.ArgumentParser, field_flag: FieldFlag) -> None:
    """`minigpt train`'s fine-tuning flags that do not change the step's memory."""
    from minigpt.corpus import CORPORA

    field_flag(p, "init_from", help="start from this finished run's weights (a new run: fresh optimizer, schedule)")
    field_flag(p, "lora_alpha", type=float, help="the adapters are scaled by alpha / rank")
    field_flag(p, "builtin_corpus", choices=list(CORPORA), help="the generated corpus used without --corpus")


def given_flags(argv: list[str], names: tuple[str, ...]) -> set[str]:
    """Which of the fields `names` the command line gave (argparse also accepts an unambiguous prefix)."""
    options = [a.split("=", 1)[0] for a in argv if a.startswith("--") and len(a) > 2]
    return {n for n in names if any(("--" + n.replace("_", "-")).startswith(o) for o in options)}


def settings_from_source(args: argparse.Namespace) -> None:
    """--init-from: preset, tokenizer and ctx come from the source run; a flag that contradicts it is an error."""
    if not getattr(args, "init_from", None):
        return
    args.init_from = os.path.abspath(args.init_from)  # the checkpoint points at its base wherever it is run from
    source = read_checkpoint(args.init_from, mmap=True).get("train_config", {})  # mapped: no tensor is read
    given = given_flags(args.argv, (*FROM_SOURCE, "ctx"))
    for name in (*FROM_SOURCE, "ctx"):
        theirs = source.get(name)
        if theirs is None:
            continue
        if name in given and getattr(args, name) != theirs and name in FROM_SOURCE:
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} {getattr(args, name)} contradicts --init-from {args.init_from}, trained with {flag} "
                f"{theirs}; leave {flag} out (it comes from the source run)"
            )
        if name not in given:
            setattr(args, name, theirs)


def lora_shape(args: argparse.Namespace) -> dict:
    """The LoRA settings for memory.estimate and memory.measure (none without --lora-rank)."""
    from minigpt.config import check_lora_flags

    if args.lora_rank is not None and args.lora_rank < 1:
        raise ValueError(f"--lora-rank {args.lora_rank}: a rank is at least 1 (leave it out to train every weight)")
    check_lora_flags({n: getattr(args, n) for n in LORA_SHAPE})  # a flag that would do nothing is an error
    return {n: getattr(args, n) for n in LORA_SHAPE} if args.lora_rank else {}


def lora_memory_note(args: argparse.Namespace) -> str | None:
    """What a learner should read next to a LoRA step's memory table."""
    if not args.lora_rank:
        return None
    return (
        f"LoRA rank {args.lora_rank} on {args.lora_targets}, base {args.base_dtype}: gradients and optimizer state "
        "are the adapters' only, and the frozen base is unpacked one layer at a time (weight_copies). "
        "Activations shrink only a little: the gradient still flows back through every layer, so most of what "
        "the forward keeps stays (a frozen layer only stops keeping its input for its weight's gradient)."
    )


def cmd_sample(args: argparse.Namespace) -> int:
    """Print what a run's model writes after a prompt."""
    from minigpt.device import pick_device
    from minigpt.sampling import check_sample_args, load_model, stream_text

    check_sample_args(None, args.tokens, args.temperature, 1, "", args.top_k)  # before the model loads
    device = pick_device(args.device)
    model, tokenizer, what = load_model(args.run, device)
    check_sample_args(args.prompt, args.tokens, args.temperature, model.cfg.ctx, tokenizer, args.top_k)
    top_k = args.top_k if args.top_k > 0 else None
    print(f"# {args.run}: {what}; seed {args.seed}, temperature {args.temperature:g}, top-k {args.top_k}")
    for piece in stream_text(
        model, tokenizer, args.tokens, device, args.prompt or "", args.seed, args.temperature, top_k
    ):
        print(piece, end="", flush=True)  # as it is written: a long sample shows its progress
    print()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a run's model as a plain checkpoint, adapters merged into the weights."""
    from minigpt.finetune import export

    path, adapted = export(args.run, args.out)
    if adapted:
        print(f"wrote {path}: the adapters merged into the base weights, a plain checkpoint")
    else:
        print(f"{args.run} has no adapters (not a LoRA run): wrote its weights as they are to {path}")
    return 0


def add_finetune_commands(sub: argparse._SubParsersAction) -> None:
    """`minigpt sample` and `minigpt export`."""
    p = sub.add_parser("sample", help="print what a run's model writes (a plain run, a LoRA run or an export)")
    p.add_argument("run", help="a run folder (its --out) or an exported file")
    p.add_argument("--prompt", help="text to continue (default: start from <|endoftext|>)")
    p.add_argument("--tokens", type=int, default=100, help="tokens to write (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=TEMPERATURE, help="0: greedy (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=TOP_K, help="sample among the k likeliest, 0: all (default: 50)")
    p.add_argument("--seed", type=int, default=0, help="the same seed writes the same text (default: 0)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps (default: auto)")
    p.set_defaults(func=cmd_sample)
    p = sub.add_parser("export", help="write a run's model as a plain checkpoint, LoRA adapters merged in")
    p.add_argument("run", help="a run folder (its --out)")
    p.add_argument("--out", required=True, help="the file to write (a plain minigpt checkpoint)")
    p.set_defaults(func=cmd_export)
