"""Predict the memory of one training step from the config alone: no tensor is made.

estimate() derives every term of MemoryBreakdown from the model's shape, following what THIS model's ops
save (activation_table(): one row per saved tensor) and when the step's buffers live (the moments).

What one block saves per token without checkpointing (C = n_embd, H = mlp_hidden = 8/3 C rounded up to
a multiple of 64, h = n_head; dropout off):
    fp32         52 C + 16 H + 8 + 4h bytes
    bf16, fp16   36 C +  8 H + 8 + 4h  (autocast: the residual stream and the norms stay fp32)
    bf16-pure    30 C +  8 H + 8 + 4h  (the norms still keep an fp32 copy of their input)
Outside the blocks, per token: the token ids and targets (8 + 8), the final norm (4 + 4C + rC), lm_head's
input (aC) and the fp32 log-softmax over the vocabulary (4V); a = 4 in fp32 and 2 otherwise, r = 2 in
bf16-pure and 4 otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

import torch

from minigpt.distributed import check_shard_mode
from minigpt.model import ModelConfig, count_params
from minigpt.precision import autocast_dtype, normalize_precision, static_bytes_per_param
from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments
from minigpt.train import FUSED_ADAMW_DEVICES

# ----------------------------------------------------------------------------------------------------------
# 1. The breakdown


@dataclass
class MemoryBreakdown:
    """Bytes of one training step, by kind. The same fields come from estimate() and from measure()."""

    weights: int  # model parameters (+ the fp32 master copy with master_weights)
    gradients: int  # .grad of the trained parameters
    optimizer: int  # AdamW exp_avg + exp_avg_sq (the 4-byte step counters, one per tensor, left out)
    activations: int  # tensors kept for backward at the end of the forward (parameters excluded)
    logits: int  # transient: logits, their fp32 upcast, and their fp32 gradients at the start of backward
    activation_grads: int  # transient: gradients in flight in backward, recomputed blocks, forward scratch
    weight_copies: int = 0  # transient: autocast's bf16/fp16 copies of the fp32 weight matrices
    optimizer_step: int = 0  # transient: gradient clipping's norms and AdamW's temporaries in optimizer_step
    moments: dict[str, int] = field(default_factory=dict)  # phase of the step -> live bytes at its worst
    device_peak: int | None = None  # measure() only: the real peak of the step (see measure)
    saved_by_hooks: int | None = None  # measure() only: what saved_tensors_hooks alone counted

    @property
    def static(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def upper_bound(self) -> int:
        """static + every per-step term as if all were live at once: safe, but they never all are."""
        step = self.activations + self.weight_copies + self.logits + self.activation_grads
        return self.static + max(step, self.optimizer_step)

    @property
    def peak(self) -> int:
        """The peak of the step: device_peak when measured, else the largest of the predicted moments.

        The terms peak at different moments (activations at the end of the forward, gradients at the end
        of the backward), so the peak is the worst moment, not their sum (see `moments`).
        """
        if self.device_peak is not None:
            return self.device_peak
        return max(self.moments.values()) if self.moments else self.upper_bound

    def rows(self) -> list[tuple[str, int]]:
        """(name, bytes) rows for tabulate: the terms, static, each moment of the step, and the peak."""
        terms = [
            (f.name, getattr(self, f.name))
            for f in fields(self)
            if f.name != "moments" and getattr(self, f.name) is not None
        ]
        return [
            *terms,
            ("static", self.static),
            *((f"at {k}", v) for k, v in self.moments.items()),
            ("peak", self.peak),
        ]

    def to_dict(self) -> dict:
        """JSON-ready: every field in bytes, plus static and peak."""
        return {**asdict(self), "static": self.static, "peak": self.peak}


# ----------------------------------------------------------------------------------------------------------
# 2. Static memory: bytes per parameter


def static_table() -> list[dict]:
    """Bytes per parameter with AdamW, by training regime (from precision.BYTES_PER_PARAM).

    The last row is the "12 + 2 = 14" framing some courses use for mixed precision: fp32 master weights
    (4) + Adam moments (8) = 12, plus a bf16 compute copy (2) = 14. It forgets the gradients: +4 in
    fp32 (18, our bf16-pure + master row) or +2 in bf16 (16).
    """
    regimes = [
        ("fp32", "fp32", False, "fp32 weights, grads and moments"),
        ("bf16", "bf16", False, "autocast: fp32 weights; bf16 copies made per step (transient, not here)"),
        ("fp16", "fp16", False, "autocast + GradScaler: as bf16 (the scale is one number)"),
        ("bf16-pure", "bf16-pure", False, "everything bf16: small updates get lost"),
        ("bf16-pure + master", "bf16-pure", True, "bf16 weights + fp32 master copy, fp32 grads and moments"),
    ]
    rows = []
    for name, precision, master, note in regimes:
        b = static_bytes_per_param(precision, master_weights=master)
        rows.append({"regime": name, **b, "note": note})
    rows.append(
        {
            "regime": "'12 + 2 = 14' framing",
            "weights": 2,
            "master_weights": 4,
            "grads": 0,
            "optimizer": 8,
            "total": 14,
            "note": "forgets the gradients: +4 fp32 -> 18, or +2 bf16 -> 16",
        }
    )
    return rows


def _matrix_params(cfg: ModelConfig) -> int:
    """Parameters of the weight matrices (all but the RMSNorm gains): what autocast casts to 16 bits."""
    return cfg.vocab_size * cfg.n_embd + cfg.n_layer * (4 * cfg.n_embd**2 + 3 * cfg.n_embd * cfg.mlp_hidden)


def _static(cfg: ModelConfig, precision: str, master_weights: bool) -> tuple[int, int, int]:
    b, n = static_bytes_per_param(precision, master_weights), count_params(cfg)
    return n * (b["weights"] + b["master_weights"]), n * b["grads"], n * b["optimizer"]


# ----------------------------------------------------------------------------------------------------------
# 2b. Static memory per process when it is split: ZeRO-1 and FSDP (minigpt.distributed)


def parameter_shapes(cfg: ModelConfig) -> list[tuple[int, ...]]:
    """The shape of every parameter, in the order GPT.parameters() yields them (the tied embedding once).

    Read it next to model.GPT: the embedding, then per block the attention norm's gain, qkv, proj, the MLP
    norm's gain, gate, up, down (nn.Linear weights are (out, in)), then the final norm's gain.
    """
    C, H = cfg.n_embd, cfg.mlp_hidden
    block = [(C,), (3 * C, C), (C, C), (C,), (H, C), (H, C), (C, H)]
    return [(cfg.vocab_size, C), *block * cfg.n_layer, (C,)]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def zero1_partition(cfg: ModelConfig, world: int) -> list[int]:
    """Parameters whose AdamW state each process keeps under ZeRO-1, as ZeroRedundancyOptimizer assigns them.

    It hands out whole parameters, group by group (train.make_optimizer's decayed matrices, then the gains),
    largest first, each to the process holding the fewest parameters so far. One parameter larger than
    total/N (the tiny preset's embedding) leaves the split uneven: that process keeps more than 1/N.
    """
    shapes = parameter_shapes(cfg)
    groups = [[s for s in shapes if len(s) >= 2], [s for s in shapes if len(s) < 2]]
    held = [0] * world
    for group in groups:
        for n in sorted((_numel(s) for s in group), reverse=True):  # sorted() is stable, like torch's
            held[held.index(min(held))] += n
    return held


def fsdp_shard_params(cfg: ModelConfig, world: int) -> list[int]:
    """Parameters each process holds under FSDP2: every parameter cut along dim 0 into N chunks of ceil(d0/N) rows.

    The last chunks are shorter (or empty) when N does not divide d0. This counts what each process's DTensor
    holds (`.to_local()`); FSDP2 pads every shard's storage to ceil(d0/N) rows, so what a process allocates
    is process 0's count, the largest.
    """
    held = [0] * world
    for shape in parameter_shapes(cfg):
        rows, row_numel = shape[0], _numel(shape[1:])
        chunk = -(-rows // world)  # ceil
        for r in range(world):
            held[r] += max(0, min(chunk, rows - r * chunk)) * row_numel
    return held


def sharded_state_bytes(
    model_cfg: ModelConfig,
    precision: str,
    shard: str,
    world: int,
    master_weights: bool = False,
    rank: int | None = None,
) -> dict[str, int]:
    """Bytes of weights, gradients and optimizer state one process holds, with `shard` over `world` processes.

    Chapter 7's formulas, parameter by parameter: none keeps everything on every process (16P in fp32);
    zero1 divides the optimizer state by N (zero1_partition: whole parameters, so only about 1/N);
    fsdp divides weights, gradients and optimizer state by N (fsdp_shard_params). `rank` None: the process
    that holds the most. The 4-byte step counters are left out, as in MemoryBreakdown.
    """
    check_shard_mode(shard)
    if world < 1:
        raise ValueError(f"the number of processes (--world) must be at least 1, got {world}")
    if rank is not None and not 0 <= rank < world:
        raise ValueError(f"rank must be between 0 and world - 1 = {world - 1}, got {rank}")
    b, total = static_bytes_per_param(normalize_precision(precision), master_weights), count_params(model_cfg)
    everything = [total] * world
    optimizer_params = zero1_partition(model_cfg, world) if shard in ("zero1", "fsdp") else everything
    other_params = fsdp_shard_params(model_cfg, world) if shard == "fsdp" else everything
    if shard == "fsdp":
        optimizer_params = other_params  # FSDP's AdamW steps each process's slices
    per_rank = [
        {
            "weights": other_params[r] * (b["weights"] + b["master_weights"]),
            "gradients": other_params[r] * b["grads"],
            "optimizer": optimizer_params[r] * b["optimizer"],
        }
        for r in range(world)
    ]
    if rank is None:
        return max(per_rank, key=lambda d: sum(d.values()))
    return per_rank[rank]


# ----------------------------------------------------------------------------------------------------------
# 3. Activations: what autograd keeps for backward, tensor by tensor


@dataclass(frozen=True)
class _Widths:
    """Bytes per value of the tensors of one precision mode."""

    compute: int  # matmul inputs/outputs, attention, MLP: 4 in fp32, 2 otherwise
    residual: int  # the residual stream between blocks: fp32, except in bf16-pure (the embedding is bf16)
    model: int  # the model's own dtype (parameters, buffers, gradients as backward makes them): 2 in bf16-pure
    autocast: bool  # autocast casts each matmul input (and weight) to 16 bits: one copy per consumer


def _widths(precision: str) -> _Widths:
    p = normalize_precision(precision)
    pure = p == "bf16-pure"
    return _Widths(
        compute=4 if p == "fp32" else 2,
        residual=2 if pure else 4,
        model=2 if pure else 4,
        autocast=autocast_dtype(p) is not None,
    )


def _device_type(device: torch.device | str) -> str:
    return torch.device(device).type  # "cuda:1" -> "cuda"


def _block_rows(cfg: ModelConfig, ctx: int, w: _Widths, device: str) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of each tensor ONE block saves, without checkpointing.

    Read it next to model.Block. C = n_embd, H = mlp_hidden, a = compute bytes. Tensors that views
    share are one storage, counted once; parameters and buffers are not activations.
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
        rows += [
            ("attention (math path): q, k, v as fp32 copies", 12 * C, 0),
            ("attention (math path): softmax probabilities, T per head", 4 * nh * T, 0),
            ("attention (math path): dropout mask, T per head", 4 * nh * T, 0),
            ("attention (math path): probabilities after dropout", 4 * nh * T, 0),
        ]
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
        rows.append(("attention residual dropout mask", _mask_bytes(a, device) * C, 0))
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
        rows.append(("MLP dropout mask", _mask_bytes(a, device) * C, 0))
    return rows


def _mask_bytes(value_bytes: int, device: str) -> int:
    """A dropout mask: CUDA's fused kernel keeps a bool per value; elsewhere it has the input's dtype."""
    return 1 if device == "cuda" else value_bytes


def _selective_rows(cfg: ModelConfig, ctx: int, w: _Widths, device: str) -> list[tuple[str, int, int]]:
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


def _outside_rows(cfg: ModelConfig, w: _Widths, device: str) -> list[tuple[str, int, int]]:
    """Saved outside the blocks: embedding, final norm, lm_head and the loss."""
    C, V, a = cfg.n_embd, cfg.vocab_size, w.compute
    rows = [("token ids, int64 (saved by the embedding)", 8, 0)]
    if cfg.dropout > 0:
        rows.append(("embedding dropout mask", _mask_bytes(w.residual, device) * C, 0))
    return rows + [
        ("final_norm: input, fp32 (the last block's output, or its fp32 copy)", 4 * C, 0),
        ("final_norm: 1/rms", 4, 0),
        ("final_norm: x/rms", w.residual * C, 0),
        ("lm_head input: final_norm's output" + (", cast by autocast" if w.autocast else ""), a * C, 0),
        ("log-softmax of the logits, fp32 (saved by cross-entropy)", 4 * V, 0),
        ("targets, int64 (saved by the loss)", 8, 0),
        ("loss normalizer, one fp32", 0, 4),
    ]


def activation_table(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    device: torch.device | str = "cuda",
) -> list[dict]:
    """Every tensor the training forward keeps for backward: one row each, with its bytes per token.

    `count` is how many of it there are (n_layer for a per-block tensor, the number of segments for
    sqrt checkpointing); `bytes` = count * (per_token * batch * ctx + fixed). Their sum is activations.
    """
    check_shape(model_cfg, batch, ctx)
    w, dev, mode = _widths(precision), _device_type(device), check_mode(checkpointing)
    L = model_cfg.n_layer
    if mode == "none":
        groups = [("each block", L, _block_rows(model_cfg, ctx, w, dev))]
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
        groups = [("each block", L, _selective_rows(model_cfg, ctx, w, dev))]
    groups.append(("outside the blocks", 1, _outside_rows(model_cfg, w, dev)))
    tokens = batch * ctx
    return [
        {
            "part": part,
            "tensor": name,
            "per_token": per_token,
            "fixed": fixed,
            "count": count,
            "bytes": count * (per_token * tokens + fixed),
        }
        for part, count, rows in groups
        for name, per_token, fixed in rows
    ]


def layer_bytes_per_token(model_cfg: ModelConfig, precision: str = "fp32", device: str = "cuda") -> int:
    """Bytes one block keeps per token without checkpointing: in fp32, 52 C + 16 H + 8 + 4 n_head on a CPU
    (48 C + ... on CUDA, whose attention output needs no transposed copy).

    The RoPE tables autocast casts do not grow with tokens and are left out. With dropout on a CPU,
    attention's T x T matrices are counted at the model's full ctx.
    """
    rows = _block_rows(model_cfg, model_cfg.ctx, _widths(precision), _device_type(device))
    return sum(per_token for _, per_token, _ in rows)


def _block_activations(cfg: ModelConfig, batch: int, ctx: int, w: _Widths, device: str) -> int:
    """Bytes one block saves for backward without checkpointing (its rows of activation_table)."""
    return sum(p * batch * ctx + f for _, p, f in _block_rows(cfg, ctx, w, device))


# ----------------------------------------------------------------------------------------------------------
# 4. Transient memory, and the moments of a step where memory peaks
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


def _block_backward(cfg: ModelConfig, tokens: int, w: _Widths) -> int:
    """Working memory of one block's backward: the residual stream's gradient + the worst of 3 moments."""
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    residual_grad = w.residual * C * tokens
    mlp = residual_grad + 3 * a * H * tokens  # gradients of down's input, of SiLU(gate) and of up, all at once
    gate_up_weight_grad_16bit = 2 * C * H if w.autocast else 0  # gate's/up's weight gradient before its fp32 cast
    mlp_weights = residual_grad + (2 * a * H + a * C) * tokens + gate_up_weight_grad_16bit
    norm = residual_grad + 5 * 4 * C * tokens  # RMSNorm's backward: five fp32 temporaries of (N, C)
    return max(mlp, mlp_weights, norm)


def _recomputed(cfg: ModelConfig, batch: int, ctx: int, w: _Widths, mode: str, device: str) -> list[int]:
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
        kept = sum(p * tokens + f for _, p, f in _selective_rows(cfg, ctx, w, device))
    else:  # the norm's fp32 input is the kept block input itself, except in bf16-pure (an fp32 copy)
        kept = 0 if w.residual == 2 else 4 * C * tokens
    block_activations = _block_activations(cfg, batch, ctx, w, device)
    return [blocks * block_activations - kept - down_input for blocks in regions]


@dataclass(frozen=True)
class _Transients:
    """The short-lived buffers of one step, in bytes, each named for what it holds."""

    logits_held: int  # the (N, V) logits in the compute dtype: the loop holds them until backward ends
    logits_upcast: int  # autocast: cross-entropy's fp32 copy of the 16-bit logits, in the forward
    loss_grads: int  # cross-entropy's backward: nll_loss's and log_softmax's fp32 (N, V) gradients, at once
    logits_grad: int  # then the gradient of the logits themselves, in the compute dtype
    tied_embedding_grad: int  # ONE (V, C) gradient of the tied embedding, in the model's dtype
    lm_head_grad_16bit: int  # autocast: lm_head's matmul makes its (V, C) gradient in 16 bits first
    recomputed: list[int]  # per checkpointed region: what backward recomputes (see _recomputed)
    block_backward: int  # working memory of one block's backward (see _block_backward)
    grad_into_embedding: int  # the (N, C) gradient reaching the embedding, alive during its backward
    weight_copies: int  # autocast: 16-bit copies of every weight matrix, all alive in its cache in the forward
    optimizer_step: int  # clip_grad_norm_'s norms, AdamW's temporaries, fp16's found-inf flag

    @property
    def logits(self) -> int:
        return self.logits_held + self.loss_grads

    @property
    def activation_grads(self) -> int:
        """The worst of three moments: lm_head's gradient, a (recomputed) block's backward, the embedding's.

        The tied embedding gets two (V, C) gradients: lm_head's, early in backward (it waits), and the
        embedding's, at the very end; autograd sums them into a third, the .grad.
        """
        lm_head = self.tied_embedding_grad + self.lm_head_grad_16bit
        block = self.tied_embedding_grad + max(self.recomputed) + self.block_backward
        embedding = 2 * self.tied_embedding_grad + self.grad_into_embedding
        return max(lm_head, block, embedding)


def _transients(
    cfg: ModelConfig, batch: int, ctx: int, precision: str, mode: str, master_weights: bool, device: str
) -> _Transients:
    w, tokens, V, C = _widths(precision), batch * ctx, cfg.vocab_size, cfg.n_embd
    # AdamW's state has the trained parameters' dtype. Its temporaries: none with the fused kernel, which
    # train.make_optimizer uses on the CPU and CUDA (torch >= 2.4); with foreach, its fallback elsewhere, one
    # per parameter of the decay group (sqrt of exp_avg_sq).
    adam_state_bytes = 4 if (master_weights or precision != "bf16-pure") else 2
    adam_temporaries = 0 if device in FUSED_ADAMW_DEVICES else _matrix_params(cfg)
    # clip_grad_norm_ (foreach): a norm per gradient tensor, their stack and the total, in the gradients' dtype
    clip_norms = (2 * _param_tensors(cfg) + 1) * adam_state_bytes
    found_inf = 4 if precision == "fp16" else 0  # GradScaler's flag, which the fused step reads
    return _Transients(
        logits_held=w.compute * V * tokens,
        logits_upcast=4 * V * tokens if w.compute == 2 else 0,
        loss_grads=2 * 4 * V * tokens,
        logits_grad=w.compute * V * tokens,
        tied_embedding_grad=w.model * V * C,
        lm_head_grad_16bit=2 * V * C if w.autocast else 0,
        recomputed=_recomputed(cfg, batch, ctx, w, mode, device),
        block_backward=_block_backward(cfg, tokens, w),
        grad_into_embedding=w.residual * C * tokens,
        weight_copies=2 * _matrix_params(cfg) if w.autocast else 0,
        optimizer_step=adam_state_bytes * adam_temporaries + clip_norms + found_inf,
    )


def _always_alive(cfg: ModelConfig, w: _Widths, device: str, weights: int, optimizer: int) -> int:
    """Bytes there through the whole step: weights, AdamW's state (from the second step on), the RoPE
    tables (buffers), AdamW's step counters (a 4-byte tensor per parameter tensor, 2 outside the blocks and
    7 in each, on the device for the fused kernel) and, on CUDA, cuBLAS's workspaces.
    """
    rope_tables = 2 * cfg.ctx * (cfg.head_dim // 2) * w.model  # cos and sin
    step_counters = 4 * _param_tensors(cfg) if device in FUSED_ADAMW_DEVICES else 0
    return weights + optimizer + rope_tables + step_counters + (CUDA_LIBRARY_WORKSPACE if device == "cuda" else 0)


def _backward_through_blocks(cfg: ModelConfig, w: _Widths, mode: str, t: _Transients, kept_per_region: int) -> int:
    """The worst region of backward through the blocks, which goes one region at a time from the top.

    At region i: the regions below it (it included) still hold their activations, the gradients of the
    blocks above exist, and this region is recomputed. Autocast's weight copies: without checkpointing,
    the graph keeps those of the regions not yet done; with it, the recomputed region makes its own again.
    """
    regions = _regions(cfg, mode)
    copies_per_block = 2 * _block_matrix_params(cfg) if w.autocast else 0
    worst = 0
    for i, blocks in enumerate(regions):
        activations_left = (i + 1) * kept_per_region
        grads_above = w.model * (_block_params(cfg) * sum(regions[i + 1 :]) + cfg.n_embd)  # + final norm's gain
        copies = copies_per_block * (sum(regions[: i + 1]) if mode == "none" else blocks)
        worst = max(worst, activations_left + grads_above + t.recomputed[i] + t.block_backward + copies)
    return worst


def _moments(
    cfg: ModelConfig, tokens: int, w: _Widths, mode: str, t: _Transients, rows: list[dict], always: int, gradients: int
) -> dict[str, int]:
    """Live bytes at the worst point of each phase of the step (the phases measure() marks)."""
    V, C = cfg.vocab_size, cfg.n_embd
    activations = sum(r["bytes"] for r in rows)
    outside = [r for r in rows if r["part"] == "outside the blocks"]
    kept_per_region = (activations - sum(r["bytes"] for r in outside)) // len(_regions(cfg, mode))
    # what the embedding's backward needs (the token ids, its dropout mask) stays until the very end
    embedding_saved = sum(r["bytes"] for r in outside if r["tensor"].startswith(("token ids", "embedding dropout")))
    saved_log_softmax = 4 * V * tokens  # an activation, freed once cross-entropy's backward is done
    # autocast's weight copies the graph keeps after the forward: lm_head's always, the blocks' without checkpointing
    lm_head_copy = 2 * V * C if w.autocast else 0
    block_copies = 2 * cfg.n_layer * _block_matrix_params(cfg) if (w.autocast and mode == "none") else 0
    model_grads = w.model * count_params(cfg)  # every gradient as backward makes it, in the model's dtype
    return {
        # at the loss: every activation, all weight copies (autocast's cache), the logits and their fp32 upcast
        "forward": always + activations + t.weight_copies + t.logits_held + t.logits_upcast,
        # cross-entropy's two (N, V) gradients; or, a little later, the logits' gradient and lm_head's
        "backward: loss head": always
        + activations
        + lm_head_copy
        + block_copies
        + t.logits_held
        + max(t.loss_grads, t.logits_grad - saved_log_softmax + t.tied_embedding_grad + t.lm_head_grad_16bit),
        # lm_head's gradient of the tied embedding waits for the embedding's
        "backward: blocks": always
        + t.logits_held
        + t.tied_embedding_grad
        + embedding_saved
        + _backward_through_blocks(cfg, w, mode, t, kept_per_region),
        # the embedding's gradient, lm_head's, and their sum (the .grad, counted in model_grads)
        "backward: embedding": always + model_grads + 2 * t.tied_embedding_grad + t.grad_into_embedding + t.logits_held,
        "optimizer": always + gradients + t.optimizer_step,
    }


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
) -> dict:
    """The transient fields and the moments of MemoryBreakdown, in bytes, from the config."""
    w, (weights, gradients, optimizer) = _widths(precision), static
    t = _transients(cfg, batch, ctx, precision, mode, master_weights, device)
    always = _always_alive(cfg, w, device, weights, optimizer)
    return {
        "logits": t.logits,
        "activation_grads": t.activation_grads,
        "weight_copies": t.weight_copies,
        "optimizer_step": t.optimizer_step,
        "moments": _moments(cfg, batch * ctx, w, mode, t, rows, always, gradients),
    }


# ----------------------------------------------------------------------------------------------------------
# 5. estimate()


def check_shape(cfg: ModelConfig, batch: int, ctx: int) -> None:
    """Raise ValueError unless batch and ctx are at least 1 and ctx fits the model."""
    if batch < 1 or ctx < 1:
        raise ValueError(f"batch and ctx must be at least 1, got batch={batch}, ctx={ctx}")
    if ctx > cfg.ctx:
        raise ValueError(f"ctx={ctx} is longer than the model's ctx={cfg.ctx}")


def check_mode(checkpointing: str) -> str:
    """Return `checkpointing` if it is one of CHECKPOINTING_MODES, else raise ValueError."""
    if checkpointing not in CHECKPOINTING_MODES:
        raise ValueError(f"unknown checkpointing {checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}")
    return checkpointing


def estimate(
    model_cfg: ModelConfig,
    batch: int,
    ctx: int,
    precision: str = "fp32",
    checkpointing: str = "none",
    master_weights: bool = False,
    device: torch.device | str = "cuda",
) -> MemoryBreakdown:
    """Predicted memory of one training step, from the config alone (no tensor is made).

    `device` picks the kernels' rules: "cuda" (fused dropout and attention) or any other
    type (CPU rules). They differ only with dropout > 0 and in AdamW's temporaries.
    """
    precision = normalize_precision(precision)
    dev = _device_type(device)
    static = _static(model_cfg, precision, master_weights)
    rows = activation_table(model_cfg, batch, ctx, precision, checkpointing, dev)
    weights, gradients, optimizer = static
    return MemoryBreakdown(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=sum(r["bytes"] for r in rows),
        **_predict(model_cfg, batch, ctx, precision, checkpointing, master_weights, dev, static, rows),
    )


def sharded_estimate(
    est: MemoryBreakdown,
    model_cfg: ModelConfig,
    precision: str,
    shard: str,
    world: int,
    master_weights: bool = False,
) -> MemoryBreakdown:
    """One process's step with `shard` over `world` processes: estimate()'s breakdown with the static terms split.

    Weights and AdamW's state are there at every moment, so every moment loses what splitting them saves;
    FSDP's split gradients count where all gradients are present (the end of backward, the optimizer step).
    FSDP adds the whole weights it gathers: the root's (embedding and final norm, kept gathered for the whole
    step) and two blocks' (the one running and the one prefetched). Autocast's 16-bit weight copies stay as
    they were: its cache keeps one per gathered weight until the forward ends.
    """
    if world == 1 or shard == "none":
        check_shard_mode(shard)
        return est
    per = sharded_state_bytes(model_cfg, precision, shard, world, master_weights)
    saved_always = (est.weights - per["weights"]) + (est.optimizer - per["optimizer"])
    saved_grads = est.gradients - per["gradients"]
    gathered = model_grads_saved = 0
    if shard == "fsdp":
        model_bytes = _widths(precision).model
        root, block = model_cfg.vocab_size * model_cfg.n_embd + model_cfg.n_embd, _block_params(model_cfg)
        gathered = model_bytes * (root + 2 * block)
        model_grads_saved = model_bytes * (count_params(model_cfg) - max(fsdp_shard_params(model_cfg, world)))
    moments = {}
    for phase, live in est.moments.items():
        live -= saved_always
        if phase == "optimizer":
            live -= saved_grads
        else:
            live += gathered
        if phase == "backward: embedding":
            live -= model_grads_saved
        moments[phase] = live
    return replace(est, **per, moments=moments)


# ----------------------------------------------------------------------------------------------------------
# 6. The textbook formulas, for comparison


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
