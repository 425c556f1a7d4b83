"""Chapter 9 exercises: the levers beyond mixed precision, accumulation and checkpointing.

Each function is one exercise; its docstring states the task. Everything here runs in fp32 on the CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def quantize_blockwise(x: torch.Tensor, block: int, power: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 9.1: block-wise absmax quantization of a tensor to signed 8-bit codes.

    Flatten x (fp32, row-major order) and cut it into blocks of `block` values (the last block may be shorter).
    Each block stores one fp32 scale, its largest |value| (absmax), and each value as the int8 code
        q = round(127 * sign(x) * (|x| / scale) ** (1 / power))
    where round is torch.round: to the nearest integer, and a value exactly halfway between two integers to
    the even one (63.5 -> 64, -63.5 -> -64). power 1 is a linear code; power 2 or 4 gives small values finer
    steps (what a second moment needs). A block of zeros has scale 0 and codes 0 (no division by zero).

    Returns: a tuple (codes, scales): codes an int8 tensor of x.numel() values (flat), scales an fp32 tensor
        of ceil(x.numel() / block) values, one per block.
    In place: nothing; x is left as it was.
    Raises: ValueError if block or power is less than 1.
    """
    # BEGIN SOLUTION 9.1: pad to whole blocks, scale = |x|.amax per block, round(127 * (|x|/scale)**(1/p))
    if block < 1 or power < 1:
        raise ValueError(f"block and power must be at least 1, got block={block}, power={power}")
    flat = x.detach().reshape(-1).float()
    n = flat.numel()
    n_blocks = -(-n // block)
    padded = torch.zeros(n_blocks * block, dtype=torch.float32)
    padded[:n] = flat
    blocks = padded.view(n_blocks, block)
    scales = blocks.abs().amax(dim=1)
    ratio = blocks.abs() / scales.clamp_min(torch.finfo(torch.float32).tiny)[:, None]
    codes = torch.round(127 * ratio ** (1 / power)) * blocks.sign()
    return codes.reshape(-1)[:n].to(torch.int8), scales
    # END SOLUTION


def dequantize_blockwise(
    codes: torch.Tensor, scales: torch.Tensor, block: int, power: int = 1, shape: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Exercise 9.1: the fp32 values that quantize_blockwise's codes and scales stand for.

    x = sign(q) * (|q| / 127) ** power * scale of q's block, reshaped to `shape` (default: flat). The codes
    are read flat, in blocks of `block` (the last block may be shorter), as quantize_blockwise wrote them.

    Returns: an fp32 tensor of codes.numel() values, flat, or of shape `shape` when one is given.
    In place: nothing; codes and scales are left as they were.
    Raises: ValueError if block or power is less than 1.
    Raises: ValueError if scales does not hold one value per block of codes, ceil(codes.numel() / block).
    """
    # BEGIN SOLUTION 9.1: value = sign(q) * (|q| / 127) ** power * scales[i // block], reshaped to shape
    if block < 1 or power < 1:
        raise ValueError(f"block and power must be at least 1, got block={block}, power={power}")
    if scales.numel() != -(-codes.numel() // block):
        raise ValueError(
            f"{codes.numel()} codes in blocks of {block} need {-(-codes.numel() // block)} scales, got {scales.numel()}"
        )
    q = codes.reshape(-1).float()
    per_value = scales.float().repeat_interleave(block)[: q.numel()]
    x = q.sign() * (q.abs() / 127) ** power * per_value
    return x.reshape(shape) if shape is not None else x
    # END SOLUTION


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunks: int
) -> torch.Tensor:
    """Exercise 9.2: the mean cross-entropy of the logits hidden @ weight.T, never holding all the logits.

    hidden (N, C) and weight (V, C) require grad, targets (N,) are token ids. The answer must equal
    F.cross_entropy(hidden @ weight.T, targets), value and gradients, while no more than one chunk's
    logits (about N / chunks rows of V) exist at a time, in the forward and in the backward: split the
    tokens into `chunks` pieces of nearly equal size (as tensor_split does) and, for each, make its logits,
    reduce them to its summed loss and drop them. Autograd would keep each piece's (n, V) log-softmax for
    backward: keep only the piece's inputs and make its logits again in backward (chapter 6's checkpoint, or
    an autograd.Function).

    Returns: a 0-dim fp32 tensor, the mean loss over the N tokens, whose backward fills hidden.grad and
        weight.grad.
    In place: nothing (until you call backward on the loss).
    Raises: ValueError if chunks is less than 1.
    """

    # BEGIN SOLUTION 9.2: per chunk: checkpoint(a function of (h, w, t) -> summed F.cross_entropy); / N
    def piece_loss(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(h @ w.t(), t, reduction="sum")

    if chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    total = hidden.new_zeros(())
    for h, t in zip(hidden.tensor_split(chunks), targets.tensor_split(chunks)):
        total = total + checkpoint(piece_loss, h, weight, t, use_reentrant=False)
    return total / targets.numel()
    # END SOLUTION


def state_bytes(model: torch.nn.Module, optimizer: str = "adamw", in_backward: bool = False) -> dict[str, int]:
    """Exercise 9.3: the static bytes of an fp32 model's training step with a given set of levers.

    Return {"weights", "gradients", "optimizer"} in bytes, from the model's parameter tensors (its buffers,
    such as a batch norm's running statistics, are not counted):
      weights    4 bytes a value (fp32)
      gradients  4 bytes a value for every parameter; with in_backward (the optimizer step fused into
                 backward, each gradient freed once its parameter is stepped) only the largest single
                 parameter tensor's gradient is ever alive
      optimizer  "adamw": two fp32 moments, 8 bytes a value. "adamw8bit" (block-wise, blocks of 256):
                 per tensor of n values, each moment is n one-byte codes plus one fp32 scale per block,
                 2 * (n + 4 * ceil(n / 256)); a tensor under 4096 values keeps fp32 moments, 8 * n
    A parameter shared by two modules (the tied embedding) is one tensor: count it once.

    Returns: a dict {"weights": int, "gradients": int, "optimizer": int}, each a number of bytes.
    In place: nothing; the model is left as it was.
    Raises: ValueError if optimizer is not "adamw" or "adamw8bit" (spelled exactly so, in lower case).
    """
    # BEGIN SOLUTION 9.3: model.parameters() yields a shared tensor once; sum per tensor, max for in_backward
    sizes = [p.numel() for p in model.parameters()]
    if optimizer == "adamw":
        moments = 8 * sum(sizes)
    elif optimizer == "adamw8bit":
        moments = sum(8 * n if n < 4096 else 2 * (n + 4 * -(-n // 256)) for n in sizes)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose 'adamw' or 'adamw8bit'")
    gradients = 4 * (max(sizes) if in_backward else sum(sizes))
    return {"weights": 4 * sum(sizes), "gradients": gradients, "optimizer": moments}
    # END SOLUTION
