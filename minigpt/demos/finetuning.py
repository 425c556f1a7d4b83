"""Demo `lora`: fine-tuning fewer parameters. LoRA's and QLoRA's memory against full fine-tuning, NF4's 16
values, and a short fine-tuning of a trained model on the recipes corpus, full against LoRA.

Memory is measured on one real step (minigpt.memory.measure) next to the prediction; the fine-tuning runs
start from one base trained on the stories (`--init-from`), as `minigpt train` would run them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from minigpt.data import load_tokens
from minigpt.demos.common import CPU, MIB, conclude, mib, pyplot, save_figure, show_table, token_data
from minigpt.finetune import load_source
from minigpt.lora import count_trainable
from minigpt.memory import estimate, measure
from minigpt.model import GPT, get_config
from minigpt.quantize import NF4_CODE, dequantize, quantize
from minigpt.train import TrainConfig, estimate_loss, train

METHODS = {
    "full fine-tuning": {},
    "LoRA r=8": {"lora_rank": 8},
    "QLoRA r=8, nf4 base": {"lora_rank": 8, "base_dtype": "nf4"},
}
LEARNING_RATES = {"full fine-tuning": 3e-4, "LoRA r=8": 3e-3, "QLoRA r=8, nf4 base": 3e-3}


def _memory(size: str) -> dict:
    preset, batch, ctx = {"quick": ("tiny", 1, 16), "lecture": ("tiny", 2, 64), "full": ("10m", 2, 64)}[size]
    cfg = get_config(preset)
    measured = {n: measure(cfg, batch, ctx, "fp32", device=CPU, **lv) for n, lv in METHODS.items()}
    predicted = {n: estimate(cfg, batch, ctx, "fp32", device="cpu", **lv) for n, lv in METHODS.items()}
    terms = ("weights", "gradients", "optimizer", "activations", "peak")
    rows = [[n, *(f"{mib(getattr(measured[n], t))} / {mib(getattr(predicted[n], t))}" for t in terms)] for n in METHODS]
    show_table(
        f"{preset}, batch {batch} x ctx {ctx}, fp32: one step, MiB measured / predicted", rows, ["method", *terms]
    )
    return measured


def _nf4_table() -> None:
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)) * 0.02
    rows = []
    for kind in ("int8", "nf4"):
        q = quantize(w, kind)
        error = (dequantize(q.codes, q.scales, q.shape, torch.float32) - w).norm() / w.norm()
        rows.append([kind, f"{q.nbytes / w.numel():.3f}", f"{error:.2%}"])
    show_table(
        "A 256x256 N(0, 0.02) weight stored in 8 and 4 bits (blocks of 64)", rows, ["code", "bytes a value", "error"]
    )
    print("NF4's 16 values:", " ".join(f"{v:+.3f}" for v in NF4_CODE.tolist()))


def _fine_tune(size: str, folder: Path) -> tuple[dict, dict]:
    quick = size == "quick"
    stories = token_data(quick)
    recipes = token_data(True) if quick else load_tokens(builtin="recipes")
    common = dict(
        preset="tiny",
        batch=8 if not quick else 2,
        ctx=32 if not quick else 16,
        eval_batches=4,
        device="cpu",
        sample_tokens=0,
        verbose=False,
        progress=False,
    )
    base_steps, steps = {"quick": (3, 2), "lecture": (60, 20), "full": (100, 30)}[size]
    base = TrainConfig(steps=base_steps, lr=2e-3, out=str(folder / "base"), **common)
    train(base, data=stories)
    start, runs = None, {}
    for i, name in enumerate(METHODS):
        cfg = TrainConfig(
            steps=steps,
            lr=LEARNING_RATES[name],
            init_from=str(folder / "base"),
            out=str(folder / str(i)),
            builtin_corpus="recipes",
            **common,
            **METHODS[name],
        )
        result = train(cfg, data=recipes)
        if start is None:  # the base model's losses, from the same fixed batches
            model = GPT(get_config("tiny"))
            model.load_state_dict(load_source(folder / "base").weights)
            start = {
                "recipes": estimate_loss(model, recipes, base, CPU),
                "stories": estimate_loss(model, stories, base, CPU),
            }
        trained = count_trainable(result.model)[0]
        runs[name] = {
            "trained": trained,
            "recipes": estimate_loss(result.model, recipes, base, CPU),
            "stories": estimate_loss(result.model, stories, base, CPU),
        }
    rows = [["base", "-", f"{start['recipes']:.3f}", f"{start['stories']:.3f}"]]
    rows += [
        [
            n,
            f"{r['trained']:,}",
            f"{r['recipes']:.3f} ({r['recipes'] - start['recipes']:+.3f})",
            f"{r['stories']:.3f} ({r['stories'] - start['stories']:+.3f})",
        ]
        for n, r in runs.items()
    ]
    show_table(
        f"tiny: {steps} steps on the recipes from a base trained on the stories: val loss",
        rows,
        ["method", "trained", "recipes (learned)", "stories (forgotten)"],
    )
    return start, runs


def demo_lora(out: Path, size: str = "lecture") -> list[Path]:
    """LoRA and QLoRA: the memory they remove, NF4's 16 values, and a short fine-tuning on a new corpus."""
    measured = _memory(size)
    _nf4_table()
    with tempfile.TemporaryDirectory() as tmp:
        start, runs = _fine_tune(size, Path(tmp))

    plt = pyplot()
    fig, (ax_mem, ax_loss) = plt.subplots(1, 2, figsize=(10, 3.6))
    names = list(METHODS)
    bottom = [0.0] * len(names)
    for term in ("weights", "gradients", "optimizer", "activations"):
        values = [getattr(measured[n], term) / MIB for n in names]
        ax_mem.bar(range(len(names)), values, bottom=bottom, label=term)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax_mem.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=8)
    ax_mem.set_ylabel("MiB (measured)")
    ax_mem.set_title("one step's memory by term")
    ax_mem.legend(fontsize=8)
    for shift, corpus in ((-0.2, "recipes"), (0.2, "stories")):
        ax_loss.bar(
            [i + shift for i in range(len(names))],
            [runs[n][corpus] - start[corpus] for n in names],
            0.4,
            label=f"{corpus} ({'learned' if corpus == 'recipes' else 'forgotten'})",
        )
    ax_loss.axhline(0, color="black", linewidth=0.8)
    ax_loss.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=8)
    ax_loss.set_ylabel("val loss change from the base")
    ax_loss.legend(fontsize=8)
    figures = [save_figure(fig, out, "lora.png")]

    full, lora = measured["full fine-tuning"], measured["LoRA r=8"]
    share = (lora.gradients + lora.optimizer) / (full.gradients + full.optimizer)
    conclude(
        f"LoRA r=8 keeps {share:.1%} of full fine-tuning's gradients and optimizer state but "
        f"{lora.activations / full.activations:.0%} of its activations; QLoRA's static state is "
        f"{measured['QLoRA r=8, nf4 base'].static / full.static:.0%} of full's."
    )
    return figures
