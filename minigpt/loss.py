"""The loss head: the last hidden states -> logits over the vocabulary -> cross-entropy, computed in fp32.

GPT.forward ends here. The head's (tokens x vocabulary) tensors are the largest of a small model's step
(minigpt.memory.loss_head predicts their bytes), which is why it has a module of its own.

Two ways to compute it:
- `cross_entropy_fp32`: the whole (B, T, V) logits, upcast to fp32, then F.cross_entropy. Autograd keeps
  the fp32 log-softmax for backward and the backward makes (N, V) gradients: several N x V tensors at once.
- `chunked_cross_entropy`: the tokens in `chunks` slices. Each slice's logits are made, reduced to one
  log-sum-exp per token and dropped; the backward makes them again, one slice at a time, and turns them
  into that slice's gradient (softmax - one-hot). Only N/chunks x V exists at any moment. This is the idea
  of torchtune's chunked cross-entropy, of Liger Kernel's fused linear cross-entropy (Hsu et al. 2024,
  "Liger Kernel: Efficient Triton Kernels for LLM Training") and of Wijmans et al. 2024, "Cut Your Losses
  in Large-Vocabulary Language Models", written here in plain PyTorch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # targets with this value do not count in the loss (padding)


def cross_entropy_fp32(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of (B, T, V) logits against (B, T) targets, upcast to fp32 before the softmax.

    A low-precision model's loss is still computed in fp32: exp and log of 16-bit logits lose too much.
    Targets equal to IGNORE_INDEX do not count; reduction "sum" adds the losses of the counted targets.
    """
    return F.cross_entropy(
        logits.float().view(-1, logits.size(-1)),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction=reduction,
    )


def check_loss_chunks(chunks: int, tokens: int | None = None) -> None:
    """Raise ValueError unless `chunks` is a whole number from 1 up to the tokens of a micro-batch."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"--loss-chunks must be a whole number of at least 1 (1: no chunking), got {chunks!r}")
    if tokens is not None and chunks > tokens:
        raise ValueError(
            f"--loss-chunks {chunks} is more chunks than the {tokens} tokens of a micro-batch (batch x ctx): "
            f"use at most {tokens}"
        )


def chunk_rows(tokens: int, chunks: int) -> int:
    """Tokens in the largest chunk: torch.tensor_split gives the first chunks one token more when needed."""
    return -(-tokens // chunks)


def _compute_dtype(device_type: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype lm_head's matmul runs in: autocast's if it is on (bf16 or fp16), else the tensors' own."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else dtype


def _chunk_logits_fp32(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One chunk's logits (n, V) in the compute dtype, upcast to fp32; the 16-bit ones are dropped at once."""
    logits = h @ weight.t()
    return logits.float()  # fp32 in, fp32 out: the same tensor, no copy


class ChunkedCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of lm_head(hidden) against targets, over token chunks; no (N, V) tensor is kept.

    forward(hidden (N, C), weight (V, C), targets (N,), chunks) -> the loss summed over counted targets, fp32.
    Kept for backward: hidden in the compute dtype, one fp32 log-sum-exp per token, the targets.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunks: int):
        dtype = _compute_dtype(hidden.device.type, hidden.dtype)
        with torch.autocast(hidden.device.type, enabled=False):  # every cast below is explicit
            h, w = hidden.to(dtype), weight.to(dtype)  # autocast's casts, made by hand (h is kept for backward)
            lse = torch.empty(h.size(0), dtype=torch.float32, device=h.device)
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            counted = targets != IGNORE_INDEX
            for h_c, t_c, c_c, lse_c in zip(*(x.tensor_split(chunks) for x in (h, targets, counted, lse))):
                logits = _chunk_logits_fp32(h_c, w)  # (n, V) fp32
                picked = logits.gather(1, t_c.clamp(min=0).unsqueeze(1)).squeeze(1)  # the target's logit
                # log-sum-exp = max + log(sum(exp(logits - max))), computed in place on the chunk's logits
                top = logits.amax(dim=1, keepdim=True)
                lse_c.copy_(logits.sub_(top).exp_().sum(dim=1).log_().add_(top.squeeze(1)))
                total += torch.where(c_c, lse_c - picked, 0.0).sum()  # -log softmax at the target
                del logits
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.chunks, ctx.dtype, ctx.hidden_dtype = chunks, dtype, hidden.dtype
        return total

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor):
        h, weight, targets, lse = ctx.saved_tensors
        w = weight.to(ctx.dtype)  # autocast: the 16-bit copy again (the forward's was not kept)
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # summed over chunks in fp32
        # d loss / d logit_j = grad_total * (softmax_j - [j == target]) on counted rows, 0 on ignored ones
        scale = torch.where(targets != IGNORE_INDEX, grad_total.float(), 0.0)
        slices = (x.tensor_split(ctx.chunks) for x in (h, targets, lse, scale, grad_h))
        for h_c, t_c, lse_c, s_c, gh_c in zip(*slices):
            probs = _chunk_logits_fp32(h_c, w).sub_(lse_c.unsqueeze(1)).exp_()  # softmax, made again
            probs.scatter_add_(1, t_c.clamp(min=0).unsqueeze(1), probs.new_full((len(t_c), 1), -1.0))
            g = probs.mul_(s_c.unsqueeze(1)).to(ctx.dtype)  # back to the compute dtype, as autograd's would be
            del probs
            torch.mm(g, w, out=gh_c)  # this chunk's rows of d hidden
            if g.dtype == torch.float32:
                grad_w.addmm_(g.t(), h_c)
            else:  # a 16-bit matmul cannot add into an fp32 sum: its (V, C) result, cast to fp32, then the sum
                grad_w += (g.t() @ h_c).float()  # (the cast add_ would make inside itself anyway)
            del g
        return grad_h.to(ctx.hidden_dtype), grad_w.to(weight.dtype), None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunks: int, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of lm_head(hidden) against targets in `chunks` token chunks: equal to cross_entropy_fp32.

    hidden (B, T, C) is the final norm's output, weight (V, C) lm_head's. Under autocast each chunk's matmul
    runs in 16 bits and its log-softmax in fp32, as in cross_entropy_fp32. "mean" divides by the counted targets.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    flat_targets = targets.reshape(-1)
    check_loss_chunks(chunks, flat_targets.numel())
    total = ChunkedCrossEntropy.apply(hidden.reshape(-1, hidden.size(-1)), weight, flat_targets, chunks)
    if reduction == "sum":
        return total
    return total / (flat_targets != IGNORE_INDEX).sum()  # 0/0 = nan when nothing counts, as F.cross_entropy
