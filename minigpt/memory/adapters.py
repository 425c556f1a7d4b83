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
from minigpt.memory.breakdown import MemoryBreakdown, Widths, check_mode, check_shape, device_type, widths
from minigpt.memory.loss_head import loss_head_bytes, loss_head_rows
from minigpt.model import ModelConfig
from minigpt.optim import FUSED_ADAMW_DEVICES
from minigpt.precision import normalize_precision
from minigpt.quantize import block_size, quantized_bytes


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


def lora_activation_rows(cfg: ModelConfig, batch: int, ctx: int, w: Widths, rank: int, targets: str) -> list[dict]:
    """Every tensor a LoRA step's forward keeps for backward (activation_table's format), frozen norms and embedding.

    A frozen linear keeps nothing (dx = dy @ W needs no x); lm_head, tied to the frozen embedding, keeps no input.
    The first block's input comes from the frozen embedding and needs no gradient: there, nothing before the
    first adapted layer needs one, so nothing before it is kept (its attention norm never keeps anything).
    """
    names = parse_targets(targets)
    first = _block_rows(cfg, ctx, w, rank, names, first_block=True)
    later = _block_rows(cfg, ctx, w, rank, names, first_block=False)
    outside = [("final_norm: input, fp32", 4 * cfg.n_embd, 0), ("final_norm: 1/rms", 4, 0), *loss_head_rows(cfg)]
    groups = [
        ("first block", 1, first),
        ("each later block", cfg.n_layer - 1, later),
        ("outside the blocks", 1, outside),
    ]
    tokens = batch * ctx
    return [
        {"part": part, "tensor": name, "per_token": p, "fixed": f, "count": n, "bytes": n * (p * tokens + f)}
        for part, n, rows in groups
        for name, p, f in rows
    ]


def _first_block_inputs(targets: str) -> list[str]:
    """The adapted layers of the first block whose input needs no gradient: those before any adapter."""
    names = parse_targets(targets)
    before = {"qkv": (), "proj": ("qkv",), "gate": ("qkv", "proj"), "up": ("qkv", "proj"), "down": tuple(names)}
    return [n for n in names if not any(m in names for m in before[n] if m != n)]


