"""The moments of a LoRA step: adapters.py's terms put together, phase by phase, in every checkpointing mode.

Without checkpointing, backward starts with every block's activations alive and works down from the top.
With it, each region (a block, or a sqrt segment) keeps only its input (selective: its matmuls' outputs) and
is run forward again when backward reaches it: its activations come back, one region at a time, and so does
the unpacking of its frozen weights. A quantized base is dequantized a third time per layer (forward,
recomputed forward, backward), never more than one layer at a time: the peak moves down to the recomputed
region, it does not grow.
"""

from __future__ import annotations

from minigpt.lora import parse_targets
from minigpt.memory.activations import mask_bytes, math_path_rows
from minigpt.memory.adapters import (
    _block_rows,
    _input_grads,
    linear_shapes,
    lora_activation_rows,
    lora_static,
    rope_cast_bytes,
    trained_numels,
    unpack_bytes,
)
from minigpt.memory.breakdown import MemoryBreakdown, Widths, check_mode, check_shape, device_type, widths
from minigpt.memory.loss_head import head_moments, loss_head_bytes, tied_sum_bytes
from minigpt.memory.offloaded import head_reloads, is_offloaded
from minigpt.memory.optimizer_state import hook_bytes, step_temporaries
from minigpt.model import ModelConfig
from minigpt.offload import OFFLOAD_MIN_BYTES
from minigpt.optim import FUSED_ADAMW_DEVICES
from minigpt.optim.adamw8bit import state_bytes
from minigpt.precision import normalize_precision
from minigpt.recompute import sqrt_segments

# torch.get_rng_state(): the CPU generator's state, 5,056 bytes, as the allocator counts it (rounded up)
CPU_RNG_STATE = 5072


def _block_backward(
    cfg: ModelConfig,
    tokens: int,
    w: Widths,
    device: str,
    base_dtype: str,
    quant_block: int,
    rank: int,
    targets: str,
    grads_kept: bool = True,
) -> int:
    """The top block's MLP backward, above its own activations: G, the residual stream's gradient, and the rest.

    Down's backward unpacks its weight beside G and makes the gradient of its input (N, H); the product's
    backward makes two more (N, H) before it frees anything. An adapter on down runs its backward first: its
    gradients (fp32) and the gradient of its input are made, and down's input and x @ A^T, which it kept, are freed.
    With dropout, its backward comes first: it makes down's output gradient, G times the mask, and frees the mask.
    With the step in backward (not `grads_kept`), the adapter's gradients are stepped and freed before that peak.
    """
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    residual_grad = w.residual * C * tokens
    # down's output gradient, held through down's backward: G cast to 16 bits (autocast), or G times the mask
    down_output_grad = a * C * tokens if (w.autocast or cfg.dropout > 0) else 0
    mask = mask_bytes(a, device) * C * tokens if cfg.dropout > 0 else 0  # (one of the rows, freed)
    peak, result = unpack_bytes((C, H), base_dtype, quant_block, a)
    down_input_grad = a * H * tokens
    adapter, kept_input = 0, 0
    if "down" in parse_targets(targets):  # + its fp32 gradients, - what it kept (and its 16-bit A and B)
        adapter = 4 * rank * (C + H) * grads_kept - a * rank * tokens - (2 * rank * (C + H) if w.autocast else 0)
        kept_input = down_input_grad  # its backward freed down's input: the product's backward comes later
    unpacking = down_output_grad + max(peak, result + down_input_grad)
    product = 3 * down_input_grad - kept_input
    return residual_grad - mask + adapter + max(unpacking, product)


