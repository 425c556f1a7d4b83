"""The loss head's bytes: the (tokens x vocabulary) tensors that lm_head and cross-entropy make and keep.

Per token the head makes a row of V logits, cross-entropy upcasts it to fp32 and keeps its log-softmax,
and the backward makes two fp32 gradients of it at once, then the logits' own gradient. With a vocabulary
of thousands, these rows outweigh a whole block's activations (chapter 2 measures it).

With --loss-chunks K (minigpt.loss.ChunkedCrossEntropy) only one chunk of n = ceil(N / K) rows exists at a
time, in the forward and again in the backward, and what is kept for backward is one fp32 log-sum-exp per
token instead of the (N, V) log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

from minigpt.loss import chunk_rows
from minigpt.memory.breakdown import Widths
from minigpt.model import ModelConfig


@dataclass(frozen=True)
class LossHeadBytes:
    """The loss head's short-lived (N, V) buffers of one step, in bytes (N = batch x ctx tokens)."""

    logits_held: int  # the (N, V) logits in the compute dtype, alive in the forward (the loop drops them after)
    logits_upcast: int  # autocast: cross-entropy's fp32 copy of the 16-bit logits, in the forward
    saved_log_softmax: int  # fp32 log-softmax, an activation, freed once cross-entropy's backward is done
    loss_grads: int  # cross-entropy's backward: nll_loss's and log_softmax's fp32 (N, V) gradients, at once
    logits_grad: int  # then the gradient of the logits themselves, in the compute dtype
    chunk: int = 0  # chunked: one chunk's logits, and their fp32 upcast under autocast (forward and backward)


def loss_head_bytes(cfg: ModelConfig, tokens: int, w: Widths, chunks: int = 1) -> LossHeadBytes:
    """The loss head's buffers for `tokens` tokens at the widths of one precision mode, in `chunks` chunks."""
    V = cfg.vocab_size
    if chunks > 1:  # nothing (N, V) exists: one chunk at a time, made, reduced and dropped
        upcast = 4 if w.compute == 2 else 0
        return LossHeadBytes(0, 0, 0, 0, 0, chunk=(w.compute + upcast) * V * chunk_rows(tokens, chunks))
    return LossHeadBytes(
        logits_held=w.compute * V * tokens,
        logits_upcast=4 * V * tokens if w.compute == 2 else 0,
        saved_log_softmax=4 * V * tokens,
        loss_grads=2 * 4 * V * tokens,
        logits_grad=w.compute * V * tokens,
    )


def loss_head_rows(cfg: ModelConfig, chunks: int = 1) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of what the loss keeps for backward (activation_table's rows)."""
    if chunks > 1:
        return [
            ("log-sum-exp of each token's logits, fp32 (saved by the chunked loss)", 4, 0),
            ("targets, int64 (saved by the loss)", 8, 0),
        ]
    return [
        ("log-softmax of the logits, fp32 (saved by cross-entropy)", 4 * cfg.vocab_size, 0),
        ("targets, int64 (saved by the loss)", 8, 0),
        ("loss normalizer, one fp32", 0, 4),
    ]


def tied_sum_bytes(cfg: ModelConfig, w: Widths, chunks: int = 1) -> int:
    """The tied embedding's two gradients summed into a new (V, C) tensor, or 0 where autograd adds in place.

    It adds in place when lm_head's gradient is a plain tensor of its own: autocast's fp32 cast of the 16-bit
    one, or the chunked loss's fp32 sum. Plain lm_head's gradient is a view (the transpose of its matmul's).
    """
    return 0 if (w.autocast or chunks > 1) else w.model * cfg.vocab_size * cfg.n_embd


# The chunked loss's small tensors, measured on torch 2.13's CPU kernels: per token (the ignore mask, the
# backward's scale) and per chunk row (the target's logit, the max, the sums), at the head's worst moment.
CHUNKED_FORWARD_SMALL = (1, 5 * 4)  # (bytes per token, bytes per chunk row)
CHUNKED_BACKWARD_SMALL = (4 + 1, 2 * 8)


@dataclass(frozen=True)
class HeadMoments:
    """What the loss head adds on top of the activations at its worst moments, and its `logits` term."""

    forward: int  # at the worst point of the head's forward (besides the activations and the weight copies)
    backward: int  # at the worst point of its backward (besides the activations and the blocks' weight copies)
    logits: int  # MemoryBreakdown.logits: the (N, V) or (n, V) tensors alive at once
    grads: int  # activation_grads at the head: lm_head's weight gradient (and, chunked, d hidden) as it is made


def head_moments(cfg: ModelConfig, tokens: int, w: Widths, chunks: int, tied_grad: int, lm_head_grad_16bit: int):
    """The loss head's moments: plain cross-entropy's (N, V) tensors, or one chunk's (n, V) at a time.

    `tied_grad` is lm_head's (V, C) gradient in the model's dtype, `lm_head_grad_16bit` autocast's 16-bit one.
    """
    head, V, C, a = loss_head_bytes(cfg, tokens, w, chunks), cfg.vocab_size, cfg.n_embd, w.compute
    lm_head_copy = 2 * V * C if w.autocast else 0  # autocast's 16-bit copy of the tied weight
    if chunks == 1:
        # cross-entropy's two fp32 gradients; then lm_head's matmul makes its weight's gradient beside the logits'
        # gradient (the log-softmax freed); under autocast that one is 16 bits, and autocast frees the logits'
        # gradient and the weight's copy before it casts it to fp32 (which waits for the embedding's backward)
        at_matmul = head.logits_grad - head.saved_log_softmax + (lm_head_grad_16bit or tied_grad)
        at_cast = lm_head_grad_16bit + tied_grad - head.saved_log_softmax if lm_head_grad_16bit else 0
        return HeadMoments(
            forward=head.logits_held + head.logits_upcast,
            # the graph keeps lm_head's 16-bit weight copy for backward, until that cast
            backward=max(lm_head_copy + max(head.loss_grads, at_matmul), at_cast),
            logits=max(head.logits_held + head.logits_upcast, head.loss_grads),
            grads=tied_grad + lm_head_grad_16bit,
        )
    n = chunk_rows(tokens, chunks)
    fp32_hidden = 4 * C * tokens if w.autocast else 0  # the final norm's fp32 output, cast to h for the matmuls
    forward = head.chunk + fp32_hidden + CHUNKED_FORWARD_SMALL[0] * tokens + CHUNKED_FORWARD_SMALL[1] * n
    # backward: d hidden (N, C) and d weight (V, C, summed in fp32) fill up chunk by chunk, next to one chunk's
    # softmax; a 16-bit chunk's (V, C) product and its fp32 cast are made before they are added to the fp32 sum
    grad_sums = a * C * tokens + 4 * V * C + CHUNKED_BACKWARD_SMALL[0] * tokens
    chunk_product = (2 + 4) * V * C if a == 2 else 0
    loop = max(head.chunk, a * V * n + chunk_product) + CHUNKED_BACKWARD_SMALL[1] * n
    # after the loop, the gradients go back to the inputs' dtypes: fp32 d hidden under autocast, bf16 d weight
    # in bf16-pure, each while the other sum is still there
    cast_back = max(fp32_hidden, 2 * V * C if w.model == 2 else 0)
    return HeadMoments(
        forward=forward,
        backward=lm_head_copy + grad_sums + max(loop, cast_back),
        logits=head.chunk,
        grads=grad_sums + max(chunk_product, cast_back),
    )
