"""The activations of a step: what autograd keeps for backward, tensor by tensor, predicted from the shape.

What one block saves per token without checkpointing (C = n_embd, H = mlp_hidden = 8/3 C rounded up to
a multiple of 64, h = n_head; dropout off):
    fp32         52 C + 16 H + 8 + 4h bytes
    bf16, fp16   36 C +  8 H + 8 + 4h  (autocast: the residual stream and the norms stay fp32)
    bf16-pure    30 C +  8 H + 8 + 4h  (the norms still keep an fp32 copy of their input)
Outside the blocks, per token: the token ids and targets (8 + 8), the final norm (4 + 4C + rC), lm_head's
input (aC) and the fp32 log-softmax over the vocabulary (4V); a = 4 in fp32 and 2 otherwise, r = 2 in
bf16-pure and 4 otherwise. The textbook formulas at the end are there to compare with.
"""

from __future__ import annotations

import torch

from minigpt.memory.breakdown import Widths, check_mode, check_shape, device_type, widths
from minigpt.memory.loss_head import loss_head_rows
from minigpt.memory.offloaded import is_offloaded
from minigpt.model import ModelConfig
from minigpt.recompute import sqrt_segments


def _block_rows(cfg: ModelConfig, batch: int, ctx: int, w: Widths, device: str) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of each tensor ONE block saves, without checkpointing.

    Read it next to model.Block. C = n_embd, H = mlp_hidden, a = compute bytes. Tensors that views
    share are one storage, counted once; parameters and buffers are not activations. The batch matters
    only to CPU attention with dropout in fp32 (math_path_rows).
    """
    C, H, T, nh, hd, a = cfg.n_embd, cfg.mlp_hidden, ctx, cfg.n_head, cfg.head_dim, w.compute
    copy = ", cast by autocast" if w.autocast else ""
    # RMSNorm upcasts its input (x.float(): the block input itself unless bf16-pure makes an fp32 copy),
    # and saves x (for the pow and the product), 1/rms, and x/rms (for the gain's gradient).
    x32 = "fp32 copy of the input" if w.residual == 2 else "input, fp32 (the residual stream itself)"
    rows = [
        (f"attn_norm: {x32}", 4 * C, 0),
        ("attn_norm: 1/rms, one fp32 per token", 4, 0),
        ("attn_norm: x/rms, before the gain", w.residual * C, 0),
        (f"qkv input: attn_norm's output{copy}", a * C, 0),
    ]
    if cfg.dropout > 0 and device != "cuda":
        # With dropout, CPU attention has no fused kernel: the math path upcasts q, k, v to fp32 and
        # stores the T x T probabilities, the dropout mask and the dropped probabilities.
        rows += math_path_rows(cfg, batch, ctx, w)
    else:
        rows += [
            ("qkv output (3C): v is a view of it, so all of it stays", 3 * a * C, 0),
            ("q and k after RoPE (new tensors, saved by attention)", 2 * a * C, 0),
            ("attention output (saved by its own backward)", a * C, 0),
            # (CUDA's memory-efficient kernel, used for fp32, pads T to a multiple of 32 here)
            ("attention logsumexp, fp32, one per head", 4 * nh, 0),
        ]
        if cfg.dropout > 0:  # the fused CUDA kernels regenerate the mask from a seed and an offset
            rows.append(("attention dropout RNG seed and offset (CUDA, derived)", 0, 16))
    if w.autocast:  # apply_rope casts cos and sin for q and again for k: four (T, head_dim/2) tables
        # (in fp32 the saved tables are the model's buffers; bf16-pure converted the buffers to bf16)
        rows.append(("RoPE cos/sin cast to 16 bits, for q and for k", 0, 4 * T * (hd // 2) * a))
    if not (device == "cuda" and a == 4):
        rows.append(("proj input: attention output transposed to (B, T, C), a copy", a * C, 0))
    # (on CUDA in fp32 the memory-efficient attention kernel already writes its output in (B, T, heads,
    # head_dim) order, so the transpose is a view and proj's input is the attention output: no copy)
    if cfg.dropout > 0:
        rows.append(("attention residual dropout mask", mask_bytes(a, device) * C, 0))
    gate_up = ", cast twice by autocast (gate and up each)" if w.autocast else " (shared by gate and up)"
    rows += [
        (f"mlp_norm: {x32.replace('input', 'residual after attention')}", 4 * C, 0),
        ("mlp_norm: 1/rms", 4, 0),
        ("mlp_norm: x/rms", w.residual * C, 0),
        (f"gate and up input: mlp_norm's output{gate_up}", a * C * (2 if w.autocast else 1), 0),
        ("gate output (saved by SiLU)", a * H, 0),
        ("up output (saved by the product)", a * H, 0),
        ("SiLU(gate) (saved by the product)", a * H, 0),
        ("SiLU(gate) * up: down's input", a * H, 0),
    ]
    if cfg.dropout > 0:
        rows.append(("MLP dropout mask", mask_bytes(a, device) * C, 0))
    return rows


def math_path_rows(cfg: ModelConfig, batch: int, ctx: int, w: Widths) -> list[tuple[str, int, int]]:
    """What CPU attention's math path (taken with dropout) saves, as rows: q, k, v, then its T x T tensors.

    It multiplies (batch * heads, T, head_dim) matrices. In 16 bits it first upcasts q, k, v to fp32: three new
    tensors. In fp32 the upcast is no copy: q and k are RoPE's outputs, and v, a view of qkv's output, is copied
    by the reshape to batch * heads matrices, except at a batch of 1, where that reshape is still a view: v's
    view is saved and keeps all of qkv's output (3C) alive.
    """
    C, T = cfg.n_embd, ctx
    if w.compute == 4 and batch == 1:
        qkv = [
            ("attention (math path): q and k (RoPE's outputs), fp32", 8 * C, 0),
            ("attention (math path): qkv output (3C), kept by v's view (a batch of 1)", 12 * C, 0),
        ]
    else:
        qkv = [("attention (math path): q, k, v as fp32 copies", 12 * C, 0)]
    return qkv + [
        ("attention (math path): softmax probabilities, T per head", 4 * cfg.n_head * T, 0),
        ("attention (math path): dropout mask, T per head", 4 * cfg.n_head * T, 0),
        ("attention (math path): probabilities after dropout", 4 * cfg.n_head * T, 0),
    ]


def mask_bytes(value_bytes: int, device: str) -> int:
    """A dropout mask: CUDA's fused kernel keeps a bool per value; elsewhere it has the input's dtype."""
    return 1 if device == "cuda" else value_bytes


def selective_rows(cfg: ModelConfig, ctx: int, w: Widths, device: str) -> list[tuple[str, int, int]]:
    """What recompute.py's selective policy keeps per block: the outputs of matmuls and attention."""
    C, H, nh, a = cfg.n_embd, cfg.mlp_hidden, cfg.n_head, w.compute
    rows = [("block input (kept by checkpoint)", w.residual * C, 0), ("qkv matmul output", 3 * a * C, 0)]
    if cfg.dropout > 0 and device != "cuda":  # math-path attention: two bmm outputs, in fp32
        rows += [
            ("q @ k^T scores (bmm output), T per head", 4 * nh * ctx, 0),
            ("probabilities @ v (bmm output), fp32", 4 * C, 0),
        ]
    else:
        rows += [("attention output", a * C, 0), ("attention logsumexp", 4 * nh, 0)]
    return rows + [
        ("proj matmul output", a * C, 0),
        ("gate matmul output", a * H, 0),
        ("up matmul output", a * H, 0),
        ("down matmul output", a * C, 0),
    ]


