"""The loss head: the last hidden states -> logits over the vocabulary -> cross-entropy, computed in fp32.

GPT.forward ends here. The head's (tokens x vocabulary) tensors are the largest of a small model's step
(minigpt.memory.loss_head predicts their bytes), which is why it has a module of its own.
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
