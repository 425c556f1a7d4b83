"""The memory of a LoRA step (minigpt.lora): what shrinks, what does not, and what is new.

With the base frozen, the static state changes term by term:
  - weights: the frozen block matrices in --base-dtype (fp32 4, bf16 2, int8 1, nf4 0.5 bytes a value, plus an
    fp32 scale per block of int8/nf4), the adapters in fp32 (r x (in + out) per adapted layer), and the embedding
    and norm gains in fp32;
  - gradients and AdamW state: the adapters' only (4 + 8 bytes a trained value) instead of the whole model's.
Activations shrink only a little (about a fifth on 10m): the gradient must still flow back through every
frozen layer, so attention, SiLU and the product keep what they kept, and each adapter keeps its layer's input.
What goes is what a weight's own gradient needed: a frozen linear's input, a frozen norm gain's x/rms.
New are the unpacked weights: every frozen matrix is cast or dequantized for its matmul, in the forward and
again in the backward, one layer at a time (they show as weight_copies).
"""

from __future__ import annotations

from minigpt.lora import parse_targets
from minigpt.memory.activations import mask_bytes, math_path_rows, selective_rows
from minigpt.memory.breakdown import Widths, device_type
from minigpt.memory.loss_head import loss_head_rows
from minigpt.model import ModelConfig
from minigpt.quantize import block_size, quantized_bytes
from minigpt.recompute import sqrt_segments


