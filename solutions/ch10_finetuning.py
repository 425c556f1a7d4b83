"""Chapter 10 exercises: fine-tuning fewer parameters, with LoRA adapters and a 4-bit NF4 base.

Each function is one exercise; its docstring states its task. Shapes follow torch.nn.Linear: a weight W is
(out, in), a layer computes x @ W.T for x of shape (..., in). A LoRA adapter of rank r is two matrices,
A (r, in) and B (out, r), scaled by alpha / r (Hu et al. 2021).
"""

from __future__ import annotations

import torch

from minigpt.quantize import NF4_CODE  # the 16 NF4 values, sorted, from -1 to 1 (Dettmers et al. 2023)


def lora_forward(
    x: torch.Tensor, weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Exercise 10.1: the output of a frozen linear layer plus its LoRA adapter.

    y = x @ W.T + (alpha / r) * (x @ A.T) @ B.T, with r = lora_A.shape[0] (the rank) and alpha / r a true
    division (alpha 6 with rank 4 scales by 1.5). Never form the (out, in) product B @ A: go through the
    r-wide middle, which is what makes the adapter cheap. With B all zeros (how LoRA starts), y must equal
    the frozen layer's output x @ W.T exactly.

    Returns: a new fp32 tensor y of shape (..., out), through which backward reaches x, lora_A and lora_B.
    In place: nothing; x, weight, lora_A and lora_B are left as they were.
    Raises: ValueError if lora_A is not (r, in) with r at least 1, or lora_B is not (out, r), for the (out, in)
        weight.
    """
    # BEGIN SOLUTION 10.1: y = x @ W.T, plus ((x @ A.T) * (alpha / r)) @ B.T with r = A.shape[0]
    d_out, d_in = weight.shape
    if lora_A.dim() != 2 or lora_A.shape[0] < 1 or lora_A.shape[1] != d_in or lora_B.shape != (d_out, len(lora_A)):
        raise ValueError(
            f"for a ({d_out}, {d_in}) weight, lora_A must be (r, {d_in}) with r >= 1 and lora_B ({d_out}, r); "
            f"got {tuple(lora_A.shape)} and {tuple(lora_B.shape)}"
        )
    rank = lora_A.shape[0]
    return x @ weight.T + ((x @ lora_A.T) * (alpha / rank)) @ lora_B.T
    # END SOLUTION


def merge_lora(weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exercise 10.2: one plain (out, in) matrix that computes what the frozen weight plus its adapter compute.

    Return W + (alpha / r) * B @ A as a new tensor (leave `weight` unchanged: the base is shared by every
    adapter trained on it), with r = lora_A.shape[0] and alpha / r a true division. x @ merged.T then equals
    lora_forward(x, W, A, B, alpha) up to rounding.

    Returns: a new fp32 (out, in) tensor, sharing no memory with weight, even when B is all zeros.
    In place: nothing; weight, lora_A and lora_B are left as they were.
    Raises: ValueError if lora_A is not (r, in) with r at least 1, or lora_B is not (out, r), for the (out, in)
        weight.
    """
    # BEGIN SOLUTION 10.2: a new tensor W + (alpha / r) * (B @ A), r = A.shape[0]; do not add in place
    d_out, d_in = weight.shape
    if lora_A.dim() != 2 or lora_A.shape[0] < 1 or lora_A.shape[1] != d_in or lora_B.shape != (d_out, len(lora_A)):
        raise ValueError(
            f"for a ({d_out}, {d_in}) weight, lora_A must be (r, {d_in}) with r >= 1 and lora_B ({d_out}, r); "
            f"got {tuple(lora_A.shape)} and {tuple(lora_B.shape)}"
        )
    rank = lora_A.shape[0]
    return weight + (alpha / rank) * (lora_B @ lora_A)
    # END SOLUTION


def nf4_quantize(weight: torch.Tensor, block: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 10.3: NF4-quantize a weight in blocks of `block` consecutive values (in row-major order).

    Returns (codes, scales): scales holds one fp32 value per block, the block's absmax (its largest |value|;
    an all-zero block gets scale 1); codes is a uint8 tensor of the weight's shape holding, for each value,
    the index 0..15 of the NF4_CODE entry nearest to value / scale. A value exactly halfway between two NF4
    values takes the lower index (torch.argmin returns the first of equal distances). Blocks run on across
    rows: a (4, 24) weight in blocks of 32 has 3 blocks. (Keep one index per byte here: packing two per
    byte, as minigpt.quantize does, is a separate step.)

    Returns: a tuple (codes, scales): codes a uint8 tensor of the weight's shape, scales an fp32 tensor of
        weight.numel() / block values.
    In place: nothing; weight is left as it was.
    Raises: ValueError if block is less than 1 or does not divide weight.numel() into whole blocks.
    """
    # BEGIN SOLUTION 10.3: blocks = weight.reshape(-1, block); scale = absmax; argmin |v/scale - NF4_CODE|
    if block < 1 or weight.numel() % block:
        raise ValueError(f"blocks of {block} do not divide the weight's {weight.numel()} values into whole blocks")
    blocks = weight.detach().float().reshape(-1, block)
    scales = blocks.abs().amax(dim=1)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    normed = blocks / scales[:, None]
    codes = (normed[..., None] - NF4_CODE).abs().argmin(dim=-1).to(torch.uint8)
    return codes.reshape(weight.shape), scales
    # END SOLUTION


def nf4_dequantize(codes: torch.Tensor, scales: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Exercise 10.4: the fp32 weight that nf4_quantize's (codes, scales) stand for.

    Each value is NF4_CODE[code] times its block's scale (blocks of `block` consecutive codes, in row-major
    order); the result has the codes' shape. Round trip: |weight - nf4_dequantize(*nf4_quantize(weight))|
    is at most half the widest gap between two neighbouring NF4 values, times the block's scale.

    Returns: an fp32 tensor of the codes' shape.
    In place: nothing; codes and scales are left as they were.
    Raises: ValueError if block is less than 1 or does not divide codes.numel(), or if scales does not hold
        codes.numel() / block values.
    """
    # BEGIN SOLUTION 10.4: NF4_CODE[codes.long()], reshaped to (-1, block), times scales[:, None]
    if block < 1 or codes.numel() % block or scales.numel() != codes.numel() // block:
        raise ValueError(
            f"{codes.numel()} codes in blocks of {block} need {codes.numel() // max(block, 1)} scales "
            f"(and block must divide the codes into whole blocks); got {scales.numel()} scales"
        )
    values = NF4_CODE[codes.long()].reshape(-1, block) * scales[:, None]
    return values.reshape(codes.shape)
    # END SOLUTION
