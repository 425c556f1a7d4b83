"""A small decoder-only GPT in plain PyTorch, built like a modern LLM.

Pre-norm blocks with RMSNorm, rotary position embeddings (RoPE), a SwiGLU MLP, causal
scaled-dot-product attention and input/output embeddings tied together. Attention and MLP are
separate submodules so that gradient checkpointing can wrap a whole block or just one part.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.loss import (  # noqa: F401 - IGNORE_INDEX: part of the model's API
    IGNORE_INDEX,
    chunked_cross_entropy,
    cross_entropy_fp32,
)

# The default tokenizer has 8192 tokens (8191 BPE tokens + <|endoftext|>), already a multiple of 64.
DEFAULT_VOCAB_SIZE = 8192
# generate feeds the model windows padded to a multiple of this many tokens (see GPT.generate)
SAMPLE_WINDOW_STEP = 64


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the model. `ctx` is the longest sequence it accepts (RoPE tables are built for it)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    ctx: int = 256
    vocab_size: int = DEFAULT_VOCAB_SIZE
    dropout: float = 0.0
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if (self.n_embd // self.n_head) % 2 != 0:
            raise ValueError(f"head size {self.n_embd // self.n_head} must be even for rotary embeddings")
        if min(self.n_layer, self.n_head, self.n_embd, self.ctx, self.vocab_size) < 1:
            raise ValueError(f"every size in {self} must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        """SwiGLU hidden width: 8/3 of n_embd (same parameters as a 4x GELU MLP), rounded up to 64."""
        return 64 * math.ceil(8 * self.n_embd / 3 / 64)

    def to_dict(self) -> dict:
        return asdict(self)


# Presets: the names are parameter counts with the default 8192-token vocabulary (tests check +-10%).
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(n_layer=2, n_head=2, n_embd=64, ctx=64),
    "tiny-deep": ModelConfig(n_layer=8, n_head=2, n_embd=64, ctx=64),
    "10m": ModelConfig(n_layer=10, n_head=4, n_embd=256, ctx=256),
    "30m": ModelConfig(n_layer=16, n_head=6, n_embd=384, ctx=512),
    "125m": ModelConfig(n_layer=16, n_head=12, n_embd=768, ctx=1024),
}
COURSE_PRESETS = ("10m", "30m", "125m")  # the ones a learner trains; the tiny ones are for tests


def get_config(preset: str, **overrides) -> ModelConfig:
    """Return a preset's config, optionally with fields replaced (e.g. dropout=0.1, vocab_size=...)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    return replace(PRESETS[preset], **overrides)


FAMILY_HEAD_SIZE = 64  # the course presets' head size (10m, 30m, 125m): a width alone implies its heads