def _outside_rows(cfg: ModelConfig, w: Widths, device: str, loss_chunks: int = 1) -> list[tuple[str, int, int]]:
    """Saved outside the blocks: embedding, final norm, lm_head and the loss."""
    C, a = cfg.n_embd, w.compute
    rows = [("token ids, int64 (saved by the embedding)", 8, 0)]
    if cfg.dropout > 0:
        rows.append(("embedding dropout mask", mask_bytes(w.residual, device) * C, 0))
    return rows + [
        ("final_norm: input, fp32 (the last block's output, or its fp32 copy)", 4 * C, 0),
        ("final_norm: 1/rms", 4, 0),
        ("final_norm: x/rms", w.residual * C, 0),
        ("lm_head input: final_norm's output" + (", cast by autocast" if w.autocast else ""), a * C, 0),
        *loss_head_rows(cfg, loss_chunks),
    ]


def activation_table(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    device: torch.device | str = "cuda",
    *,
    loss_chunks: int = 1,
    offload_activations: bool = False,
) -> list[dict]:
    """Every tensor the training forward keeps for backward: one row each, with its bytes per token.

    `count` is how many of it there are (n_layer for a per-block tensor, the number of segments for
    sqrt checkpointing); `bytes` = count * (per_token * batch * ctx + fixed). Their sum is activations.
    `offloaded`: --offload-activations moves the row off the device (then activations are the other rows).
    """
    check_shape(model_cfg, batch, ctx)
    w, dev, mode = widths(precision), device_type(device), check_mode(checkpointing)
    L = model_cfg.n_layer
    if mode == "none":
        groups = [("each block", L, _block_rows(model_cfg, batch, ctx, w, dev))]
    elif mode == "full":
        kept = [("block input (kept by checkpoint)", w.residual * model_cfg.n_embd, 0)]
        groups = [("each block", L, kept)]
    elif mode == "sqrt":
        groups = [
            (
                "each segment",
                len(sqrt_segments(L)),
                [("segment input (kept by checkpoint)", w.residual * model_cfg.n_embd, 0)],
            )
        ]
    else:
        groups = [("each block", L, selective_rows(model_cfg, ctx, w, dev))]
    groups.append(("outside the blocks", 1, _outside_rows(model_cfg, w, dev, loss_chunks)))
    tokens = batch * ctx
    return [
        {
            "part": part,
            "tensor": name,
            "per_token": per_token,
            "fixed": fixed,
            "count": count,
            "bytes": count * (per_token * tokens + fixed),
            "offloaded": offload_activations and is_offloaded(name, per_token, fixed, tokens, mode, dev),
        }
        for part, count, rows in groups
        for name, per_token, fixed in rows
    ]


