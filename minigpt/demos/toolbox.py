"""Demo `toolbox` (chapter 9): the levers beyond mixed precision, each measured on a real step next to its prediction.

With a 16-bit autocast and per-block checkpointing already on, one step is measured (minigpt.memory.measure)
and predicted (minigpt.memory.estimate) with each of the chunked loss, 8-bit AdamW, the optimizer step in
backward and activation offloading, then all four; and the second moment of a few AdamW steps is stored with a
linear and with AdamW8bit's power code, to show why the code must be non-linear.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minigpt import memory
from minigpt.course import chapter_settings
from minigpt.data import load_tokens
from minigpt.demos.common import conclude, pyplot, save_figure, show_table
from minigpt.model import GPT, ModelConfig, count_params
from minigpt.optim import codes as power_codes

MIB = 2**20
LEVERS = {  # each lever alone on top of autocast and checkpointing, then all four
    "earlier levers": {},
    "+ chunked loss": {"loss_chunks": 8},
    "+ 8-bit AdamW": {"optimizer": "adamw8bit"},
    "+ step in backward": {"optimizer_in_backward": True},
    "+ offloading": {"offload_activations": True},
}
LEVERS["all four"] = {k: v for extra in LEVERS.values() for k, v in extra.items()}


def _sizes(size: str) -> tuple[ModelConfig, int, int]:
    """A narrow model with the course's 8192-token vocabulary (the head is then a large share), batch, ctx."""
    if size == "quick":
        return ModelConfig(n_layer=2, n_head=2, n_embd=64, ctx=64), 1, 64
    if size == "lecture":  # the same shape with fewer tokens: the head's share is the same, the meter twice as fast
        return ModelConfig(n_layer=4, n_head=4, n_embd=256, ctx=128), 2, 128
    return ModelConfig(n_layer=4, n_head=4, n_embd=256, ctx=128), 4, 128


def _moments(cfg: ModelConfig, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The embedding's bias-corrected AdamW moments (m, v) after a few steps on the built-in stories."""
    data, model = load_tokens(), GPT(cfg, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        x, y = data.get_batch("train", 2, min(cfg.ctx, 64), torch.Generator().manual_seed(step))
        model(x, y)[1].backward()
        optimizer.step()
        optimizer.zero_grad()
    state = optimizer.state[model.tok_emb.weight]
    m, v = state["exp_avg"].flatten() / (1 - 0.9**steps), state["exp_avg_sq"].flatten() / (1 - 0.999**steps)
    return m, v


def demo_toolbox(out: Path, size: str = "lecture") -> list[Path]:
    """Chunked loss, 8-bit AdamW, the step in backward and offloading: each term measured and predicted."""
    quick = size == "quick"
    settings = chapter_settings("small")
    device = settings.device
    precision = settings.precision if settings.precision != "fp16" else "fp32"  # the step in backward refuses fp16
    cfg, batch, ctx = _sizes(size)
    earlier = dict(precision=precision, checkpointing="full")
    print(
        f"{count_params(cfg) / 1e6:.1f}M parameters (vocabulary {cfg.vocab_size}), batch {batch} x ctx {ctx}, "
        f"{precision} autocast and per-block checkpointing, on {device}\n"
    )
    measured = {n: memory.measure(cfg, batch, ctx, **earlier, **x, device=device) for n, x in LEVERS.items()}
    predicted = {n: memory.estimate(cfg, batch, ctx, **earlier, **x, device=device.type) for n, x in LEVERS.items()}
    rows = [
        {"levers": name}
        | {f"{t} MiB": round(getattr(m, t) / MIB, 2) for t in ("gradients", "optimizer", "activations", "logits")}
        | {"peak measured MiB": round(m.peak / MIB, 2), "peak predicted MiB": round(predicted[name].peak / MIB, 2)}
        for name, m in measured.items()
    ]
    show_table("One step, each lever on top of the earlier ones (measured)", rows)

    m, v = _moments(cfg, 3 if quick else 5)
    largest_update = lambda v_used: (m / (v_used.sqrt() + 1e-8)).abs().max().item()  # noqa: E731
    codes = {"linear": power_codes.LINEAR_CODE, "power 4": power_codes.V_CODE}
    coded = {name: power_codes.dequantize(*power_codes.quantize(v, code), code) for name, code in codes.items()}
    zeroed = {name: ((back == 0) & (v > 0)).float().mean().item() for name, back in coded.items()}
    blowup = {name: largest_update(back) / largest_update(v) for name, back in coded.items()}
    show_table(
        "The embedding's second moment v in 8 bits (blocks of 256), and AdamW's largest update with it",
        [
            {"code": name, "non-zero v stored as 0": f"{zeroed[name]:.2%}", "largest |update| / fp32's": blowup[name]}
            for name in codes
        ],
    )

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = list(LEVERS)
    ax.barh(names, [measured[n].peak / MIB for n in names], color="C0", label="measured")
    ax.scatter([predicted[n].peak / MIB for n in names], names, color="C3", zorder=3, label="predicted")
    ax.invert_yaxis()
    ax.set_xlabel("peak of one step (MiB)")
    ax.set_title("The levers beyond mixed precision")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figures = [save_figure(fig, out, "toolbox_levers.png")]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(list(blowup), list(blowup.values()), color=["C3", "C0"])
    ax.set_yscale("log")
    ax.set_ylabel("largest |update| / with fp32 v")
    ax.set_title("AdamW's update with v in 8 bits")
    figures.append(save_figure(fig, out, "toolbox_codes.png"))
    base, best = measured["earlier levers"].peak, measured["all four"].peak
    conclude(
        f"the four levers take the measured peak from {base / MIB:.1f} to {best / MIB:.1f} MiB "
        f"({best / base:.0%}); with v in a linear 8-bit code AdamW's largest update is {blowup['linear']:,.0f}x "
        f"fp32's (small v stored as 0), with the power code {blowup['power 4']:.2f}x."
    )
    return figures
