"""Storing frozen weights in 8 or 4 bits: int8 absmax codes and the NF4 code of QLoRA, with their scales.

A frozen weight only has to be read, so it can be stored small and turned back into floats when a layer
needs it. Both codes here split the weight into blocks of `block` consecutive values (or one block per
output row: per channel, `block=0`) and keep one fp32 scale per block, the block's largest |value| (absmax):
  - int8: value ~ scale * code / 127, code an integer in [-127, 127]: 1 byte + 4 / block per value;
  - nf4:  value ~ scale * NF4_CODE[code], code 4 bits (two per byte): 0.5 byte + 4 / block per value.
NF4 (4-bit NormalFloat, Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs") places its
16 values at quantiles of a normal distribution, where trained weights mostly are, instead of evenly.
(QLoRA also quantizes the scales themselves, "double quantization"; this module keeps them in fp32.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch

BASE_DTYPES = ("fp32", "bf16", "int8", "nf4")
QUANTIZED = ("int8", "nf4")
DEFAULT_BLOCK = 64  # QLoRA's block size for the NF4 scales


def nf4_code() -> torch.Tensor:
    """The 16 values of NF4, computed as QLoRA defines them: quantiles of N(0, 1), normalized to [-1, 1].

    The code must hold an exact 0 (padding and zeros stay exact) and be as dense as possible where values
    are common. So it takes 8 quantiles for the positive half and 7 for the negative half, both from
    probability delta = 1 - (1/30 + 1/32) / 2 (the centres of the outermost bins of 15 and 16 equal
    bins) down to 1/2, drops the duplicate zero, and divides by the largest, so the code spans [-1, 1].
    """
    delta = 1 - 0.5 * (1 / 30 + 1 / 32)
    positive = torch.special.ndtri(torch.linspace(delta, 0.5, 9, dtype=torch.float64)[:-1])  # 8 values > 0
    negative = -torch.special.ndtri(torch.linspace(delta, 0.5, 8, dtype=torch.float64)[:-1])  # 7 values < 0
    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    return (values / values.max()).float()


NF4_CODE = nf4_code()


@dataclass
class Quantized:
    """A weight stored as codes and per-block scales; `shape` and `block` say how to unpack it."""

    kind: str  # "int8" or "nf4"
    codes: torch.Tensor  # int8: one per value; nf4: uint8, two 4-bit codes per byte
    scales: torch.Tensor  # fp32, one per block
    shape: tuple[int, ...]
    block: int  # values per scale

    @property
    def nbytes(self) -> int:
        return self.codes.numel() * self.codes.element_size() + self.scales.numel() * 4


def block_size(shape: tuple[int, int], block: int) -> int:
    """Values per scale for a (rows, cols) weight: `block`, or one row (per channel) when block is 0."""
    size = shape[1] if block == 0 else block
    numel = shape[0] * shape[1]
    if size < 1 or numel % size:
        raise ValueError(
            f"--quant-block {block} does not divide a {shape[0]}x{shape[1]} weight into whole blocks; "
            f"choose a divisor of {shape[1]} (64 fits every preset), or 0 for one scale per output channel"
        )
    if size % 2:  # nf4 packs two codes per byte within a block
        raise ValueError(f"--quant-block must be even, got {size}")
    return size


def quantize(weight: torch.Tensor, kind: str, block: int = DEFAULT_BLOCK) -> Quantized:
    """Quantize a 2-D weight to `kind` ("int8" or "nf4") with one absmax scale per block of `block` values."""
    if kind not in QUANTIZED:
        raise ValueError(f"unknown quantized dtype {kind!r}; choose one of {', '.join(QUANTIZED)}")
    size = block_size(tuple(weight.shape), block)
    blocks = weight.detach().float().reshape(-1, size)
    scales = blocks.abs().amax(dim=1)
    # an all-zero block gets scale 1 (any scale represents zeros exactly) so the division below is safe
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    normed = blocks / scales[:, None]  # every value now in [-1, 1]
    if kind == "int8":
        codes = torch.round(normed * 127).to(torch.int8)
    else:  # the nearest of the 16 NF4 values, then two 4-bit indices per byte (first one in the high bits)
        # the midpoints between neighbouring values split [-1, 1] into 16 bins, one per value: a bin number is
        # the nearest value's index, found without a (values x 16) table of distances beside the weight
        midpoints = ((NF4_CODE[1:] + NF4_CODE[:-1]) / 2).to(normed.device)
        idx = torch.bucketize(normed, midpoints, out_int32=True).to(torch.uint8)
        codes = (idx[:, 0::2] << 4) | idx[:, 1::2]
    return Quantized(kind, codes.contiguous(), scales.contiguous(), tuple(weight.shape), size)


_unpacking = threading.local()  # set while a frozen weight is being unpacked (see unpacking())


@contextlib.contextmanager
def unpacking() -> Iterator[None]:
    """Marks the tensors made inside as a weight unpacked for one matmul (minigpt.memory's meters count them so)."""
    depth = getattr(_unpacking, "depth", 0)
    _unpacking.depth = depth + 1
    try:
        yield
    finally:
        _unpacking.depth = depth


def is_unpacking() -> bool:
    """Whether the current thread is inside unpacking()."""
    return getattr(_unpacking, "depth", 0) > 0


def dequantize(codes: torch.Tensor, scales: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The floats a quantized weight stands for, in `dtype`: codes times their block's scale.

    The code's kind follows from the codes' dtype: int8 codes, or uint8 bytes holding two NF4 codes each.
    """
    if codes.dtype == torch.int8:
        values = codes.float().mul_(scales[:, None] / 127)  # in place: one float per value at a time
    else:  # unpack the two 4-bit indices of each byte, then look them up in the 16-value table
        indices = torch.stack([codes >> 4, codes & 0xF], dim=-1).int()
        values = NF4_CODE.to(codes.device).index_select(0, indices.flatten()).view(codes.shape[0], -1)
        del indices  # freed before the scaling, which works in place
        values.mul_(scales[:, None])
    return values.view(shape).to(dtype)


def quantized_bytes(shape: tuple[int, int], kind: str, block: int = DEFAULT_BLOCK) -> int:
    """Bytes a (rows, cols) weight takes in `kind`: its codes and one fp32 scale per block."""
    numel = shape[0] * shape[1]
    per_value = {"fp32": 4.0, "bf16": 2.0, "int8": 1.0, "nf4": 0.5}[kind]
    scales = 0 if kind not in QUANTIZED else 4 * (numel // block_size(shape, block))
    return int(numel * per_value) + scales


def max_error(kind: str, scale: float) -> float:
    """The largest |value - dequantized value| in a block whose absmax is `scale`: half the widest gap."""
    if kind == "int8":
        return scale / 127 / 2
    return scale * float((NF4_CODE[1:] - NF4_CODE[:-1]).max()) / 2
