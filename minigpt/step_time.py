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
