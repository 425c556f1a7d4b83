"""What a memory lever costs in time: a step's FLOPs and elementwise work at rates calibrated on the device.

Backward costs two forwards (gradients for the inputs and for the weights), so a step is 3 forward-units;
a lever that recomputes part of the forward adds that part. The rates come from minigpt.calibrate, which
times real steps of the engine; benchmarks/bench_step_time.py checks the predictions against measured steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from minigpt.model import ModelConfig

# The share of the blocks' forward that each checkpointing mode runs again, for the planners without a
# calibration (minigpt.plan, the chapters). "full" and "sqrt" recompute every block's forward once (the FLOP
# model). "selective" recomputes only elementwise ops (norms, rotary, SiLU, products): no matmul, but
# memory-bound. Its share is measured, not assumed: a run of benchmarks/RESULTS.md section 4 timed selective at
# 1.14x a plain 10m fp32 step on the CPU, where the blocks are 81% of the FLOPs, so 3 * 0.14 / 0.81 = 0.52 of the
# blocks' forward. Each run of that section prints the share its own ratio implies, and the ratios spread by 30% or
# more: later runs timed 1.04x to 1.08x, shares of 0.14 to 0.30, so 0.5 is the top of what was measured
# (benchmarks/cuda/RESULTS.md measures more on a GPU: 1.32x at 125m, spread 65%). The planners with a calibration
# time selective recompute on the device instead.
SELECTIVE_RECOMPUTE_SHARE = 0.5
RECOMPUTE_SHARE = {"none": 0.0, "full": 1.0, "sqrt": 1.0, "selective": SELECTIVE_RECOMPUTE_SHARE}


def forward_flops_per_token(cfg: ModelConfig, ctx: int) -> dict[str, float]:
    """Forward FLOPs per token: the blocks (matmuls + causal attention) and the output head (2 per MAC)."""
    C, H = cfg.n_embd, cfg.mlp_hidden
    matmuls = 2 * (4 * C * C + 3 * C * H)  # qkv + proj, gate + up + down
    attention = 2 * 2 * C * ctx / 2  # q.k and p.v; causal: a token sees ctx/2 positions on average
    return {"blocks": cfg.n_layer * (matmuls + attention), "head": 2 * C * cfg.vocab_size}


def elementwise_values_per_token(cfg: ModelConfig) -> dict[str, float]:
    """Values the forward's memory-bound ops write per token: what autograd keeps in fp32 (minigpt.memory's
    activations: 52 C + 16 H bytes per block, the logits and their log-softmax in the head), in 4-byte values."""
    return {"blocks": cfg.n_layer * (13 * cfg.n_embd + 4 * cfg.mlp_hidden), "head": 2 * cfg.vocab_size}


def relative_step_time(cfg: ModelConfig, ctx: int, checkpointing: str, shares: dict | None = None) -> float:
    """Step time relative to no checkpointing: (forward 1 + backward 2 + recomputed part of forward) / 3.

    `shares`: the share of the blocks' forward each mode recomputes (default RECOMPUTE_SHARE)."""
    flops = forward_flops_per_token(cfg, ctx)
    blocks_share = flops["blocks"] / (flops["blocks"] + flops["head"])  # the head is never recomputed
    return (1 + 2 + (shares or RECOMPUTE_SHARE)[checkpointing] * blocks_share) / 3


# ----------------------------------------------------------------------------------------------------------
# Seconds per step with any set of levers, at calibrated rates