def _block_rows(
    cfg: ModelConfig, ctx: int, w: Widths, rank: int, names: tuple[str, ...], first_block: bool
) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of what one block keeps, read next to model.Block and lora.LoRALinear."""
    C, H, nh, hd, a = cfg.n_embd, cfg.mlp_hidden, cfg.n_head, cfg.head_dim, w.compute
    cast = ", cast to 16 bits" if w.autocast else ""
    # which tensors need a gradient: after the first block, all; in it, only what an adapter feeds
    needs_grad = not first_block
    attention = needs_grad or "qkv" in names  # q, k, v
    residual = attention or "proj" in names  # the residual stream after attention
    gate = residual or "gate" in names  # gate's output
    up = residual or "up" in names  # up's output
    rows = []
    if needs_grad:
        rows += [("attn_norm: input, fp32 (the residual stream itself)", 4 * C, 0), ("attn_norm: 1/rms", 4, 0)]
    if "qkv" in names:
        rows += [
            (f"qkv adapter input: attn_norm's output{cast}", a * C, 0),
            ("qkv adapter: x @ A^T * scale", a * rank, 0),
        ]
    if attention:
        rows += [
            ("qkv output (3C): v is a view of it, so all of it stays", 3 * a * C, 0),
            ("q and k after RoPE (new tensors, saved by attention)", 2 * a * C, 0),
            ("attention output (saved by its own backward)", a * C, 0),
            ("attention logsumexp, fp32, one per head", 4 * nh, 0),
        ]
        if w.autocast:
            rows.append(("RoPE cos/sin cast to 16 bits, for q and for k", 0, 4 * ctx * (hd // 2) * a))
    if "proj" in names:
        rows += [("proj adapter input: attention output as (B, T, C), a copy", a * C, 0)]
        rows += [("proj adapter: x @ A^T * scale", a * rank, 0)]
    if residual:
        rows += [("mlp_norm: residual after attention, fp32", 4 * C, 0), ("mlp_norm: 1/rms", 4, 0)]
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
        rows += [("down adapter input: SiLU(gate) * up", a * H, 0), ("down adapter: x @ A^T * scale", a * rank, 0)]
    return rows


def _block_backward(
    cfg: ModelConfig, tokens: int, w: Widths, base_dtype: str, quant_block: int, rank: int, targets: str
) -> int:
    """The worst moment at the top of backward, above the blocks' activations: the final norm, or the top MLP.

    The final norm's backward holds its input and five fp32 (N, C) tensors (the incoming gradient among them).
    Then the top block's MLP, with G, the residual stream's gradient (N, C): down's backward unpacks its weight
    beside G and makes the gradient of its input (N, H); the product's backward makes two more (N, H) before
    it frees anything. An adapter on down runs its backward first: its gradients (fp32) and the gradient of
    its input are made, and down's input and x @ A^T, which it kept, are freed.
    """
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    final_norm = 4 * C * tokens + 5 * 4 * C * tokens
    residual_grad = w.residual * C * tokens
    # autocast: down's output was 16-bit, so its gradient is G cast to 16 bits, held through down's backward
    down_output_grad = a * C * tokens if w.autocast else 0
    peak, result = unpack_bytes((C, H), base_dtype, quant_block, a)
    down_input_grad = a * H * tokens
    adapter, kept_input = 0, 0
    if "down" in parse_targets(targets):  # + its fp32 gradients, - what it kept (and its 16-bit A and B)
        adapter = 4 * rank * (C + H) - a * rank * tokens - (2 * rank * (C + H) if w.autocast else 0)
        kept_input = down_input_grad  # its backward freed down's input: the product's backward comes later
    unpacking = down_output_grad + max(peak, result + down_input_grad)
    product = 3 * down_input_grad - kept_input
    return max(final_norm, residual_grad + adapter + max(unpacking, product))


def lora_estimate(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    device: str = "cuda",
    rank: int = 8,
    targets: str = "attn",
    base_dtype: str = "fp32",
    quant_block: int = 64,
    train_norms: bool = False,
    train_embedding: bool = False,
    library_workspace: int = 0,
) -> MemoryBreakdown:
    """Predicted memory of one LoRA training step, from the config alone (see the module's docstring).

    Verified against the meter to the byte (tests/test_lora.py) for fp32, bf16 and fp16 autocast, every base
    dtype and target, without checkpointing. `library_workspace`: what CUDA's libraries hold (estimate.py's).
    """
    check_shape(cfg, batch, ctx)
    precision, dev = normalize_precision(precision), device_type(device)
    if check_mode(checkpointing) != "none" or train_norms or train_embedding or cfg.dropout > 0:
        raise ValueError(
            "minigpt memory predicts a LoRA step without checkpointing, dropout, --train-norms or --train-embedding; "
            "leave those out to see its prediction (training supports them all)"
        )
    w, tokens, V, C, H = widths(precision), batch * ctx, cfg.vocab_size, cfg.n_embd, cfg.mlp_hidden
    static = lora_static(cfg, rank, targets, base_dtype, quant_block, train_norms, train_embedding)
    weights = static["base weights"] + static["adapter weights"] + static["embedding and norms"]
    rows = lora_activation_rows(cfg, batch, ctx, w, rank, targets)
    activations = sum(r["bytes"] for r in rows)
    block_rows = sum(r["bytes"] for r in rows if r["part"] != "outside the blocks")
    head = loss_head_bytes(cfg, tokens, w)
    # Always there: weights, AdamW's state (made by the first step), the RoPE tables, a 4-byte step counter per
    # trained tensor (fused AdamW), the batch's token ids (the frozen embedding does not keep them: they count
    # here) and, on CUDA, cuBLAS's workspaces.
    rope = 2 * cfg.ctx * (cfg.head_dim // 2) * w.model
    counters = 4 * static["trained tensors"] if dev in FUSED_ADAMW_DEVICES else 0
    always = weights + static["optimizer"] + rope + counters + 8 * tokens
    if dev == "cuda":
        always += library_workspace
    # Autocast: 16-bit copies of the adapters (cached, then saved by their matmuls) and of the tied embedding
    # (cast for lm_head every step, as it is frozen, and saved for its backward).
    adapter_copies = static["adapter weights"] // 2 if w.autocast else 0
    # in the first block, an adapter whose input needs no gradient (see _block_rows) does not keep A's copy
    kept_copies = adapter_copies - (
        w.autocast * 2 * rank * sum(linear_shapes(cfg)[n][1] for n in _first_block_inputs(targets))
    )
    embedding_copy = 2 * V * C if w.autocast else 0
    unpacked = max(unpack_bytes(s, base_dtype, quant_block, w.compute)[0] for s in linear_shapes(cfg).values())
    loss = 4  # the loss itself, one fp32
    scalar_grads = 8  # its gradient, and the gradient of the loss scaled for the window
    if precision == "fp16":  # the GradScaler's scale, the scaled loss and its gradient; its found-inf flag
        scalar_grads, found_inf = scalar_grads + 12, 4
    else:
        found_inf = 0
    block_backward = _block_backward(cfg, tokens, w, base_dtype, quant_block, rank, targets)
    # clip_grad_norm_: a norm per gradient, their stack and the total; fp16: the GradScaler's found-inf flag
    clip_norms = (2 * static["trained tensors"] + 1) * 4 + found_inf
    at_loss = always + activations + adapter_copies + embedding_copy + head.logits_held + head.logits_upcast + loss
    moments = {
        # at the loss (every activation, the logits and their fp32 upcast), or at the widest frozen layer's unpacking
        "forward": max(at_loss, always + block_rows + adapter_copies + unpacked),
        # cross-entropy's two (N, V) gradients; the loss normalizer and the logits (dropped by the step) are gone
        "backward: loss head": always
        + activations
        - 4
        + kept_copies
        + embedding_copy
        + loss
        + scalar_grads
        + max(head.loss_grads, head.logits_grad - head.saved_log_softmax),
        # the top block's backward, with every block's activations still there; the targets are still alive
        "backward: blocks": always + 8 * tokens + loss + scalar_grads + kept_copies + block_rows + block_backward,
        # AdamW's step: every gradient, clipping's norms (and, in the first step, the state AdamW makes)
        "optimizer": always + 8 * tokens + loss + static["gradients"] + clip_norms,
    }
    return MemoryBreakdown(
        weights=weights,
        gradients=static["gradients"],
        optimizer=static["optimizer"],
        activations=activations,
        logits=max(head.logits_held + head.logits_upcast, head.loss_grads) + loss,
        # without unpacking: the final norm's five (N, C), or G and the product's three (N, H)
        activation_grads=scalar_grads + max(20 * C * tokens, w.residual * C * tokens + 3 * w.compute * H * tokens),
        weight_copies=adapter_copies + max(embedding_copy, unpacked),
        optimizer_step=clip_norms,
        moments=moments,
    )