def _head_backward(cfg: ModelConfig, tokens: int, w: Widths, train_embedding: bool, copy_moved: bool = False) -> int:
    """Plain cross-entropy's backward in a LoRA step, above the activations (the log-softmax among them).

    Its two fp32 (N, V) gradients come first, beside autocast's 16-bit copy of the tied weight. Then lm_head's
    matmul makes the gradient of its input and, when the embedding trains, of the weight (16 bits under autocast).
    Autocast frees the copy and the logits' gradient before it casts that 16-bit gradient to fp32.
    `copy_moved`: offloading moved the copy of a frozen embedding (no weight of its own): read back at the matmul.
    """
    head, V, C = loss_head_bytes(cfg, tokens, w), cfg.vocab_size, cfg.n_embd
    copy = 2 * V * C if w.autocast else 0
    input_grad = w.compute * C * tokens
    at_matmul = copy + head.logits_grad - head.saved_log_softmax + input_grad
    if copy_moved:
        copy = 0  # (until the matmul's backward reads it back)
    if train_embedding:
        at_matmul += w.compute * V * C
    at_cast = input_grad - head.saved_log_softmax + (2 + 4) * V * C if (train_embedding and w.autocast) else 0
    return max(copy + head.loss_grads, at_matmul, at_cast)


def _regions(cfg: ModelConfig, mode: str) -> list[range]:
    """The blocks of each region backward recomputes at once, in forward order (one block each without sqrt)."""
    return sqrt_segments(cfg.n_layer) if mode == "sqrt" else [range(i, i + 1) for i in range(cfg.n_layer)]


def _backward_through_blocks(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    w: Widths,
    mode: str,
    device: str,
    lora: dict,
    kept: int,
    top: int,
    unpack_peak: int,
) -> int:
    """The worst moment of backward through the blocks, above what stays through it (`top`: the top block's backward).

    At region i: the regions below it keep what the forward kept (`kept`: per region; without checkpointing,
    their activations), the region itself holds its activations as the forward without checkpointing made them
    (recomputed, or kept) and its input, the blocks above hold their trained tensors' gradients, and its top
    block runs backward. The final norm's backward comes first, with every region's kept tensors.
    With checkpointing, the recomputed forward is a moment of its own: see _recomputed_forward.
    Offloading (lora["offload"]): what the regions below kept is off the device (`kept` is what stays), and the
    region's own is read back: its input (exact), or without checkpointing all its block's rows (an upper bound).
    """
    rank, names, norms, emb = lora["rank"], parse_targets(lora["targets"]), lora["train_norms"], lora["train_embedding"]
    C, tokens, shapes, regions = cfg.n_embd, batch * ctx, linear_shapes(cfg), _regions(cfg, mode)

    def rows(block: int, on_device: bool = False) -> int:  # what the block keeps without checkpointing
        input_grad = emb or block > 0
        kept_rows = _block_rows(cfg, batch, ctx, w, rank, names, device, input_grad, norms)
        moved = [on_device and lora.get("offload") and is_offloaded(*r, tokens, mode, device) for r in kept_rows]
        return sum(p * tokens + f for (_, p, f), gone in zip(kept_rows, moved) if not gone)

    def copies(
        block: int,
    ) -> int:  # autocast's 16-bit A and B the block's graph keeps (no A where its input needs none)
        needs = _input_grads(names, emb or block > 0, norms)
        return 2 * rank * sum(shapes[n][0] + shapes[n][1] * g for n, g in needs.items()) if w.autocast else 0

    if mode == "none":
        below = [sum(rows(b, on_device=True) for b in range(r.start)) for r in regions]
    else:
        below = [i * kept for i in range(len(regions))]
    final_norm = 4 * C * tokens + 5 * 4 * C * tokens + (4 * C if norms else 0)
    everything = below[-1] + rows(cfg.n_layer - 1, True) if mode == "none" else len(regions) * kept
    worst = everything + final_norm + (sum(copies(b) for b in range(cfg.n_layer)) if mode == "none" else 0)
    trained_per_block = 4 * (sum(rank * sum(shapes[n]) for n in names) + (2 * C if norms else 0))
    for i, region in enumerate(regions):
        live = sum(rows(b) for b in region)
        if mode != "none" and not (emb or region.start > 0):  # its input, kept by checkpoint, is no norm's input
            live += w.residual * C * tokens
        if mode == "selective" and cfg.dropout == 0:  # (see the note above _recomputed_forward)
            live += w.compute * C * tokens
        held_copies = sum(copies(b) for b in (range(region.stop) if mode == "none" else region))
        above = trained_per_block * (cfg.n_layer - region.stop) + (4 * C if norms else 0)
        if lora.get("in_backward"):  # the step in backward: each gradient above was stepped and freed
            above = 0
        worst = max(worst, below[i] + live + held_copies + above + top)
        if mode != "none":
            region_top = region.stop - 1
            made_later = _recomputed_forward(cfg, tokens, w, device, lora, emb or region_top > 0, unpack_peak)
            if mode == "selective":  # down's matmul output, still in the cache when its weight is unpacked
                made_later += w.compute * C * tokens
            worst = max(worst, below[i] + live + held_copies + above + made_later)
            if cfg.dropout > 0 and device != "cuda" and w.autocast:  # the math path's own peak, recomputed
                lower = sum(rows(b) + copies(b) for b in region[:-1])  # the region's blocks below its top
                if len(region) > 1 and (emb or region.start > 0):  # the first one's norm input is `kept`
                    lower -= 4 * C * tokens
                attention = _recomputed_attention(cfg, batch, ctx, w, mode, lora, emb or region.stop > 1)
                worst = max(worst, below[i] + kept + lower + above + attention)
    return worst


