"""Where the memory of a training step goes: predicted from the model's shape, and measured.

A training step holds:
  - static memory: weights, gradients and AdamW's two moments, a fixed number of bytes per parameter;
  - activations: the tensors autograd keeps for backward, which grow with batch x ctx;
  - transient buffers: the logits and their fp32 gradients, gradients in flight during backward, blocks
    recomputed by checkpointing, autocast's 16-bit copies of the weights, AdamW's temporaries.
The peak is the worst moment of the step (MemoryBreakdown.moments), not the sum of the parts.

estimate() derives every term from the config, following what THIS model's ops save (activation_table():
one row per saved tensor). measure() runs a real training step and counts the same terms on real tensors
with two meters: saved_tensors_hooks (what autograd saves) and a TorchDispatchMode that sees every op
(what is alive, op by op). The tests and benchmarks/memory_grid.py check that the two agree: activations
within 5%, static terms to the byte.

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

import contextlib
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from minigpt.recompute import CHECKPOINTING_MODES, sqrt_segments
from minigpt.model import GPT, ModelConfig, count_params
from minigpt.precision import (
    autocast_context,
    autocast_dtype,
    check_precision,
    normalize_precision,
    static_bytes_per_param,
)

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
    optimizer_step: int = 0  # transient: AdamW's temporaries inside optimizer.step()
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
        terms = [(f.name, getattr(self, f.name)) for f in fields(self)
                 if f.name != "moments" and getattr(self, f.name) is not None]
        return [*terms, ("static", self.static), *((f"at {k}", v) for k, v in self.moments.items()),
                ("peak", self.peak)]

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
    rows.append({"regime": "'12 + 2 = 14' framing", "weights": 2, "master_weights": 4, "grads": 0,
                 "optimizer": 8, "total": 14,
                 "note": "forgets the gradients: +4 fp32 -> 18, or +2 bf16 -> 16"})
    return rows


def _matrix_params(cfg: ModelConfig) -> int:
    """Parameters of the weight matrices (all but the RMSNorm gains): what autocast casts to 16 bits."""
    return cfg.vocab_size * cfg.n_embd + cfg.n_layer * (4 * cfg.n_embd**2 + 3 * cfg.n_embd * cfg.mlp_hidden)


def _static(cfg: ModelConfig, precision: str, master_weights: bool) -> tuple[int, int, int]:
    b, n = static_bytes_per_param(precision, master_weights), count_params(cfg)
    return n * (b["weights"] + b["master_weights"]), n * b["grads"], n * b["optimizer"]


# ----------------------------------------------------------------------------------------------------------
# 3. Activations: what autograd keeps for backward, tensor by tensor


@dataclass(frozen=True)
class _Widths:
    """Bytes per value of the tensors of one precision mode."""

    compute: int  # matmul inputs/outputs, attention, MLP: 4 in fp32, 2 otherwise
    residual: int  # the residual stream between blocks: fp32, except in bf16-pure (the embedding is bf16)
    autocast: bool  # autocast casts each matmul input (and weight) to 16 bits: one copy per consumer


def _widths(precision: str) -> _Widths:
    p = normalize_precision(precision)
    return _Widths(compute=4 if p == "fp32" else 2, residual=2 if p == "bf16-pure" else 4,
                   autocast=autocast_dtype(p) is not None)


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
        rows += [("q @ k^T scores (bmm output), T per head", 4 * nh * ctx, 0),
                 ("probabilities @ v (bmm output), fp32", 4 * C, 0)]
    else:
        rows += [("attention output", a * C, 0), ("attention logsumexp", 4 * nh, 0)]
    return rows + [("proj matmul output", a * C, 0), ("gate matmul output", a * H, 0),
                   ("up matmul output", a * H, 0), ("down matmul output", a * C, 0)]


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
    model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32", checkpointing: str = "none",
    device: torch.device | str = "cuda",
) -> list[dict]:
    """Every tensor the training forward keeps for backward: one row each, with its bytes per token.

    `count` is how many of it there are (n_layer for a per-block tensor, the number of segments for
    sqrt checkpointing); `bytes` = count * (per_token * batch * ctx + fixed). Their sum is activations.
    """
    _check_shape(model_cfg, batch, ctx)
    w, dev, mode = _widths(precision), _device_type(device), _check_mode(checkpointing)
    L = model_cfg.n_layer
    if mode == "none":
        groups = [("each block", L, _block_rows(model_cfg, ctx, w, dev))]
    elif mode == "full":
        kept = [("block input (kept by checkpoint)", w.residual * model_cfg.n_embd, 0)]
        groups = [("each block", L, kept)]
    elif mode == "sqrt":
        groups = [("each segment", len(sqrt_segments(L)),
                   [("segment input (kept by checkpoint)", w.residual * model_cfg.n_embd, 0)])]
    else:
        groups = [("each block", L, _selective_rows(model_cfg, ctx, w, dev))]
    groups.append(("outside the blocks", 1, _outside_rows(model_cfg, w, dev)))
    tokens = batch * ctx
    return [
        {"part": part, "tensor": name, "per_token": per_token, "fixed": fixed, "count": count,
         "bytes": count * (per_token * tokens + fixed)}
        for part, count, rows in groups for name, per_token, fixed in rows
    ]


def layer_bytes_per_token(model_cfg: ModelConfig, precision: str = "fp32", device: str = "cuda") -> int:
    """Bytes one block keeps per token without checkpointing: in fp32, 52 C + 16 H + 8 + 4 n_head on a CPU
    (48 C + ... on CUDA, whose attention output needs no transposed copy).

    The RoPE tables autocast casts do not grow with tokens and are left out. With dropout on a CPU,
    attention's T x T matrices are counted at the model's full ctx.
    """
    rows = _block_rows(model_cfg, model_cfg.ctx, _widths(precision), _device_type(device))
    return sum(per_token for _, per_token, _ in rows)


# ----------------------------------------------------------------------------------------------------------
# 4. Transient memory, and the moments of a step where memory peaks


def _block_backward(cfg: ModelConfig, N: int, w: _Widths) -> int:
    """Working memory of one block's backward: the residual stream's gradient + the worst of 3 moments."""
    C, H, a = cfg.n_embd, cfg.mlp_hidden, w.compute
    r = w.residual * C * N
    mlp = r + 3 * a * H * N  # gradients of down's input, of SiLU(gate) and of up, all at once
    bf16_weight_grad = 2 * C * H if w.autocast else 0  # gate's/up's weight gradient before its fp32 cast
    mlp_weights = r + (2 * a * H + a * C) * N + bf16_weight_grad
    norm = r + 5 * 4 * C * N  # RMSNorm's backward: five fp32 temporaries of (N, C)
    return max(mlp, mlp_weights, norm)


# cuBLAS takes a workspace through PyTorch's allocator for each thread that runs matmuls: the training
# loop's thread and autograd's backward thread. Measured on an H100 (torch 2.11): 32 MiB each, which is
# PyTorch's default on Hopper; older GPUs default to 8.125 MiB each, so this errs on the safe side there.
# CUBLAS_WORKSPACE_CONFIG changes it.
CUDA_LIBRARY_WORKSPACE = 2 * 32 * 2**20


def _regions(cfg: ModelConfig, mode: str) -> list[int]:
    """Blocks per checkpointed region, in forward order (one region per block without checkpointing)."""
    return [len(s) for s in sqrt_segments(cfg.n_layer)] if mode == "sqrt" else [1] * cfg.n_layer


def _predict(cfg: ModelConfig, batch: int, ctx: int, precision: str, mode: str, master: bool, device: str,
             static: tuple[int, int, int], rows: list[dict]) -> dict:
    """The transient fields and the moments of MemoryBreakdown, in bytes, from the config."""
    w, N = _widths(precision), batch * ctx
    C, H, V, L, a = cfg.n_embd, cfg.mlp_hidden, cfg.vocab_size, cfg.n_layer, w.compute
    weights, gradients, optimizer = static
    activations = sum(r["bytes"] for r in rows)
    outside = {r["tensor"]: r["bytes"] for r in rows if r["part"] == "outside the blocks"}
    ids = sum(n for name, n in outside.items() if name.startswith(("token ids", "embedding dropout")))

    # Logits: the training loop holds them (a bytes each) until backward ends. Cross-entropy's backward
    # makes two fp32 (N, V) gradients at once: nll_loss's and log_softmax's.
    held = a * V * N
    logits = held + 8 * V * N
    # The tied embedding gets two gradients of (V, C): lm_head's (early in backward; it waits) and the
    # embedding's (at the very end); autograd sums them into a third, the .grad.
    g = 2 if precision == "bf16-pure" else 4  # bytes of a gradient as backward makes it (model dtype)
    tied = g * V * C
    head_extra = 2 * V * C if w.autocast else 0  # under autocast lm_head's matmul makes it in bf16 first

    # Checkpointing recomputes one region at a time in backward: its activations, minus its input (kept)
    # and minus SiLU(gate) * up, which down's backward frees before the block's peak.
    regions = _regions(cfg, mode)
    kept_per_region = (activations - sum(outside.values())) // len(regions)
    layer = _layer_total(cfg, batch, ctx, w, device)
    if mode == "selective":
        discount = sum(p * N + f for _, p, f in _selective_rows(cfg, ctx, w, device)) + a * H * N
    else:
        discount = (0 if w.residual == 2 else 4 * C * N) + a * H * N  # bf16-pure recomputes the fp32 copy
    recompute = [0 if mode == "none" else n * layer - discount for n in regions]
    block = _block_backward(cfg, N, w)
    into_embedding = w.residual * C * N  # the gradient reaching the embedding, alive during its backward
    activation_grads = max(tied + head_extra, tied + max(recompute) + block, 2 * tied + into_embedding)

    block_matrices = 4 * C * C + 3 * C * H
    copies = 2 * _matrix_params(cfg) if w.autocast else 0  # all alive in autocast's cache in the forward
    head_copy = 2 * V * C if w.autocast else 0  # lm_head's copy, kept by the graph in every mode
    block_copies = 2 * L * block_matrices if (w.autocast and mode == "none") else 0  # kept by the graph
    # AdamW: foreach (CUDA) makes one temporary per parameter of the decay group (sqrt of exp_avg_sq);
    # the single-tensor loop elsewhere makes two of the largest parameter at once.
    state = 4 if (master or precision != "bf16-pure") else 2
    optimizer_step = state * (_matrix_params(cfg) if device == "cuda" else 2 * V * C)

    # There all along: weights, AdamW's state (from the second step on), the RoPE tables (buffers) and,
    # on CUDA, cuBLAS's workspaces; on the CPU, AdamW's step counters (a 4-byte tensor per parameter
    # tensor; CUDA keeps them on the host).
    rope = 2 * cfg.ctx * (cfg.head_dim // 2) * (2 if precision == "bf16-pure" else 4)
    base = weights + optimizer + rope + (CUDA_LIBRARY_WORKSPACE if device == "cuda" else 4 * (2 + 7 * L))
    # Backward through the blocks, one region at a time from the top: the regions below (this one
    # included) still hold their activations, the gradients of the regions above exist, this region is
    # recomputed. Weight copies (autocast): without checkpointing, the graph keeps those of the regions
    # not yet done; with it, the recomputed region makes its own again.
    per_block_params = 4 * C * C + 3 * C * H + 2 * C
    region_moments = []
    for i, n in enumerate(regions):
        grads_above = g * (per_block_params * sum(regions[i + 1:]) + C)  # + the final norm's gain
        if not w.autocast:
            copies_now = 0
        elif mode == "none":
            copies_now = 2 * block_matrices * sum(regions[: i + 1])
        else:
            copies_now = 2 * block_matrices * n
        region_moments.append((i + 1) * kept_per_region + grads_above + recompute[i] + block + copies_now)
    moments = {
        # at the loss: every activation, all weight copies (autocast's cache), logits and their fp32 upcast
        "forward": base + activations + copies + held + (4 * V * N if a == 2 else 0),
        # cross-entropy's two (N, V) gradients; or, a little later, lm_head's gradients
        "backward: loss head": base + activations + head_copy + block_copies + held
        + max(8 * V * N, a * V * N - 4 * V * N + tied + head_extra),
        "backward: blocks": base + held + tied + ids + max(region_moments),
        # the embedding's gradient, lm_head's, and their sum (the .grad, counted in the gradients)
        "backward: embedding": base + g * count_params(cfg) + 2 * tied + into_embedding + held,
        "optimizer": base + gradients + optimizer_step,
    }
    return {"logits": logits, "activation_grads": activation_grads, "weight_copies": copies,
            "optimizer_step": optimizer_step, "moments": moments}


def _layer_total(cfg: ModelConfig, batch: int, ctx: int, w: _Widths, device: str) -> int:
    return sum(p * batch * ctx + f for _, p, f in _block_rows(cfg, ctx, w, device))


# ----------------------------------------------------------------------------------------------------------
# 5. estimate()


def _check_shape(cfg: ModelConfig, batch: int, ctx: int) -> None:
    if batch < 1 or ctx < 1:
        raise ValueError(f"batch and ctx must be at least 1, got batch={batch}, ctx={ctx}")
    if ctx > cfg.ctx:
        raise ValueError(f"ctx={ctx} is longer than the model's ctx={cfg.ctx}")


def _check_mode(checkpointing: str) -> str:
    if checkpointing not in CHECKPOINTING_MODES:
        raise ValueError(
            f"unknown checkpointing {checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}")
    return checkpointing


def estimate(
    model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32", checkpointing: str = "none",
    master_weights: bool = False, device: torch.device | str = "cuda",
) -> MemoryBreakdown:
    """Predicted memory of one training step, from the config alone (no tensor is made).

    `device` picks the kernels' rules: "cuda" (fused dropout and attention, foreach AdamW) or any other
    type (CPU rules). They differ only with dropout > 0 and in AdamW's temporaries.
    """
    precision = normalize_precision(precision)
    dev = _device_type(device)
    static = _static(model_cfg, precision, master_weights)
    rows = activation_table(model_cfg, batch, ctx, precision, checkpointing, dev)
    weights, gradients, optimizer = static
    return MemoryBreakdown(
        weights=weights, gradients=gradients, optimizer=optimizer, activations=sum(r["bytes"] for r in rows),
        **_predict(model_cfg, batch, ctx, precision, checkpointing, master_weights, dev, static, rows),
    )


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


# ----------------------------------------------------------------------------------------------------------
# 7. measure(): one real training step, metered


class SavedTensorMeter(torch.autograd.graph.saved_tensors_hooks):
    """Records the storages autograd saves for backward, each once (views share a storage).

    Parameters and buffers are left out (they exist anyway). It also sees the inputs that non-reentrant
    checkpointing keeps (checkpoint saves them under the hooks active outside it), but not what
    selective checkpointing caches: that policy keeps op outputs in a dict, not through autograd.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
        self._saved: dict[int, tuple[StorageWeakRef, int]] = {}  # storage address -> (weak ref, bytes)
        self.enabled = True

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if self.enabled and ptr not in skip and (ptr not in self._saved or self._saved[ptr][0].expired()):
                self._saved[ptr] = (StorageWeakRef(storage), storage.nbytes())
            # The meter only looks. A detached alias of the same storage, not t itself: when t is the
            # op's own output (exp, softmax), keeping t would tie the graph into a reference cycle that
            # is never freed unless backward runs (a forward-only measurement would leak its graph).
            return t.detach()

        super().__init__(pack, lambda t: t)

    def alive(self) -> dict[int, int]:
        """{address: bytes} of the saved storages still alive (a saved tensor can die with its graph)."""
        return {ptr: n for ptr, (ref, n) in self._saved.items() if not ref.expired()}