def layer_bytes_per_token(model_cfg: ModelConfig, precision: str = "fp32", device: str = "cuda") -> int:
    """Bytes one block keeps per token without checkpointing: in fp32, 52 C + 16 H + 8 + 4 n_head on a CPU
    (48 C + ... on CUDA, whose attention output needs no transposed copy).

    The RoPE tables autocast casts do not grow with tokens and are left out. With dropout on a CPU,
    attention's T x T matrices are counted at the model's full ctx, and a batch larger than 1.
    """
    rows = _block_rows(model_cfg, 2, model_cfg.ctx, widths(precision), device_type(device))
    return sum(per_token for _, per_token, _ in rows)


def block_activation_bytes(cfg: ModelConfig, batch: int, ctx: int, w: Widths, device: str) -> int:
    """Bytes one block saves for backward without checkpointing (its rows of activation_table)."""
    return sum(p * batch * ctx + f for _, p, f in _block_rows(cfg, batch, ctx, w, device))


# ----------------------------------------------------------------------------------------------------------
# The textbook formulas, for comparison


def activations_rule_of_thumb(cfg: ModelConfig, batch: int, ctx: int, bytes_per_value: int = 4) -> int:
    """B * T * C * L * 10 values: "about ten tensors of width C saved per layer" (a common rule).

    Ours keeps more: four SwiGLU tensors 8/3 C wide, q/k/v plus rotated q and k, fp32 norm copies,
    and outside the blocks a log-softmax over the vocabulary (4 V bytes per token, often more than a layer).
    """
    return batch * ctx * cfg.n_embd * cfg.n_layer * 10 * bytes_per_value


def activations_korthikanti(cfg: ModelConfig, batch: int, ctx: int) -> int:
    """L * s*b*h * (34 + 5*a*s/h) bytes (Korthikanti et al. 2022): a GPT-3 block in 16-bit activations.

    It assumes LayerNorm, a 4h GELU MLP, 1-byte dropout masks and a materialized a*s*s score matrix
    (softmax 2 + mask 1 + dropped 2 = the 5as/h term). Ours: fused SDPA never stores the s x s scores,
    SwiGLU has three matmuls and an 8/3 h hidden, RMSNorm works in fp32, no masks unless dropout > 0.
    """
    s, b, h, a = ctx, batch, cfg.n_embd, cfg.n_head
    return cfg.n_layer * s * b * (34 * h + 5 * a * s)  # = L * s*b*h*(34 + 5as/h), kept in integers