def linear_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out, in) of each linear layer of a block, by name."""
    C, H = cfg.n_embd, cfg.mlp_hidden
    return {"qkv": (3 * C, C), "proj": (C, C), "gate": (H, C), "up": (H, C), "down": (C, H)}


def adapter_params(cfg: ModelConfig, rank: int, targets: str) -> int:
    """Values of all adapters: r x (in + out) for each adapted layer of each block."""
    shapes = linear_shapes(cfg)
    return cfg.n_layer * sum(rank * sum(shapes[n]) for n in parse_targets(targets))


def lora_static(
    cfg: ModelConfig,
    rank: int,
    targets: str = "attn",
    base_dtype: str = "fp32",
    quant_block: int = 64,
    train_norms: bool = False,
    train_embedding: bool = False,
) -> dict[str, int]:
    """The static terms of a LoRA step in bytes, each on its own: base weights, adapters, the rest, grads, AdamW."""
    shapes = linear_shapes(cfg)
    norms, embedding = (2 * cfg.n_layer + 1) * cfg.n_embd, cfg.vocab_size * cfg.n_embd
    adapters = adapter_params(cfg, rank, targets)
    trained = adapters + (norms if train_norms else 0) + (embedding if train_embedding else 0)
    return {
        "base weights": cfg.n_layer * sum(quantized_bytes(s, base_dtype, quant_block) for s in shapes.values()),
        "adapter weights": 4 * adapters,
        "embedding and norms": 4 * (norms + embedding),
        "gradients": 4 * trained,  # fp32, the trained tensors only
        "optimizer": 8 * trained,  # AdamW's two fp32 moments, the trained tensors only
        "trained tensors": 2 * len(parse_targets(targets)) * cfg.n_layer
        + (2 * cfg.n_layer + 1) * train_norms
        + train_embedding,
    }


def trained_numels(
    cfg: ModelConfig, rank: int, targets: str, train_norms: bool = False, train_embedding: bool = False
) -> dict[str, list[int]]:
    """Values of each trained tensor, by where it is: "embedding", "blocks" (A, B, the gains), "final norm".

    What AdamW8bit's state and the step in backward's hooks are sized by, tensor by tensor.
    """
    shapes = linear_shapes(cfg)
    per_block = [rank * side for n in parse_targets(targets) for side in shapes[n][::-1]]  # A (r, in), B (out, r)
    per_block += [cfg.n_embd, cfg.n_embd] if train_norms else []
    return {
        "embedding": [cfg.vocab_size * cfg.n_embd] if train_embedding else [],
        "blocks": per_block * cfg.n_layer,
        "final norm": [cfg.n_embd] if train_norms else [],
    }


def unpack_bytes(shape: tuple[int, int], base_dtype: str, quant_block: int, compute: int) -> tuple[int, int]:
    """(peak, result) bytes of unpacking one frozen (out, in) weight into the compute dtype (`compute` bytes).

    Read it next to quantize.dequantize: int8 makes fp32 values (4 a value) and one fp32 factor per block,
    scaled in place; nf4 unpacks the two 4-bit indices of each byte (1 a value), widens them to int32 (4),
    looks them up (4): 8 a value at once. A cast to a 16-bit compute dtype adds its 2 a value beside the fp32.
    fp32 or bf16 storage already in the compute dtype is used as it is: nothing made.
    """
    n = shape[0] * shape[1]
    stored = {"fp32": 4, "bf16": 2}.get(base_dtype)
    if stored is not None:
        return (0, 0) if stored == compute else (compute * n, compute * n)
    cast = compute * n if compute != 4 else 0  # the fp32 values cast to the 16-bit compute dtype
    if base_dtype == "int8":
        factors = 4 * (n // block_size(shape, quant_block))
        return max(4 * n + factors, 4 * n + cast), cast or 4 * n
    return max(8 * n, 4 * n + cast), cast or 4 * n


def lora_activation_rows(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    w: Widths,
    rank: int,
    targets: str,
    mode: str = "none",
    device: str = "cpu",
    *,
    train_norms: bool = False,
    train_embedding: bool = False,
    loss_chunks: int = 1,
) -> list[dict]:
    """Every tensor a LoRA step's forward keeps for backward, one row each (activation_table's format).

    A frozen linear keeps nothing (dx = dy @ W needs no x); lm_head, tied to the embedding, keeps its input only
    when the embedding trains. The first block's input needs a gradient only then (or from dropout's mask on
    it, never): without it, nothing before the first adapted layer or trained gain keeps anything.
    Checkpointing keeps what it keeps in full training: each block's or segment's input, or (selective) the
    outputs of every matmul, the frozen ones and the adapters' two, and of attention.
    """
    names, dev = parse_targets(targets), device_type(device)
    norms = dict(train_norms=train_norms)
    if mode == "none":
        first = _block_rows(cfg, batch, ctx, w, rank, names, dev, input_grad=train_embedding, **norms)
        later = _block_rows(cfg, batch, ctx, w, rank, names, dev, input_grad=True, **norms)
        groups = [("first block", 1, first), ("each later block", cfg.n_layer - 1, later)]
    elif mode == "selective":
        groups = [("each block", cfg.n_layer, lora_selective_rows(cfg, ctx, w, rank, names, dev))]
    else:
        part, count = (
            ("each block", cfg.n_layer) if mode == "full" else ("each segment", len(sqrt_segments(cfg.n_layer)))
        )
        groups = [(part, count, [(f"{part[5:]} input (kept by checkpoint)", w.residual * cfg.n_embd, 0)])]
    groups.append(("outside the blocks", 1, _outside_rows(cfg, w, dev, train_norms, train_embedding, loss_chunks)))
    tokens = batch * ctx
    return [
        {"part": part, "tensor": name, "per_token": p, "fixed": f, "count": n, "bytes": n * (p * tokens + f)}
        for part, n, rows in groups
        for name, p, f in rows
    ]


def _outside_rows(
    cfg: ModelConfig, w: Widths, device: str, train_norms: bool, train_embedding: bool, loss_chunks: int
) -> list[tuple[str, int, int]]:
    """What the embedding, the final norm, lm_head and the loss keep: the embedding's part only when it trains,
    lm_head's input when its (tied) weight trains or the loss is chunked."""
    C = cfg.n_embd
    rows = []
    if train_embedding:
        rows.append(("token ids, int64 (saved by the embedding)", 8, 0))
        if cfg.dropout > 0:
            rows.append(("embedding dropout mask", mask_bytes(w.residual, device) * C, 0))
    rows += [("final_norm: input, fp32", 4 * C, 0), ("final_norm: 1/rms", 4, 0)]
    if train_norms:
        rows.append(("final_norm: x/rms, for its trained gain", w.residual * C, 0))
    if train_embedding or loss_chunks > 1:  # the chunked loss keeps its input whether the weight trains or not
        cast = ", cast by autocast" if w.autocast else ""
        rows.append((f"lm_head input: final_norm's output{cast}", w.compute * C, 0))
    return rows + loss_head_rows(cfg, loss_chunks)


def _norm_rows(name: str, input_grad: bool, trained: bool, w: Widths, C: int) -> list[tuple[str, int, int]]:
    """What an RMSNorm keeps: its fp32 input and 1/rms when its input needs a gradient, x/rms when its gain trains."""
    rows = [(f"{name}: input, fp32", 4 * C, 0), (f"{name}: 1/rms", 4, 0)] if input_grad else []
    return rows + ([(f"{name}: x/rms, for its trained gain", w.residual * C, 0)] if trained else [])


def _adapter_rows(name: str, x: str, per_token: int, w: Widths, rank: int) -> list[tuple[str, int, int]]:
    """An adapter keeps its input (for A's gradient) and x @ A^T * scale (for B's)."""
    return [(f"{name} adapter input: {x}", per_token, 0), (f"{name} adapter: x @ A^T * scale", w.compute * rank, 0)]


