"""The loss head's bytes: the (tokens x vocabulary) tensors that lm_head and cross-entropy make and keep.

Per token the head makes a row of V logits, cross-entropy upcasts it to fp32 and keeps its log-softmax,
and the backward makes two fp32 gradients of it at once, then the logits' own gradient. With a vocabulary
of thousands, these rows outweigh a whole block's activations (chapter 2 measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

from minigpt.memory.breakdown import Widths
from minigpt.model import ModelConfig


@dataclass(frozen=True)
class LossHeadBytes:
    """The loss head's short-lived (N, V) buffers of one step, in bytes (N = batch x ctx tokens)."""

    logits_held: int  # the (N, V) logits in the compute dtype: the loop holds them until backward ends
    logits_upcast: int  # autocast: cross-entropy's fp32 copy of the 16-bit logits, in the forward
    saved_log_softmax: int  # fp32 log-softmax, an activation, freed once cross-entropy's backward is done
    loss_grads: int  # cross-entropy's backward: nll_loss's and log_softmax's fp32 (N, V) gradients, at once
    logits_grad: int  # then the gradient of the logits themselves, in the compute dtype


def loss_head_bytes(cfg: ModelConfig, tokens: int, w: Widths) -> LossHeadBytes:
    """The loss head's buffers for `tokens` tokens at the widths of one precision mode."""
    V = cfg.vocab_size
    return LossHeadBytes(
        logits_held=w.compute * V * tokens,
        logits_upcast=4 * V * tokens if w.compute == 2 else 0,
        saved_log_softmax=4 * V * tokens,
        loss_grads=2 * 4 * V * tokens,
        logits_grad=w.compute * V * tokens,
    )


def loss_head_rows(cfg: ModelConfig) -> list[tuple[str, int, int]]:
    """(tensor, bytes per token, fixed bytes) of what the loss keeps for backward (activation_table's rows)."""
    return [
        ("log-softmax of the logits, fp32 (saved by cross-entropy)", 4 * cfg.vocab_size, 0),
        ("targets, int64 (saved by the loss)", 8, 0),
        ("loss normalizer, one fp32", 0, 4),
    ]
