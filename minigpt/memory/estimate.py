"""Predict the memory of one training step from the config alone: no tensor is made.

estimate() puts the terms together: the static state (static_state.py), the activations (activations.py),
and the short-lived buffers of each phase of the step, then the moments where memory peaks. It follows what
THIS model's ops save and when the step's buffers live; measure.py meters the same step for real.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from minigpt.config import check_lora_step, check_optimizer
from minigpt.loss import check_loss_chunks
from minigpt.memory.activations import activation_table, block_activation_bytes, selective_rows
from minigpt.memory.adapter_step import lora_estimate
from minigpt.memory.breakdown import MemoryBreakdown, Widths, device_type, widths
from minigpt.memory.loss_head import HeadMoments, head_moments, loss_head_bytes, tied_sum_bytes
from minigpt.memory.offloaded import head_reloads, region_reload
from minigpt.memory.optimizer_state import (
    adamw8bit_state_bytes,
    in_backward_gradient_bytes,
    in_backward_step_bytes,
    optimizer_step_bytes,
)
from minigpt.memory.static_state import (
    fsdp_shard_params,
    master_conversion_bytes,
    matrix_params,
    sharded_state_bytes,
    static_bytes,
)
from minigpt.model import ModelConfig, count_params
from minigpt.optim import FUSED_ADAMW_DEVICES
from minigpt.parallel import check_shard_mode, fsdp_dtypes
from minigpt.precision import normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments

# ----------------------------------------------------------------------------------------------------------
# Transient memory, and the moments of a step where memory peaks
#
# Sizes below: N = batch x ctx tokens, C = n_embd, H = mlp_hidden, V = vocab_size, L = n_layer.


# cuBLAS takes a workspace through PyTorch's allocator for each thread that runs matmuls: the training
# loop's thread and autograd's backward thread. Measured on an H100 (torch 2.11): 32 MiB each, which is
# PyTorch's default on Hopper; older GPUs default to 8.125 MiB each, so this errs on the safe side there.
# CUBLAS_WORKSPACE_CONFIG changes it.
CUDA_LIBRARY_WORKSPACE = 2 * 32 * 2**20


def _regions(cfg: ModelConfig, mode: str) -> list[int]:
    """Blocks per checkpointed region, in forward order (one region per block without checkpointing)."""
    return [len(s) for s in sqrt_segments(cfg.n_layer)] if mode == "sqrt" else [1] * cfg.n_layer


def _param_tensors(cfg: ModelConfig) -> int:
    """How many parameter tensors the model has: the embedding and the final norm, and 7 in each block."""
    return 2 + 7 * cfg.n_layer


def _block_params(cfg: ModelConfig) -> int:
    """Parameters of one block: its four attention and three MLP matrices, and its two norm gains."""
    return _block_matrix_params(cfg) + 2 * cfg.n_embd


def _block_matrix_params(cfg: ModelConfig) -> int:
    return 4 * cfg.n_embd**2 + 3 * cfg.n_embd * cfg.mlp_hidden


def _block_backward(cfg: ModelConfig, tokens: int, w: Widths) -> int:
    """Working memory of one block's backward, at its MLP: the residual stream's gradient + the worse of 2 moments.

    The block's own RMSNorms run backward later, once the MLP's activations are freed: never its worst moment.
    """
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    residual_grad = w.residual * C * tokens
    mlp = residual_grad + 3 * a * H * tokens  # gradients of down's input, of SiLU(gate) and of up, all at once
    gate_up_weight_grad_16bit = 2 * C * H if w.autocast else 0  # gate's/up's weight gradient before its fp32 cast
    mlp_weights = residual_grad + (2 * a * H + a * C) * tokens + gate_up_weight_grad_16bit
    return max(mlp, mlp_weights)


def _final_norm_backward(cfg: ModelConfig, tokens: int, w: Widths) -> int:
    """Working memory of the final RMSNorm's backward, before any block's: the residual stream's gradient and
    five fp32 temporaries of (N, C)."""
    return w.residual * cfg.n_embd * tokens + 5 * 4 * cfg.n_embd * tokens


def _recomputed(cfg: ModelConfig, batch: int, ctx: int, w: Widths, mode: str, device: str) -> list[int]:
    """Bytes checkpointing recomputes in backward, region by region (all 0 without checkpointing).

    A region is recomputed at once: its blocks' activations, minus what the forward kept (its input, and
    selective's matmul outputs) and minus SiLU(gate) * up, which down's backward frees before the peak.
    """
    regions = _regions(cfg, mode)
    if mode == "none":
        return [0] * len(regions)
    tokens, C, H = batch * ctx, cfg.n_embd, cfg.mlp_hidden
    down_input = w.compute * H * tokens
    if mode == "selective":
        kept = sum(p * tokens + f for _, p, f in selective_rows(cfg, ctx, w, device))
    else:  # the norm's fp32 input is the kept block input itself, except in bf16-pure (an fp32 copy)
        kept = 0 if w.residual == 2 else 4 * C * tokens
    block_activations = block_activation_bytes(cfg, batch, ctx, w, device)
    return [blocks * block_activations - kept - down_input for blocks in regions]


@dataclass(frozen=True)
class _Transients:
    """The short-lived buffers of one step, in bytes, each named for what it holds."""

    logits_held: int  # what the loop holds of the logits through backward: none (step.forward_backward drops them)
    logits_upcast: int  # autocast: cross-entropy's fp32 copy of the 16-bit logits, in the forward
    logits_returned: int  # the model's logits, alive as its forward returns, until the loop drops them
    saved_log_softmax: int  # cross-entropy's fp32 log-softmax, an activation freed once its backward is done
    loss_grads: int  # cross-entropy's backward: nll_loss's and log_softmax's fp32 (N, V) gradients, at once
    logits_grad: int  # then the gradient of the logits themselves, in the compute dtype
    tied_embedding_grad: int  # ONE (V, C) gradient of the tied embedding, in the model's dtype
    tied_sum: int  # the sum of its two gradients as a new (V, C) tensor, or 0 where autograd adds in place
    lm_head_grad_16bit: int  # autocast: lm_head's matmul makes its (V, C) gradient in 16 bits first
    recomputed: list[int]  # per checkpointed region: what backward recomputes (see _recomputed)
    block_backward: int  # working memory of one block's backward (see _block_backward)
    final_norm_backward: int  # working memory of the final norm's backward, first in the blocks' phase
    grad_into_embedding: int  # the (N, C) gradient reaching the embedding, alive during its backward
    weight_copies: int  # autocast: 16-bit copies of every weight matrix, all alive in its cache in the forward
    optimizer_step: int  # clip_grad_norm_'s norms, AdamW's temporaries, fp16's found-inf flag
    head: HeadMoments  # the loss head's worst moments, plain or chunked (loss_head.head_moments)

    @property
    def logits(self) -> int:
        return self.head.logits

    @property
    def activation_grads(self) -> int:
        """The worst of four moments: lm_head's gradient, the final norm's backward, a (recomputed) block's
        backward, the embedding's.

        The tied embedding gets two (V, C) gradients: lm_head's, early in backward (it waits), and the
        embedding's, at the very end; autograd sums them into a third, the .grad.
        """
        lm_head = self.head.grads
        final_norm = self.tied_embedding_grad + self.final_norm_backward
        block = self.tied_embedding_grad + max(self.recomputed) + self.block_backward
        embedding = 2 * self.tied_embedding_grad + self.grad_into_embedding
        return max(lm_head, final_norm, block, embedding)


def _transients(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    mode: str,
    master_weights: bool,
    device: str,
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    loss_chunks: int = 1,
) -> _Transients:
    w, tokens, V, C = widths(precision), batch * ctx, cfg.vocab_size, cfg.n_embd
    # AdamW's state has the trained parameters' dtype. Its temporaries: none with the fused kernel (CPU and CUDA,
    # torch >= 2.4); with foreach, its fallback elsewhere, one per parameter of the decay group (sqrt(exp_avg_sq))
    adam_state_bytes = 4 if (master_weights or precision != "bf16-pure") else 2
    adam_temporaries = 0 if device in FUSED_ADAMW_DEVICES else matrix_params(cfg)
    # clip_grad_norm_ (foreach): a norm per gradient tensor, their stack and the total, in the gradients' dtype
    clip_norms = (2 * _param_tensors(cfg) + 1) * adam_state_bytes
    found_inf = 4 if precision == "fp16" else 0  # GradScaler's flag, which the fused step reads
    step_bytes = adam_state_bytes * adam_temporaries + clip_norms
    if optimizer != "adamw" or optimizer_in_backward:  # AdamW8bit's fp32 chunks; one tensor at a time in backward
        step_bytes = optimizer_step_bytes(cfg, optimizer, optimizer_in_backward, device, adam_state_bytes, clip_norms)
    head = loss_head_bytes(cfg, tokens, w, loss_chunks)
    return _Transients(
        logits_held=0,  # the loop keeps only the loss; the head's own moments are in `head`
        logits_upcast=head.logits_upcast,
        logits_returned=head.logits_held,  # (none with the chunked loss: they never exist whole)
        saved_log_softmax=head.saved_log_softmax,
        loss_grads=head.loss_grads,
        logits_grad=head.logits_grad,
        tied_embedding_grad=w.model * V * C,
        tied_sum=tied_sum_bytes(cfg, w, loss_chunks),
        lm_head_grad_16bit=2 * V * C if w.autocast else 0,
        recomputed=_recomputed(cfg, batch, ctx, w, mode, device),
        block_backward=_block_backward(cfg, tokens, w),
        final_norm_backward=_final_norm_backward(cfg, tokens, w),
        grad_into_embedding=w.residual * C * tokens,
        weight_copies=2 * matrix_params(cfg) if w.autocast else 0,
        optimizer_step=step_bytes + found_inf,
        head=head_moments(cfg, tokens, w, loss_chunks, w.model * V * C, 2 * V * C if w.autocast else 0),
    )


def _always_alive(
    cfg: ModelConfig, w: Widths, device: str, weights: int, optimizer: int, counters_on_device: bool = True
) -> int:
    """Bytes there through the whole step: weights, AdamW's state (from the second step on), the RoPE
    tables (buffers), AdamW's step counters (a 4-byte tensor per parameter tensor, 2 outside the blocks and
    7 in each, on the device for the fused kernel; AdamW8bit's are Python ints) and, on CUDA, cuBLAS's workspaces.
    """
    rope_tables = 2 * cfg.ctx * (cfg.head_dim // 2) * w.model  # cos and sin
    step_counters = 4 * _param_tensors(cfg) if device in FUSED_ADAMW_DEVICES and counters_on_device else 0
    return weights + optimizer + rope_tables + step_counters + (CUDA_LIBRARY_WORKSPACE if device == "cuda" else 0)


def _backward_through_blocks(
    cfg: ModelConfig, w: Widths, mode: str, t: _Transients, kept_per_region: int, in_backward_step: int | None = None
) -> int:
    """The worst moment of backward through the blocks: the final norm's, then one region at a time from the top.

    At region i: the regions below it (it included) still hold their activations, the gradients of the
    blocks above exist, and this region is recomputed. Autocast's weight copies: without checkpointing,
    the graph keeps those of the regions not yet done; with it, the recomputed region makes its own again.
    With the step in backward (`in_backward_step`: what a block tensor's hook holds) no gradient above is
    kept; a hook runs between the block's ops, with the residual stream's gradient in flight.
    """
    regions = _regions(cfg, mode)
    copies_per_block = 2 * _block_matrix_params(cfg) if w.autocast else 0
    # first the final norm's backward: every region's activations, no block's gradient or recomputation yet
    worst = (
        len(regions) * kept_per_region
        + t.final_norm_backward
        + (copies_per_block * cfg.n_layer if mode == "none" else 0)
    )
    for i, blocks in enumerate(regions):
        activations_left = (i + 1) * kept_per_region
        grads_above = w.model * (_block_params(cfg) * sum(regions[i + 1 :]) + cfg.n_embd)  # + final norm's gain
        copies = copies_per_block * (sum(regions[: i + 1]) if mode == "none" else blocks)
        if in_backward_step is not None:  # a hook runs between the block's ops, beside the residual's gradient
            residual_grad = t.grad_into_embedding  # (N, C) in the residual stream's dtype, as at the embedding
            hook = activations_left + t.recomputed[i] + copies + residual_grad + in_backward_step
            worst, grads_above = max(worst, hook), 0
        worst = max(worst, activations_left + grads_above + t.recomputed[i] + t.block_backward + copies)
    return worst


def _moments(
    cfg: ModelConfig,
    tokens: int,
    w: Widths,
    mode: str,
    t: _Transients,
    rows: list[dict],
    always: int,
    gradients: int,
    in_backward: tuple[int, int] | None = None,
) -> dict[str, int]:
    """Live bytes at the worst point of each phase of the step (the phases measure() marks).

    `in_backward`: with the step in backward, what a hook holds while it steps a block's tensor and the
    embedding (optimizer_state.in_backward_step_bytes).
    """
    activations = sum(r["bytes"] for r in rows)
    outside = [r for r in rows if r["part"] == "outside the blocks"]
    kept_per_region = (activations - sum(r["bytes"] for r in outside)) // len(_regions(cfg, mode))
    # what the embedding's backward needs (the token ids, its dropout mask) stays until the very end
    embedding_saved = sum(r["bytes"] for r in outside if r["tensor"].startswith(("token ids", "embedding dropout")))
    # autocast's weight copies the graph keeps after the forward: the blocks' without checkpointing (lm_head's:
    # in the loss head's moments)
    block_copies = 2 * cfg.n_layer * _block_matrix_params(cfg) if (w.autocast and mode == "none") else 0
    model_grads = w.model * count_params(cfg)  # every gradient as backward makes it, in the model's dtype
    # at the embedding: its own gradient being made beside the (N, C) gradient reaching it, or then their sum
    # (a new tensor, made once the (N, C) one is gone), where the sum is not made in place
    embedding_in_flight = max(t.tied_sum, t.grad_into_embedding)
    head_phase = max(block_copies + t.head.backward, t.weight_copies + t.logits_returned)
    moments = {
        # at the loss: every activation, all weight copies (autocast's cache), the logits and their fp32 upcast
        "forward": always + activations + t.weight_copies + t.head.forward,
        # cross-entropy's two (N, V) gradients, then lm_head's (loss_head.py); or as the forward returns, autocast's
        # cache still holding every weight copy and the logits not yet dropped (the worst, with checkpointing)
        "backward: loss head": always + activations + head_phase,
        # lm_head's gradient of the tied embedding waits for the embedding's
        "backward: blocks": always
        + t.logits_held
        + t.tied_embedding_grad
        + embedding_saved
        + _backward_through_blocks(cfg, w, mode, t, kept_per_region, in_backward[0] if in_backward else None),
        # the embedding's gradient and lm_head's (one of them, or their sum, is the .grad counted in model_grads)
        "backward: embedding": always + model_grads + t.tied_embedding_grad + embedding_in_flight + t.logits_held,
        "optimizer": always + gradients + t.optimizer_step,
    }
    if in_backward:  # the step in backward: each gradient is gone once its parameter is stepped
        # the embedding's two gradients and their sum (its .grad, the only gradient left); then its hook's step
        summed = always + 2 * t.tied_embedding_grad + embedding_in_flight + t.logits_held
        moments["backward: embedding"] = max(summed, always + t.logits_held + in_backward[1])
        moments["optimizer"] = always  # nothing left to step: the schedule moves, the grad norm is read
    return moments


def _predict(
    cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str,
    mode: str,
    master_weights: bool,
    device: str,
    static: tuple[int, int, int],
    rows: list[dict],
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    loss_chunks: int = 1,
    offload_activations: bool = False,
) -> dict:
    """The transient fields and the moments of MemoryBreakdown, in bytes, from the config.

    With offload_activations, the moments hold the rows left on the device plus what is read back
    (offloaded.py): the loss head's, at its forward and backward, and one region's, in the blocks' backward.
    """
    w, (weights, gradients, optimizer_bytes) = widths(precision), static
    levers = dict(optimizer=optimizer, optimizer_in_backward=optimizer_in_backward)
    t = _transients(cfg, batch, ctx, precision, mode, master_weights, device, **levers, loss_chunks=loss_chunks)
    always = _always_alive(cfg, w, device, weights, optimizer_bytes, counters_on_device=optimizer == "adamw")
    in_backward = None
    if optimizer_in_backward:
        hook = functools.partial(in_backward_step_bytes, cfg, optimizer, device, w.model, master_weights)
        in_backward = (hook(embedding=False), hook(embedding=True))
    on_device = [r for r in rows if not r["offloaded"]]
    moments = _moments(cfg, batch * ctx, w, mode, t, on_device, always, gradients, in_backward)
    if master_weights and not optimizer_in_backward:  # the 16-bit gradients become fp32 ones, one by one
        moments["optimizer"] = max(moments["optimizer"], always + master_conversion_bytes(cfg, w.model))
    if offload_activations:
        reloaded = {"forward": head_reloads(rows), "backward: loss head": head_reloads(rows)}
        reloaded["backward: blocks"] = region_reload(rows)
        moments = {phase: live + reloaded.get(phase, 0) for phase, live in moments.items()}
    return {
        "logits": t.logits,
        "activation_grads": t.activation_grads,
        "weight_copies": t.weight_copies,
        "optimizer_step": t.optimizer_step,
        "moments": moments,
    }


# ----------------------------------------------------------------------------------------------------------
# estimate()


def estimate(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cuda",
    *,
    optimizer: str = "adamw",
    optimizer_in_backward: bool = False,
    loss_chunks: int = 1,
    offload_activations: bool = False,
    lora_rank: int | None = None,
    lora_targets: str = "attn",
    base_dtype: str = "fp32",
    quant_block: int = 64,
    train_norms: bool = False,
    train_embedding: bool = False,
) -> MemoryBreakdown:
    """Predicted memory of one training step, from the config alone (no tensor is made).

    `device` picks the kernels' rules: "cuda" (fused dropout and attention) or any other
    type (CPU rules). They differ only with dropout > 0 and in AdamW's temporaries.
    `optimizer` "adamw8bit": 8-bit moments (optimizer_state.py); `optimizer_in_backward`: the gradients
    term is the largest single gradient, the only one alive at a time.
    `loss_chunks`: the loss head in chunks (loss_head.py); `offload_activations`: the saved tensors that
    leave the device are the `offloaded` term, not activations (offloaded.py).
    """
    precision = normalize_precision(precision)
    check_optimizer(optimizer, optimizer_in_backward, precision)
    if lora_rank:  # `lora_*`, base_dtype...: adapters on a frozen base, whose terms adapters.py predicts
        check_lora_step(precision, master_weights=master_weights)  # as training: bf16-pure, so --master-weights
        check_loss_chunks(loss_chunks, batch * ctx)
        lora = (lora_rank, lora_targets, base_dtype, quant_block, train_norms, train_embedding, CUDA_LIBRARY_WORKSPACE)
        levers = dict(optimizer=optimizer, optimizer_in_backward=optimizer_in_backward)
        levers["offload_activations"] = offload_activations
        return lora_estimate(model_cfg, batch, ctx, precision, checkpointing, device, *lora, loss_chunks, **levers)
    dev = device_type(device)
    static = static_bytes(model_cfg, precision, master_weights)
    check_loss_chunks(loss_chunks, batch * ctx)
    table_levers = dict(loss_chunks=loss_chunks, offload_activations=offload_activations)
    rows = activation_table(model_cfg, batch, ctx, precision, checkpointing, dev, **table_levers)
    weights, gradients, optimizer_bytes = static
    if optimizer == "adamw8bit":
        optimizer_bytes = adamw8bit_state_bytes(model_cfg)
    if optimizer_in_backward:
        gradients = in_backward_gradient_bytes(model_cfg, widths(precision).model, master_weights)
    levers = dict(optimizer=optimizer, optimizer_in_backward=optimizer_in_backward, **table_levers)
    static = (weights, gradients, optimizer_bytes)
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer_bytes,
        activations=sum(r["bytes"] for r in rows if not r["offloaded"]),
        offloaded=sum(r["bytes"] for r in rows if r["offloaded"]) if offload_activations else None,
        **_predict(model_cfg, batch, ctx, precision, checkpointing, master_weights, dev, static, rows, **levers),
    )


def sharded_estimate(
    est: MemoryBreakdown,
    model_cfg: ModelConfig,
    precision: str,
    shard: str,
    world: int,
    master_weights: bool = False,
    checkpointing: str | None = None,
) -> MemoryBreakdown:
    """One process's step with `shard` over `world` processes: estimate()'s breakdown with the static terms split.

    Weights and AdamW's state are there at every moment, so every moment loses what splitting them saves;
    zero1 keeps the gradients whole, so only the optimizer step loses its share of them. FSDP also changes
    the transient terms (_fsdp_moment says how, term by term). `checkpointing`: the mode `est` was made
    with, where it is known; None (unknown) takes off only what is certain whatever the mode (safe side).
    """
    if world == 1 or shard == "none":
        check_shard_mode(shard)
        return est
    per = sharded_state_bytes(model_cfg, precision, shard, world, master_weights)
    saved_always = (est.weights - per["weights"]) + (est.optimizer - per["optimizer"])
    saved_grads = est.gradients - per["gradients"]
    moments = {}
    for phase, live in est.moments.items():
        live -= saved_always
        if phase == "optimizer":
            live -= saved_grads
        elif shard == "fsdp":
            live += _fsdp_moment(phase, est, model_cfg, precision, world, checkpointing)
        moments[phase] = live
    # FSDP's bf16 gathers leave autocast nothing to copy (_fsdp_moment): that term is gone
    copies = 0 if shard == "fsdp" and _gathers_16bit(precision) else est.weight_copies
    return replace(est, **per, weight_copies=copies, moments=moments)


def _gathers_16bit(precision: str) -> bool:
    """Whether FSDP gathers the weights in 16 bits where estimate() counts them wider (bf16's policy)."""
    gather = fsdp_dtypes(precision)[0]
    return gather is not None and gather.itemsize < widths(precision).model


def _fsdp_moment(
    phase: str, est: MemoryBreakdown, cfg: ModelConfig, precision: str, world: int, mode: str | None
) -> int:
    """What FSDP2 adds to (or takes off) one moment of estimate()'s single-process step, in bytes.

    g: bytes per value FSDP gathers the weights in; with bf16 its MixedPrecisionPolicy gathers in bf16 (2),
    otherwise the parameters' own dtype. r: bytes per value it reduce-scatters the gradients in (fp32: 4).
    m: the model's dtype, in which estimate() counted the weights, their gradients and autocast's copies.
    Left as estimate() counts them: the activations. The policy also casts each block's inputs to bf16
    (cast_forward_inputs), so the residual stream the blocks save is bf16 where estimate() counts fp32:
    a safe-side excess, 2 bytes per value of the residual rows (under 0.1 MiB on 10m at ctx 64).
    """
    w, V, C = widths(precision), cfg.vocab_size, cfg.n_embd
    gather, reduce = fsdp_dtypes(precision)
    g = gather.itemsize if gather is not None else w.model
    r = reduce.itemsize if reduce is not None else w.model
    m, root, block = w.model, V * C + C, _block_params(cfg)  # root: the (tied) embedding and the final norm
    # The weights FSDP holds gathered: the root's, whole from the first forward op to the end of backward,
    # and two blocks' (the one running and the next one, prefetched).
    gathered = g * (root + 2 * block)
    if phase == "backward: embedding":
        # estimate() counted every gradient whole (m x P) and the tied embedding's two (V, C) gradients (lm_head's
        # and the embedding's, m each). FSDP holds instead: every gradient's shard in the parameters' dtype m
        # (the root's too, once reduced), the root gathered (no block is: each was resharded after its
        # backward) and the root's whole gradients in the gathered dtype g: lm_head's, the embedding's and
        # their sum; or, once summed, the sum and the copy the reduce-scatter sends (r per value).
        # (where estimate() counted no new sum, it counted the (N, C) gradient reaching the embedding in that
        # place, left here: a safe-side excess of 4 x N x C bytes)
        grad_shards = m * max(fsdp_shard_params(cfg, world))
        root_grads = max(3 * g * V * C, g * V * C + r * V * C)
        counted = m * (count_params(cfg) + V * C) + tied_sum_bytes(cfg, w)
        return grad_shards + g * root + root_grads - counted
    if not _gathers_16bit(precision):
        return gathered
    # bf16 with the policy: autocast's weight copies, which estimate() counted, are never made (the gathered
    # weights are bf16 already), and the gradients of the gathered weights are made in bf16, not fp32.
    copies_per_block = 2 * _block_matrix_params(cfg)
    lm_head_copy = 2 * V * C
    if phase == "forward":  # every matrix's copy, alive in autocast's cache until the forward ends
        return gathered - est.weight_copies
    if phase == "backward: loss head":  # the graph kept lm_head's copy, and the blocks' without checkpointing
        return gathered - lm_head_copy - (cfg.n_layer * copies_per_block if mode == "none" else 0)
    # backward: blocks. estimate() counted, at its worst region i, the copies of the regions it keeps (all
    # those below without checkpointing, the recomputed region's with it) and the whole gradients of the
    # blocks above (m per value); FSDP keeps their fp32 shards, 1/world of them. The worst region is not known
    # here, so take off the least of the two over the regions (safe side). lm_head's gradient of the tied
    # embedding, waiting for the embedding's, is bf16 (m - g less per value). Added: a block's reduce-scatter,
    # its whole bf16 gradients beside their fp32 copy and the fp32 shard it makes (measured: without it the
    # moment falls ~7% short on 10m; in fp32 the gradients above, counted whole, more than cover it).
    above_shared = m * block * (world - 1) // world  # per block above: the whole gradient minus its shard
    over = min(
        copies_per_block * (sum(regions[: i + 1]) if c == "none" else blocks) + above_shared * sum(regions[i + 1 :])
        for c in ([mode] if mode else CHECKPOINTING_MODES)
        for regions in [_regions(cfg, c)]
        for i, blocks in enumerate(regions)
    )
    reduce_scatter = g * block + r * block + -(-r * block // world)
    return gathered - over - (m - g) * V * C + reduce_scatter