@dataclass(frozen=True)
class Calibration:
    """What a step costs on one device, measured by minigpt.calibrate (or given by a test).

    compute: precision -> (seconds per FLOP, per elementwise value, per layer) of a real forward + backward: a
    step of a part (the blocks, the head) costs tokens x (3 forward FLOPs x the first + values x the second) plus
    its layers (the head is one) x the third, which is what launching a layer's ops costs whatever its size.
    optimizer: seconds per parameter of the optimizer step in fp32 ("adamw", "adamw8bit"), and
    optimizer_extra: what each precision adds per parameter (fp16's unscale, bf16-pure's master copies).
    per_step: seconds every step costs whatever its size: the optimizer step's fixed part (the schedule, the
    clipping's launches) and what train_step does around forward, backward and the optimizer.
    recompute: checkpointing mode -> share of the blocks' forward time it adds, and recompute_per_layer: what
    it adds per block whatever the block's size (torch's checkpoint saving and restoring its state).
    chunked_loss: share of the head's forward time the chunked loss adds. unpack: seconds per value to unpack
    an int8 or nf4 base, as a LoRA step on it takes them. offload: bytes per second of a round trip out and
    back, as a step with --offload-activations moves them, and offload_per_layer: what such a step costs more
    per block whatever it moves (the offloader's file or copy per saved tensor). lora_saving: the share of the
    weight gradients' matmuls that freezing a LoRA base saves (1: all of them, the FLOP model).
    spread: each timing's (max - min) / median.
    """

    compute: dict[str, tuple[float, float, float]]
    optimizer: dict[str, float]
    optimizer_extra: dict[str, float]
    recompute: dict[str, float]
    chunked_loss: float
    unpack: dict[str, float]
    offload: float
    per_step: float = 0.0
    offload_per_layer: float = 0.0
    lora_saving: float = 1.0
    recompute_per_layer: dict[str, float] = field(default_factory=dict)
    spread: dict[str, float] = field(default_factory=dict)
    created: str = ""  # when it was measured (UTC)
    source: str = ""  # where it came from: measured now, or the cache file it was read from

    @property
    def worst_spread(self) -> float:
        return max(self.spread.values(), default=0.0)

    def describe(self) -> str:
        """One line: where the rates came from and how much their timings spread over the rounds: the typical
        (median) timing's spread, and the worst one's, named (a few tiny timings are the noisiest)."""
        if not self.spread:
            return self.source
        worst = max(self.spread, key=self.spread.get)
        typical = statistics.median(self.spread.values())
        return f"{self.source} (timings spread {typical:.0%} typically, at most {self.spread[worst]:.0%}: {worst})"


def part_seconds(
    cfg: ModelConfig, tokens: int, ctx: int, rates: tuple[float, float, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Forward + backward of each part (the blocks, the head) at (seconds per FLOP, per value, per layer): its
    matmuls (3 forward FLOPs a token), and the rest (elementwise values, and a launch cost per layer)."""
    per_flop, per_value, per_layer = rates
    flops, values = forward_flops_per_token(cfg, ctx), elementwise_values_per_token(cfg)
    layers = {"blocks": cfg.n_layer, "head": 1}
    matmuls = {k: tokens * 3 * flops[k] * per_flop for k in layers}
    rest = {k: tokens * values[k] * per_value + layers[k] * per_layer for k in layers}
    return matmuls, rest


def step_seconds(
    cfg: ModelConfig,
    tokens: int,
    ctx: int,
    n_params: int,
    cal: Calibration,
    precision: str = "fp32",
    checkpointing: str = "none",
    optimizer: str = "adamw",
    loss_chunks: int = 1,
    offloaded_bytes: int = 0,
    lora_base: str | None = None,
    trained_params: int | None = None,
) -> dict[str, float]:
    """Predicted seconds of one step, by part: compute, recompute (checkpointing, chunked loss), optimizer, offload,
    and the fixed cost of a step.

    The step in backward moves no work, so it costs nothing here. `lora_base`: LoRA on a frozen base of that
    dtype: the frozen weights need no gradient (of the backward's two matmul passes, the calibrated share of the
    weight gradients' one is saved; its elementwise work stays), and an int8 or nf4 base is unpacked in the
    forward and again in the backward; `trained_params` (default: all) are stepped.
    """
    matmuls, rest = part_seconds(cfg, tokens, ctx, cal.compute[precision])
    part = {k: matmuls[k] + rest[k] for k in matmuls}  # forward + backward of each part: its forward is a third
    # forward, input gradients, and weight gradients, of which a frozen base saves the calibrated share
    passes = 3 - cal.lora_saving if lora_base else 3
    compute = passes / 3 * sum(matmuls.values()) + sum(rest.values())
    if lora_base:
        unpacked = 2 * (n_params - cfg.vocab_size * cfg.n_embd) if lora_base in cal.unpack else 0
        compute += unpacked * cal.unpack.get(lora_base, 0.0)
    recompute = cal.recompute[checkpointing] * part["blocks"] / 3
    recompute += cfg.n_layer * cal.recompute_per_layer.get(checkpointing, 0.0)
    recompute += cal.chunked_loss * part["head"] / 3 if loss_chunks > 1 else 0.0
    stepped = trained_params or n_params
    offload = cfg.n_layer * cal.offload_per_layer + 2 * offloaded_bytes / cal.offload  # out, then back in
    return {
        "compute": compute,
        "recompute": recompute,
        "optimizer": stepped * (cal.optimizer[optimizer] + cal.optimizer_extra.get(precision, 0.0)),
        "offload": offload if offloaded_bytes else 0.0,
        "fixed": cal.per_step,
    }