def rope_cast_bytes(cfg: ModelConfig, ctx: int, w: Widths) -> int:
    """RoPE's cos and sin tables cast to the compute dtype, once for q and once for k: (ctx, head_dim / 2) each."""
    return 4 * ctx * (cfg.head_dim // 2) * w.compute


def _input_grads(names: tuple[str, ...], input_grad: bool, train_norms: bool) -> dict[str, bool]:
    """Whether each adapted layer's input needs a gradient in a block: it does when anything before it does (an
    adapter, a trained gain, or the block's input)."""
    attention = input_grad or train_norms or "qkv" in names
    residual = attention or "proj" in names
    mlp = residual or train_norms or "gate" in names or "up" in names
    needs = {
        "qkv": input_grad or train_norms,
        "proj": attention,
        "gate": residual or train_norms,
        "up": residual or train_norms,
        "down": mlp,
    }
    return {n: needs[n] for n in names}


def _block_rows(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    w: Widths,
    rank: int,
    names: tuple[str, ...],
    device: str,
    input_grad: bool,
    train_norms: bool,
) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of what one block keeps, read next to model.Block and lora.LoRALinear.

    `input_grad`: whether the block's input needs a gradient (every block's but the first, unless the embedding
    trains). A tensor needs one when anything before it does: an adapter, a trained gain, or the input.
    """
    C, H, nh, a = cfg.n_embd, cfg.mlp_hidden, cfg.n_head, w.compute
    cast = ", cast to 16 bits" if w.autocast else ""
    attention = input_grad or train_norms or "qkv" in names  # q, k, v
    residual = attention or "proj" in names  # attention's output, and the residual stream after it
    gate = residual or train_norms or "gate" in names  # gate's output
    up = residual or train_norms or "up" in names  # up's output
    rows = _norm_rows("attn_norm", input_grad, train_norms, w, C)
    if "qkv" in names:
        rows += _adapter_rows("qkv", f"attn_norm's output{cast}", a * C, w, rank)
    if attention and cfg.dropout > 0 and device != "cuda":  # CPU attention with dropout: the math path
        rows += math_path_rows(cfg, batch, ctx, w)
    elif attention:
        rows += [
            ("qkv output (3C): v is a view of it, so all of it stays", 3 * a * C, 0),
            ("q and k after RoPE (new tensors, saved by attention)", 2 * a * C, 0),
            ("attention output (saved by its own backward)", a * C, 0),
            ("attention logsumexp, fp32, one per head", 4 * nh, 0),
        ]
        if cfg.dropout > 0:
            rows.append(("attention dropout RNG seed and offset (CUDA, derived)", 0, 16))
    if attention and w.autocast:
        rows.append(("RoPE cos/sin cast to 16 bits, for q and for k", 0, rope_cast_bytes(cfg, ctx, w)))
    if "proj" in names:
        rows += _adapter_rows("proj", "attention output as (B, T, C), a copy", a * C, w, rank)
    if residual and cfg.dropout > 0:
        rows.append(("attention residual dropout mask", mask_bytes(a, device) * C, 0))
    rows += _norm_rows("mlp_norm", residual, train_norms, w, C)
    gate_up = [n for n in ("gate", "up") if n in names]
    if gate_up:  # one tensor shared by both in fp32; autocast casts it once per adapted layer
        copies = len(gate_up) if w.autocast else 1
        rows.append((f"gate/up adapter input: mlp_norm's output{cast}", a * C * copies, 0))
        rows += [(f"{n} adapter: x @ A^T * scale", a * rank, 0) for n in gate_up]
    if gate:
        rows += [
            ("gate output (saved by SiLU)", a * H, 0),
            ("up output (saved by the product, for SiLU's side)", a * H, 0),
        ]
    if up:
        rows.append(("SiLU(gate) (saved by the product, for up's side)", a * H, 0))
    if "down" in names:
        rows += _adapter_rows("down", "SiLU(gate) * up", a * H, w, rank)
    if cfg.dropout > 0:  # down's output always needs a gradient: something before it does
        rows.append(("MLP dropout mask", mask_bytes(a, device) * C, 0))
    return rows


def lora_selective_rows(
    cfg: ModelConfig, ctx: int, w: Widths, rank: int, names: tuple[str, ...], device: str
) -> list[tuple[str, int, int]]:
    """What selective checkpointing keeps of a LoRA block: the output of every matmul (frozen or an adapter's)
    and of attention, needed or not; the weights are unpacked again when the block is recomputed."""
    a = w.compute
    rows = [r for r in selective_rows(cfg, ctx, w, device)]
    for name, (out, _) in linear_shapes(cfg).items():
        if name in names:
            rows += [
                (f"{name} adapter: x @ A^T (matmul output)", a * rank, 0),
                (f"{name} adapter: B's matmul output", a * out, 0),
            ]
    return rows