def _recomputed_attention(
    cfg: ModelConfig, batch: int, ctx: int, w: Widths, mode: str, lora: dict, input_grad: bool
) -> int:
    """A region's top block recomputed up to the end of CPU attention's math path (16 bits, with dropout), above
    what the region keeps: the math path's worst moment, where its own temporaries are all alive at once.

    Waiting: G (fp32) and its 16-bit cast, made by the block's last ops' backward before the recomputation starts,
    and checkpoint's second copy of the generator's state. Recomputed so far: the norm's 1/rms and its fp32
    output, qkv's input cast to 16 bits and its adapter (with autocast's copies of its A and B), qkv's output,
    q and k after RoPE, the 16-bit cos and sin, and the math path's saved rows (math_path_rows). Inside the math
    path: the fp32 copies of q, k and v before scaling, the causal mask as fp32 (T x T), the probabilities cast
    back to 16 bits and the output, in 16 bits. Selective: what the recomputation took out of the region's cache
    and has used up is gone from `kept`: qkv's matmul outputs (its adapter's two too) and the q @ k^T scores.
    """
    rank, names, norms = lora["rank"], parse_targets(lora["targets"]), lora["train_norms"]
    if not (input_grad or norms or "qkv" in names):  # nothing before attention needs a gradient: no graph
        return 0
    C, T, nh, a, tokens = cfg.n_embd, ctx, cfg.n_head, w.compute, batch * ctx
    waiting = (w.residual + a) * C * tokens + CPU_RNG_STATE
    norm = (4 + 4 * C) * tokens
    qkv = 3 * a * C * tokens
    if "qkv" in names:
        out, inp = linear_shapes(cfg)["qkv"]
        # autocast's 16-bit A and B, both cached while the recomputed forward runs (the graph keeps A only where
        # qkv's input needs a gradient: _backward_through_blocks' copies)
        qkv += (a * C + a * rank) * tokens + 2 * rank * (out + inp)
    rope = 2 * a * C * tokens + rope_cast_bytes(cfg, ctx, w)
    saved = sum(p * tokens + f for _, p, f in math_path_rows(cfg, batch, ctx, w))
    inside = 12 * C * tokens + 4 * T * T + a * (nh * T + C) * tokens
    taken = 0
    if mode == "selective":
        taken = (3 * a * C + (3 * a * C + a * rank if "qkv" in names else 0) + 4 * nh * T) * tokens
    return waiting + norm + qkv + rope + saved + inside - taken


# Selective checkpointing recomputes a region from its cache of matmul outputs, each taken out of the cache as the
# recomputed forward reaches its matmul. The recomputation stops once the last tensor backward needs is made: after
# down's adapter scales x @ A^T (saved by B's matmul), or after the product when down has no adapter. Without
# dropout, one matmul output past that point is never taken out (B's, or down's own): a (N, C) that stays cached
# through the region's backward. With dropout, the MLP's mask is saved last and every matmul output is taken.