def _tensors(x):
    """The tensors in an op's arguments or results (nested tuples, lists and dicts)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item)


class LiveTensorTracker(TorchDispatchMode):
    """Sees every op, and records each new storage it makes: bytes, when born, when freed, in which phase.

    "clock" counts ops. A storage's death is noticed through a weak reference, checked whenever an op
    makes a new storage (only then can memory grow). Tensors made before the tracker starts (weights,
    the batch) are not in it; views and in-place results are not new storages.
    """

    def __init__(self, params: list[torch.Tensor], device_type: str) -> None:
        super().__init__()
        self.device_type = device_type  # storages elsewhere (AdamW's step counters on the host) are left out
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.clock = 0
        self.phases: list[tuple[int, str]] = [(1, "forward")]  # (first op of the phase, its name)
        self.records: list[dict] = []
        self._live: dict[int, tuple[StorageWeakRef, dict]] = {}

    @property
    def phase(self) -> str:
        return self.phases[-1][1]

    def set_phase(self, name: str) -> None:
        if name != self.phase:
            self.sweep(died=self.clock + 1)
            self.phases.append((self.clock + 1, name))

    def live_records(self) -> set[int]:
        """Indices (in self.records) of the storages alive now."""
        self.sweep(died=self.clock + 1)
        return {rec["index"] for _, rec in self._live.values()}

    def sweep(self, died: int) -> None:
        """Mark the storages freed since the last sweep as gone before op number `died`."""
        expired = torch.UntypedStorage._expired  # what StorageWeakRef.expired() calls, minus two wrappers
        for ptr in [p for p, (ref, _) in self._live.items() if expired(ref.cdata)]:
            self._live.pop(ptr)[1]["died"] = died

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.clock += 1
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        new = [t for t in _tensors(out) if t.device.type == self.device_type and t.untyped_storage().nbytes()
               and t.untyped_storage().data_ptr() not in inputs]  # not a view or in-place result of an input
        if not new:
            return out
        # Memory only grows when an op makes a storage: that is when to look for what was freed before it.
        self.sweep(died=self.clock)
        for t in new:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self._live:
                continue  # a second view of a storage this op already made
            rec = {"index": len(self.records), "ptr": ptr, "bytes": storage.nbytes(), "shape": tuple(t.shape),
                   "born": self.clock, "died": None, "phase": self.phase,
                   # autocast's copy of a weight: a cast whose input is a parameter
                   "weight_copy": func is torch.ops.aten._to_copy.default and bool(inputs & self.param_ptrs)}
            self.records.append(rec)
            self._live[ptr] = (StorageWeakRef(storage), rec)
        return out

    def timeline(self, category_of) -> tuple[dict[str, int], dict[str, int]]:
        """Largest live bytes of each category, and of all tracked storages in each phase, over the step."""
        self.sweep(died=self.clock + 1)
        births, deaths = {}, {}
        for rec in self.records:
            births.setdefault(rec["born"], []).append(rec)
            if rec["died"] is not None:
                deaths.setdefault(rec["died"], []).append(rec)
        phase_starts = dict(self.phases)
        live, maxima, phase_max, total, phase = {}, {}, {}, 0, "forward"
        for clock in range(1, self.clock + 1):
            phase = phase_starts.get(clock, phase)
            events = [(r, -1) for r in deaths.get(clock, [])] + [(r, 1) for r in births.get(clock, [])]
            for rec, sign in events:  # frees before this op, then what this op made
                cat = category_of(rec)
                live[cat] = live.get(cat, 0) + sign * rec["bytes"]
                maxima[cat] = max(maxima.get(cat, 0), live[cat])
                total += sign * rec["bytes"]
            phase_max[phase] = max(phase_max.get(phase, 0), total)
        return maxima, phase_max


def _prepare(cfg: ModelConfig, batch: int, ctx: int, precision: str, checkpointing: str,
             master_weights: bool, device: torch.device, seed: int):
    """Check the arguments; make the model, optimizer, master weights, scaler and a batch as train() does."""
    from minigpt.train import MasterWeights, TrainConfig, make_optimizer

    _check_shape(cfg, batch, ctx)
    _check_mode(checkpointing)
    static_bytes_per_param(precision, master_weights)  # raises if master_weights does not apply
    check_precision(device, precision)  # refuses a precision this device would silently ignore
    torch.manual_seed(seed)  # dropout masks
    model = GPT(cfg, seed=seed).to(device)
    model.checkpointing = checkpointing
    model.train()
    master = None
    if precision == "bf16-pure":
        model.to(torch.bfloat16)
        master = MasterWeights(model) if master_weights else None
    train_params = master.params if master else list(model.parameters())
    optimizer = make_optimizer(train_params, TrainConfig())  # default hyperparameters: same memory
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=gen)
    xy = (tokens[:, :-1].clone().to(device), tokens[:, 1:].clone().to(device))  # two tensors, as loaders give
    return model, optimizer, master, scaler, train_params, xy


def _step(model, optimizer, master, scaler, train_params, xy, device, precision, on_optimizer=None) -> None:
    """train.forward_backward, then the optimizer part of train.train()'s loop, up to zero_grad."""
    from minigpt.train import forward_backward

    forward_backward(model, [xy], device, precision, scaler)
    if on_optimizer is not None:
        on_optimizer()
    if master:
        master.grads_to_master()
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, as train() does
    torch.nn.utils.clip_grad_norm_(train_params, 1.0)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()