def shaped_config(
    preset: str,
    n_layer: int | None = None,
    n_embd: int | None = None,
    n_head: int | None = None,
    ctx: int | None = None,
    **overrides,
) -> ModelConfig:
    """A preset with its shape overridden (--n-layer, --n-embd, --n-head, --ctx); None keeps the preset's.

    A width given without heads gets heads of the family's size (n_embd / 64). Each rule a shape breaks gets
    one line naming the flag.
    """
    base = get_config(preset, **overrides)
    if n_head is None and n_embd is not None:
        n_head = max(1, n_embd // FAMILY_HEAD_SIZE)
    shape = {"n_layer": n_layer, "n_embd": n_embd, "n_head": n_head, "ctx": ctx}
    for name, value in shape.items():
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    shape = {k: v for k, v in shape.items() if v is not None}
    width, heads = shape.get("n_embd", base.n_embd), shape.get("n_head", base.n_head)
    if width % heads:
        raise ValueError(f"--n-embd {width} is not divisible by --n-head {heads}: each head takes n_embd / n_head")
    if (width // heads) % 2:
        raise ValueError(
            f"head size {width} / {heads} = {width // heads} is odd: RoPE rotates pairs of channels, so "
            "n_embd / n_head must be even"
        )
    return replace(base, **shape)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 whatever the input dtype (small sums need the precision)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight.to(x.dtype)


def rope_tables(ctx: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, shape (ctx, head_dim/2): pair i turns at base**(-2i/d)."""
    cpu = torch.device("cpu")  # always made here, then moved with the model (on "meta" they would cost 70 MB)
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=cpu) / head_dim)
    angles = torch.outer(torch.arange(ctx, dtype=torch.float32, device=cpu), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (first half, second half) pair of x (B, heads, T, head_dim) by its position's angle."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim, self.dropout = cfg.n_head, cfg.head_dim, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        # (B, T, 3C) -> three tensors of (B, heads, T, head_dim)
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
        # Fused causal attention: the T x T score matrix is never stored for backward.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.proj(y))


class SwiGLU(nn.Module):
    """MLP of modern LLMs: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=False)
        self.up = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.n_embd, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.mlp_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int | None = 0) -> None:
        super().__init__()
        self.cfg = cfg
        # _weight: an empty matrix, not nn.Embedding's own normal init (reset_parameters below draws every weight;
        # on the meta device that init would import 70 MB of torch's compiler: see step.model_from_weights)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd, _weight=torch.empty(cfg.vocab_size, cfg.n_embd))
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.final_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied: one matrix reads tokens in and writes them out
        cos, sin = rope_tables(cfg.ctx, cfg.head_dim, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # How blocks are run in training: "none", "full", "sqrt" or "selective" (see minigpt.recompute).
        self.checkpointing = "none"
        # Token chunks of the loss head (minigpt.loss): 1 makes the whole logits; more never make them whole.
        self.loss_chunks = 1
        if seed is not None:  # None: no init, the caller brings the weights (minigpt.step.model_from_weights)
            self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Deterministic init from `seed` (a private generator: the global RNG is left alone).

        Normal(0, 0.02) for matrices and embeddings, and the two projections that write into the
        residual stream scaled by 1/sqrt(2 * n_layer) so the stream's variance does not grow with depth.
        """
        gen = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                std = resid_std if name.endswith(("attn.proj.weight", "mlp.down.weight")) else 0.02
                # Draw on the CPU so the same seed gives the same weights on every device.
                p.copy_(torch.randn(p.shape, generator=gen) * std)

    def num_params(self) -> int:
        """Parameters counted once (the tied embedding is one matrix)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, reduction: str = "mean"
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, vocab) and, given targets, the cross-entropy loss computed in fp32.

        `reduction="sum"` returns the summed loss over counted targets, which gradient accumulation
        divides by the number of target tokens in the whole window. Targets equal to IGNORE_INDEX
        (-100) do not count. With `loss_chunks` > 1 and targets, the loss is computed chunk by chunk
        (minigpt.loss.chunked_cross_entropy) and the logits are None: they never exist whole.
        """
        from minigpt.recompute import run_blocks  # here to keep the model readable on its own

        B, T = idx.shape
        if T > self.cfg.ctx:
            raise ValueError(f"sequence length {T} is longer than the model's ctx={self.cfg.ctx}")
        x = self.emb_dropout(self.tok_emb(idx))
        mode = self.checkpointing if (self.training and torch.is_grad_enabled()) else "none"
        x = run_blocks(self.blocks, x, self.rope_cos, self.rope_sin, mode)
        # Rebinding x lets the residual stream go before the loss head: the norm saved what its backward needs
        # (a bf16-pure residual, or an offloaded one, would otherwise stay alive through the logits for nothing)
        x = self.final_norm(x)
        if targets is not None and self.loss_chunks > 1:  # the (B, T, V) logits are never made whole
            return None, chunked_cross_entropy(x, self.lm_head.weight, targets, self.loss_chunks, reduction)
        logits = self.lm_head(x)
        del x  # the norm's output: lm_head saved its own (cast) copy for backward
        if targets is None:
            return logits, None
        return logits, cross_entropy_fp32(logits, targets, reduction)  # upcast to fp32 before the softmax

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append `max_new_tokens` sampled tokens to idx (B, T). temperature 0 means greedy.

        The window fed to the model is padded on the right to a multiple of SAMPLE_WINDOW_STEP tokens (at most ctx):
        causal attention keeps the padding out of the last real token's logits, and the model meets a few lengths
        instead of one more per token. A CPU's 16-bit matmuls (oneDNN) keep kernels made for every shape they meet:
        about 3 MiB per window length at 10m, 170 MiB over a 60-token sample of a bf16 model, measured.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            window = idx[:, -self.cfg.ctx :]
            length = window.size(1)
            padded = min(self.cfg.ctx, -(-length // SAMPLE_WINDOW_STEP) * SAMPLE_WINDOW_STEP)
            logits, _ = self(F.pad(window, (0, padded - length)))  # token 0 after the window: never attended to
            logits = logits[:, length - 1, :].float()
            if temperature == 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                scaled = logits / temperature
                if not torch.isfinite(scaled).all():  # a tiny temperature: inf - inf in softmax would be nan
                    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # the largest 0, the rest -inf
                logits = scaled
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                next_id = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat([idx, next_id], dim=1)
        self.train(was_training)
        return idx


def count_params(cfg: ModelConfig) -> int:
    """Parameter count from the config alone (no model built); equals GPT(cfg).num_params()."""
    C, H, L = cfg.n_embd, cfg.mlp_hidden, cfg.n_layer
    per_block = 4 * C * C + 3 * C * H + 2 * C  # qkv + proj, gate + up + down, two norms
    return cfg.vocab_size * C + L * per_block + C  # tied embedding, blocks, final norm