def _recomputed_forward(
    cfg: ModelConfig, tokens: int, w: Widths, device: str, lora: dict, input_grad: bool, unpack_peak: int
) -> int:
    """The recomputed forward at its worst, beside the region's activations and copies: its top block unpacks down.

    checkpoint saves the CPU generator's state once more while it recomputes (to put it back after), and the
    gradient of the region's output (G, fp32) waits. What the forward holds that backward does not keep is alive
    too: the residual stream after attention (when no norm keeps it) and down's input (when no adapter keeps it).
    What down's matmul has not made yet is not: its adapter's x @ A^T, its dropout mask, autocast's copies of
    its A and B. Counted as a difference from the block's rows, `live`, so that it reads next to _block_rows.
    """
    rank, names, norms = lora["rank"], parse_targets(lora["targets"]), lora["train_norms"]
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    needs = _input_grads(names, input_grad, norms)
    attention = input_grad or norms or "qkv" in names
    not_kept = (0 if (attention or "proj" in names) else w.residual * C) + (0 if "down" in names else a * H)
    not_yet = (a * rank if "down" in names else 0) + (mask_bytes(a, device) * C if cfg.dropout > 0 else 0)
    later_copies = 2 * rank * (C + H * needs["down"]) if (w.autocast and "down" in names) else 0
    rng = CPU_RNG_STATE if device == "cpu" else 0
    return w.residual * C * tokens + rng + unpack_peak + (not_kept - not_yet) * tokens - later_copies


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
    loss_chunks: int = 1,
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    offload_activations: bool = False,
) -> MemoryBreakdown:
    """Predicted memory of one LoRA training step, from the config alone (see adapters.py and this module).

    Verified against the meter (tests/test_lora.py): static terms and activations to the byte, moments within 1%,
    for fp32, bf16 and fp16 autocast, every base dtype, target, checkpointing mode, dropout, trained norms and
    embedding, and the chunked loss. `library_workspace`: what CUDA's libraries hold (estimate.py's).
    `optimizer` "adamw8bit" and `optimizer_in_backward`: optimizer_state.py's terms, over the trained tensors only.
    `offload_activations`: the rows (and a frozen embedding's 16-bit copy) that leave the device are the `offloaded`
    term; the moments hold what stays plus what backward reads back (an upper bound in "backward: blocks" without
    checkpointing: the whole block's rows, where autograd reads them node by node). Verified: peak within 1%.
    """
    check_shape(cfg, batch, ctx)
    precision, dev, mode = normalize_precision(precision), device_type(device), check_mode(checkpointing)
    w, tokens, V, C, H = widths(precision), batch * ctx, cfg.vocab_size, cfg.n_embd, cfg.mlp_hidden
    static = lora_static(cfg, rank, targets, base_dtype, quant_block, train_norms, train_embedding)
    numels = trained_numels(cfg, rank, targets, train_norms, train_embedding)
    every_numel = [n for part in numels.values() for n in part]
    if optimizer == "adamw8bit":  # its 8-bit moments (fp32 ones for a tensor under 4096 values)
        static["optimizer"] = sum(state_bytes(n) for n in every_numel)
    weights = static["base weights"] + static["adapter weights"] + static["embedding and norms"]
    trained = dict(train_norms=train_norms, train_embedding=train_embedding)
    rows = lora_activation_rows(cfg, batch, ctx, w, rank, targets, mode, dev, **trained, loss_chunks=loss_chunks)
    for r in rows:  # --offload-activations: the rows minigpt.offload moves off the device (offloaded.py's rules)
        where = (r["tensor"], r["per_token"], r["fixed"], tokens, mode, dev)
        r["offloaded"] = offload_activations and is_offloaded(*where)
    # what the moments below count is computed without offloading, then the rows that leave are taken off
    activations = sum(r["bytes"] for r in rows)
    block_rows = sum(r["bytes"] for r in rows if r["part"] != "outside the blocks")
    # Always there: weights, AdamW's state (made by the first step), the RoPE tables, a 4-byte step counter per
    # trained tensor (fused AdamW), the batch's token ids (a frozen embedding does not keep them: they count
    # here, not as an activation) and, on CUDA, cuBLAS's workspaces.
    rope = 2 * cfg.ctx * (cfg.head_dim // 2) * w.model
    counters = 4 * static["trained tensors"] if (dev in FUSED_ADAMW_DEVICES and optimizer == "adamw") else 0
    always = weights + static["optimizer"] + rope + counters + (0 if train_embedding else 8 * tokens)
    if dev == "cuda":
        always += library_workspace
    # Autocast: 16-bit copies of the adapters (cached in the forward, then saved by their matmuls without
    # checkpointing) and of the tied embedding (cast for lm_head every step, and saved for its backward).
    adapter_copies = static["adapter weights"] // 2 if w.autocast else 0
    # in the first block, an adapter whose input needs no gradient does not keep A's copy
    first_inputs = _input_grads(parse_targets(targets), train_embedding, train_norms)
    shapes = linear_shapes(cfg)
    kept_copies = adapter_copies - w.autocast * 2 * rank * sum(shapes[n][1] for n, g in first_inputs.items() if not g)
    if mode != "none":  # checkpointed blocks save nothing in the forward: the copies go with autocast's cache
        kept_copies = 0
    embedding_copy = 2 * V * C if w.autocast else 0
    # A frozen embedding's 16-bit copy has no trained leaf under it: offloading moves it as an activation (lm_head's
    # matmul saves it for its input's gradient), so it leaves the device once lm_head's forward is done
    copy_moved = (
        offload_activations and embedding_copy >= OFFLOAD_MIN_BYTES and not train_embedding and loss_chunks == 1
    )
    unpacked = max(unpack_bytes(s, base_dtype, quant_block, w.compute)[0] for s in shapes.values())
    loss = 4  # the loss itself, one fp32
    scalar_grads = 8  # its gradient, and the gradient of the loss scaled for the window
    if precision == "fp16":  # the GradScaler's scale, the scaled loss and its gradient; its found-inf flag
        scalar_grads, found_inf = scalar_grads + 12, 4
    else:
        found_inf = 0
    # a trained embedding: lm_head's gradient of it (fp32) waits from the loss head to the embedding's backward
    tied_grad = 4 * V * C if train_embedding else 0
    lm_head_16bit = 2 * V * C if (train_embedding and w.autocast) else 0
    moments_head = head_moments(cfg, tokens, w, loss_chunks, tied_grad, lm_head_16bit)
    top = _block_backward(cfg, tokens, w, dev, base_dtype, quant_block, rank, targets, not optimizer_in_backward)
    lora = dict(rank=rank, targets=targets, **trained, in_backward=optimizer_in_backward, offload=offload_activations)
    moved = [r for r in rows if r["offloaded"]]
    moved_blocks = sum(r["bytes"] for r in moved if r["part"] != "outside the blocks")
    kept = (block_rows - moved_blocks) // len(_regions(cfg, mode))  # per region on the device, with checkpointing
    # checkpoint keeps the CPU generator's state per region (to replay dropout); once more while it recomputes
    # one (_recomputed_forward), where the top block unpacks down's weight as the forward did
    rng = CPU_RNG_STATE * len(_regions(cfg, mode)) if (mode != "none" and dev == "cpu") else 0
    down_unpack = unpack_bytes((C, H), base_dtype, quant_block, w.compute)[0]
    blocks_moment = _backward_through_blocks(cfg, batch, ctx, w, mode, dev, lora, kept, top, down_unpack)
    offloaded = sum(r["bytes"] for r in moved)
    # on the device: every row but these; backward reads back one region's (_backward_through_blocks: exact for
    # full and sqrt, an upper bound without checkpointing), and the loss head's at its forward and backward
    activations, block_rows = activations - offloaded, block_rows - moved_blocks
    offloaded += embedding_copy if copy_moved else 0
    # A trained embedding keeps the token ids (the batch's own tensor: counted as an activation, not in `always`)
    # and, with dropout, its mask, until its backward: through the blocks' backward, and the ids after it
    ids = 8 * tokens if train_embedding else 0
    embedding_kept = ids + (mask_bytes(w.residual, dev) * C * tokens if (train_embedding and cfg.dropout > 0) else 0)
    embedding_kept -= sum(r["bytes"] for r in moved if r["tensor"].startswith("embedding dropout"))
    through_blocks = rng + embedding_kept
    head_back = head_reloads(rows)  # (0 without offloading)
    # clip_grad_norm_: a norm per gradient, their stack and the total; fp16: the GradScaler's found-inf flag
    clip_norms = (2 * static["trained tensors"] + 1) * 4 + found_inf
    if optimizer != "adamw" or optimizer_in_backward:  # AdamW8bit's fp32 chunks; the step in backward does not clip
        clip_norms = step_temporaries(every_numel, optimizer, optimizer_in_backward, dev, 4, clip_norms) + found_inf
    at_loss = always + rng + activations + head_back + adapter_copies + moments_head.forward + loss
    at_loss += 0 if copy_moved else embedding_copy
    moments = {
        # at the loss (every activation, the logits and their fp32 upcast), or at the widest frozen layer's unpacking
        "forward": max(at_loss, always + rng + block_rows + adapter_copies + unpacked),
        # cross-entropy's two (N, V) gradients; the loss normalizer and the logits (dropped by the step) are gone
        "backward: loss head": always
        + rng
        + activations
        + head_back
        - (4 if loss_chunks == 1 else 0)
        + kept_copies
        + loss
        + scalar_grads
        + (moments_head.backward if loss_chunks > 1 else _head_backward(cfg, tokens, w, train_embedding, copy_moved)),
        # the blocks' backward; the targets are still alive
        "backward: blocks": always + 8 * tokens + loss + scalar_grads + tied_grad + through_blocks + blocks_moment,
        # AdamW's step: every gradient, clipping's norms (and, in the first step, the state AdamW makes)
        "optimizer": always + 8 * tokens + ids + loss + static["gradients"] + clip_norms,
    }
    # the step in backward: each gradient is stepped and freed as soon as it is complete, so at most the largest
    # one is alive at once (optimizer_state.in_backward_gradient_bytes), and nothing is left for the optimizer
    gradients = 4 * max(every_numel) if optimizer_in_backward else static["gradients"]
    if optimizer_in_backward:
        moments["optimizer"] = always + 8 * tokens + ids + loss + clip_norms
    if train_embedding:  # its gradient and lm_head's, then their sum (a new tensor where not made in place)
        in_flight = max(tied_sum_bytes(cfg, w, loss_chunks), w.residual * C * tokens)
        # in backward: the blocks' gradients were stepped and freed; the embedding's own .grad is still to come
        grads = (4 * V * C if optimizer_in_backward else static["gradients"]) + tied_grad
        moments["backward: embedding"] = always + 8 * tokens + ids + loss + grads + in_flight
        if optimizer_in_backward:  # then its hook: the summed gradient and AdamW's temporaries
            hook = hook_bytes(numels["embedding"], optimizer, dev, 4)
            stepping = always + 8 * tokens + ids + loss + hook
            moments["backward: embedding"] = max(moments["backward: embedding"], stepping)
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer=static["optimizer"],
        activations=activations,
        offloaded=offloaded if offload_activations else None,
        logits=moments_head.logits + loss,
        # without unpacking: the final norm's five (N, C), or G and the product's three (N, H)
        activation_grads=scalar_grads + max(20 * C * tokens, w.residual * C * tokens + 3 * w.compute * H * tokens),
        weight_copies=adapter_copies + max(embedding_copy, unpacked),
        optimizer_step=clip_norms,
        moments=moments,
    )