def _storages(tensors, device_type: str) -> dict[int, int]:
    """{storage address: bytes} of the tensors on that type of device, each storage once."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors
            if t is not None and t.device.type == device_type}


@contextlib.contextmanager
def _phase_marks(model: GPT, tracker: LiveTensorTracker, saved: SavedTensorMeter, end: dict):
    """Hooks that tell the meters where the step is: forward, loss head, backward through the blocks..."""

    def phase(name):
        return lambda *_: tracker.set_phase(name)

    def on_grad(name):  # the gradient reaching this module's output means backward has got past it
        def hook(module, args, output):
            output.register_hook(phase(name))

        return hook

    def end_of_forward(module, args, output):
        end.update(alive=tracker.live_records(), saved=saved.alive(), outputs={
            t.untyped_storage().data_ptr() for t in output if t is not None})
        tracker.set_phase("backward: loss head")
        saved.enabled = False  # what the loop saves after the model (GradScaler's scale) is not activations

    handles = [
        model.final_norm.register_forward_hook(on_grad("backward: blocks")),
        model.tok_emb.register_forward_hook(on_grad("backward: embedding")),
        model.register_forward_hook(end_of_forward),
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _kept_for_backward(tracker: LiveTensorTracker, end: dict) -> tuple[dict[int, int], dict[int, int]]:
    """{address: bytes} of what the forward left for backward: all of it, and the part the hooks saw.

    All of it = the saved tensors (hooks) + the storages the forward made that are still alive at its
    end (the same ones, plus selective checkpointing's cache), without autocast's weight copies and
    without what the model returned (logits, loss).
    """
    alive = [r for r in tracker.records if r["index"] in end["alive"]]
    copies = {r["ptr"] for r in alive if r["weight_copy"]}
    hooked = {ptr: n for ptr, n in end["saved"].items() if ptr not in copies}
    made = {r["ptr"]: r["bytes"] for r in alive if not r["weight_copy"] and r["ptr"] not in end["outputs"]}
    return {**made, **hooked}, hooked


def measure_activations(
    model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32", checkpointing: str = "none",
    device: torch.device | str = "cpu", seed: int = 0,
) -> int:
    """measure()'s activations from a training forward alone: no backward, no AdamW, so much quicker."""
    precision, device = normalize_precision(precision), torch.device(device)
    model, *_, (x, y) = _prepare(model_cfg, batch, ctx, precision, checkpointing, False, device, seed)
    tracker, saved = LiveTensorTracker(list(model.parameters()), device.type), SavedTensorMeter(model)
    end: dict = {}
    with _phase_marks(model, tracker, saved, end), tracker, saved, autocast_context(device, precision):
        model(x, y, reduction="sum")  # as train.forward_backward calls it
    return sum(_kept_for_backward(tracker, end)[0].values())


def measure(
    model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32", checkpointing: str = "none",
    master_weights: bool = False, device: torch.device | str = "cpu", seed: int = 0,
) -> MemoryBreakdown:
    """Run one real training step (forward, backward, clipping, AdamW) and count its memory by kind.

    Measured: weights, gradients, optimizer (the real tensors, each storage once); activations (what
    saved_tensors_hooks sees in the forward, plus what is still alive at its end, such as selective
    checkpointing's cache); each transient term and each moment (the largest live bytes, op by op, from
    a LiveTensorTracker). AdamW makes its state inside the first step(); every later step carries it
    through forward and backward, so it is added to those moments. device_peak: on CUDA,
    torch.cuda.max_memory_allocated over a step that follows a warm-up step (it also counts what
    libraries allocate through PyTorch, such as cuBLAS's workspace, and the allocator's rounding);
    elsewhere the largest moment.
    """
    precision, device = normalize_precision(precision), torch.device(device)
    model, optimizer, master, scaler, train_params, xy = _prepare(
        model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    if device.type == "cuda":  # a warm-up step, so the measured one starts with AdamW's state allocated
        _step(model, optimizer, master, scaler, train_params, xy, device, precision)
        optimizer.zero_grad(set_to_none=True)
        if master:
            master.master_to_model()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    all_params, kind = list(model.parameters()) + (master.params if master else []), device.type
    existing = _storages([*all_params, *model.buffers(), *xy,
                          *(v for s in optimizer.state.values() for v in s.values())], kind)
    tracker, saved, end = LiveTensorTracker(all_params, kind), SavedTensorMeter(model), {}

    def backward_done() -> None:  # bf16-pure + master: backward's bf16 grads become fp32 ones next
        made = {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
        end["grads_made"] = {i for i in tracker.live_records() if tracker.records[i]["ptr"] in made}
        tracker.set_phase("optimizer")

    with _phase_marks(model, tracker, saved, end), tracker, saved:
        _step(model, optimizer, master, scaler, train_params, xy, device, precision,
              on_optimizer=backward_done)
    cuda_peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None

    grads = _storages((p.grad for p in train_params), kind)
    state = _storages((v for s in optimizer.state.values() for v in s.values()), kind)
    moments = _storages((s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")), kind)
    param_shapes = {tuple(p.shape) for p in all_params}

    def category(rec: dict) -> str:
        if rec["weight_copy"]:
            return "weight_copies"
        if (rec["died"] is None and rec["ptr"] in grads) or rec["index"] in end["grads_made"]:
            return "gradients"
        if rec["died"] is None and rec["ptr"] in state:
            return "optimizer"
        if rec["phase"] == "optimizer":
            return "optimizer_step"
        if rec["index"] in end["alive"]:  # alive when the model's forward returned
            return "logits" if rec["ptr"] in end["outputs"] else "activations"
        if rec["phase"] != "backward: blocks" and rec["shape"][-1:] == (model_cfg.vocab_size,) and (
                rec["shape"] not in param_shapes):
            return "logits"  # the upcast in the forward, the (N, V) gradients in the backward
        return "activation_grads"  # gradients in flight, recomputed blocks, partial weight grads, scratch

    maxima, phase_max = tracker.timeline(category)
    kept, hooked = _kept_for_backward(tracker, end)
    new_state = sum(n for ptr, n in state.items() if ptr not in existing)  # made by this (first) step
    step_moments = {name: sum(existing.values()) + n + (new_state if name != "optimizer" else 0)
                    for name, n in phase_max.items()}
    return MemoryBreakdown(
        weights=sum(_storages(all_params, kind).values()), gradients=sum(grads.values()),
        optimizer=sum(moments.values()), activations=sum(kept.values()),
        logits=maxima.get("logits", 0), activation_grads=maxima.get("activation_grads", 0),
        weight_copies=maxima.get("weight_copies", 0), optimizer_step=maxima.get("optimizer_step", 0),
        moments=step_moments, device_peak=cuda_peak if cuda_peak is not None else max(step_moments.values()),
        saved_by_hooks=sum(hooked.values()),
    )


# ----------------------------------------------------------------------------------------------------------
# 8. Pictures of a step: a CUDA memory snapshot, or a profiler memory timeline


def _run_steps(model_cfg: ModelConfig, batch: int, ctx: int, precision: str, checkpointing: str,
               master_weights: bool, device: torch.device, seed: int, steps: int, record) -> None:
    """Set up as train() does and run `steps` training steps inside the context `record`."""
    precision = normalize_precision(precision)
    model, optimizer, master, scaler, train_params, xy = _prepare(
        model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed)
    with record:
        for _ in range(steps):
            _step(model, optimizer, master, scaler, train_params, xy, device, precision)
            optimizer.zero_grad(set_to_none=True)
            if master:
                master.master_to_model()


def memory_snapshot(
    path: str | Path, model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32",
    checkpointing: str = "none", master_weights: bool = False, device: torch.device | str = "cuda",
    seed: int = 0, steps: int = 2,
) -> Path:
    """Record every CUDA allocation of `steps` training steps into a snapshot file (a pickle).

    Drag the file onto https://pytorch.org/memory_viz to see each tensor's lifetime and the stack that
    made it. The first step also creates AdamW's state; the second is what every later step looks like.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"memory_snapshot records the CUDA allocator, and {device} is not a CUDA device "
                           "(or this torch has no CUDA); on a CPU use memory_timeline() instead")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)  # from here on, every alloc and free
    try:
        _run_steps(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed, steps,
                   contextlib.nullcontext())
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
    return path


TIMELINE_SUFFIXES = (".html", ".json", ".json.gz")


def memory_timeline(
    path: str | Path, model_cfg: ModelConfig, batch: int, ctx: int, precision: str = "fp32",
    checkpointing: str = "none", master_weights: bool = False, device: torch.device | str = "cpu",
    seed: int = 0, steps: int = 2,
) -> Path | None:
    """Profile `steps` training steps and export torch.profiler's memory timeline, on any device.

    .html: a stacked plot of memory by category (parameters, optimizer state, activations, gradients,
    temporaries...); .json / .json.gz: the plot's points. Returns None, with a warning saying why,
    where this torch build cannot profile memory.
    """
    path = Path(path)
    if not path.name.endswith(TIMELINE_SUFFIXES):
        raise ValueError(f"{path.name}: the timeline is written as {', '.join(TIMELINE_SUFFIXES)}; "
                         "choose a file name with one of these endings")
    device = torch.device(device)
    if not torch.autograd.kineto_available():
        warnings.warn(f"this torch build ({torch.__version__}) has no Kineto profiler: no memory timeline",
                      stacklevel=2)
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    # The memory timeline needs all three: allocations, the shapes of op inputs, and Python stacks.
    profiler = torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True,
                                      with_stack=True)
    _run_steps(model_cfg, batch, ctx, precision, checkpointing, master_weights, device, seed, steps, profiler)
    path.parent.mkdir(parents=True, exist_ok=True)
    where = f"cuda:{device.index or 0}" if device.type == "cuda" else device.type
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of CUDA snapshots
            profiler.export_memory_timeline(str(path), device=where)
    except Exception as error:  # noqa: BLE001 - any failure here means "this build cannot draw it"
        warnings.warn(f"torch {torch.__version__} could not export a memory timeline for {where}: "
                      f"{type(error).__name__}: {error}", stacklevel=2)
        return None
    return path
