"""What a memory lever costs in time, from a FLOP model: the planner weighs memory saved against this.

Backward costs two forwards (gradients for the inputs and for the weights), so a step is 3 forward-units;
a lever that recomputes part of the forward adds that part. These are predictions; benchmarks/ measures.
"""

from __future__ import annotations

from minigpt.model import ModelConfig

# FLOP model: backward costs 2 forwards (gradients for the inputs and for the weights). Checkpointing "full"
# and "sqrt" recompute every block's forward once during backward; "selective" recomputes only the
# elementwise ops (norms, rotary, SiLU, products), ~0% of the FLOPs but memory-bound, so they take more
# time than their FLOPs say. ASSUMPTION (a rule of thumb, not measured here): a fifth of a block's time.
SELECTIVE_RECOMPUTE_SHARE = 0.2


def forward_flops_per_token(cfg: ModelConfig, ctx: int) -> dict[str, float]:
    """Forward FLOPs per token: the blocks (matmuls + causal attention) and the output head (2 per MAC)."""
    C, H = cfg.n_embd, cfg.mlp_hidden
    matmuls = 2 * (4 * C * C + 3 * C * H)  # qkv + proj, gate + up + down
    attention = 2 * 2 * C * ctx / 2  # q.k and p.v; causal: a token sees ctx/2 positions on average
    return {"blocks": cfg.n_layer * (matmuls + attention), "head": 2 * C * cfg.vocab_size}


def relative_step_time(cfg: ModelConfig, ctx: int, checkpointing: str) -> float:
    """Step time relative to no checkpointing: (forward 1 + backward 2 + recomputed part of forward) / 3."""
    flops = forward_flops_per_token(cfg, ctx)
    blocks_share = flops["blocks"] / (flops["blocks"] + flops["head"])  # the head is never recomputed
    recomputed = {
        "none": 0.0,
        "full": blocks_share,
        "sqrt": blocks_share,
        "selective": SELECTIVE_RECOMPUTE_SHARE * blocks_share,
    }[checkpointing]
    return (1 + 2 + recomputed) / 3


# ----------------------------------------------------------------------------------------------------------
# Seconds per step with any set of levers: FLOPs at measured rates, plus the bytes a lever moves

# The optimizer step is elementwise and memory-bound: it costs about as much as this many fp32 FLOPs per
# parameter at the matmul rate. ASSUMPTIONS (rules of thumb, checked by benchmarks/): fused AdamW reads and
# writes weight, gradient and two moments once (about 20); the 8-bit AdamW also decodes and re-encodes both
# moments block by block (about twice that).
OPTIMIZER_FLOPS_PER_PARAM = {"adamw": 20, "adamw8bit": 40}
# Unpacking a quantized base (int8: a scale per block; nf4: two codes a byte, a table lookup, a scale): about
# this many fp32 FLOPs per value, per unpack. ASSUMPTION, as above.
UNPACK_FLOPS_PER_VALUE = {"int8": 2, "nf4": 6}


def step_seconds(
    cfg: ModelConfig,
    tokens: int,
    ctx: int,
    n_params: int,
    rates: dict[str, float],
    precision: str = "fp32",
    checkpointing: str = "none",
    optimizer: str = "adamw",
    loss_chunks: int = 1,
    offloaded_bytes: int = 0,
    lora_base: str | None = None,
    trained_params: int | None = None,
) -> dict[str, float]:
    """Predicted seconds of one step, by part: compute, recompute (checkpointing, chunked loss), optimizer, offload.

    `rates`: matmul FLOP/s per precision ("fp32", "bf16", "fp16") and disk or host bytes/s ("offload"), measured
    on the device. The step in backward moves no work, so it costs nothing here. `lora_base`: LoRA on a frozen
    base of that dtype: the frozen weights need no gradient (backward is one forward, not two), and an int8 or
    nf4 base is unpacked in the forward and again in the backward; `trained_params` (default: all) are stepped.
    """
    flops = forward_flops_per_token(cfg, ctx)
    matmul_rate = rates["bf16" if precision == "bf16-pure" else precision]
    forward = (flops["blocks"] + flops["head"]) * tokens
    recomputed_blocks = 3 * relative_step_time(cfg, ctx, checkpointing) - 3  # in forwards of the whole model
    passes = 2 if lora_base else 3  # forward, input gradients, and weight gradients unless the weights are frozen
    unpack = UNPACK_FLOPS_PER_VALUE.get(lora_base, 0) * 2 * (n_params - cfg.vocab_size * cfg.n_embd)
    return {
        "compute": passes * forward / matmul_rate + unpack / rates["fp32"],
        "recompute": recomputed_blocks * forward / matmul_rate
        + (flops["head"] * tokens / matmul_rate if loss_chunks > 1 else 0.0),  # each chunk's logits made again
        "optimizer": OPTIMIZER_FLOPS_PER_PARAM[optimizer] * (trained_params or n_params) / rates["fp32"],
        "offload": 2 * offloaded_bytes / rates["offload"] if offloaded_bytes else 0.0,  # out, then back in
    }
