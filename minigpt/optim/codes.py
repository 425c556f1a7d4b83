"""Block-wise 8-bit codes: a tensor as one byte per value plus one fp32 scale per block of BLOCK values.

Block-wise quantization, as in Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization" (the
method of bitsandbytes and of torchao's AdamW8bit): a moment tensor is cut into blocks of BLOCK values;
each block stores its largest |value| in fp32 (the scale) and every value as a one-byte code of
value / scale, a number in [-1, 1]. One outlier then only coarsens its own block, not the whole tensor.

The code. A linear code (code = round(255 * v / scale)) has one step of scale / 255 everywhere, so any
value under half a step, scale / 510, becomes 0. That is fatal for the second moment v: AdamW divides by
sqrt(v), and a v rounded to 0 turns the update m / (sqrt(v) + eps) into m / eps, many orders of magnitude
too large. The libraries use a non-linear code (bitsandbytes' "dynamic" code with an exponent, which torchao's
AdamW8bit stores as a 256-entry map) whose steps are small near 0 and large near the scale. This one is a power
code, the simplest non-linear one: v is stored as round(255 * (v / scale) ** (1/4)), so a code step is a constant
step of v's fourth root: the smallest v kept is scale * 255**-4 (about 2e-10 of its block's largest), and
sqrt(v), what the update divides by, is off by at most 1 / code (under 3% for any v within four decades
of its block's largest). The first moment m is signed and only multiplies the update: it gets a signed
square-root code, round(127 * sign(m) * |m / scale| ** (1/2)).

"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 256  # values sharing one fp32 scale (bitsandbytes since v0.44, and torchao; Dettmers et al. used 2048)


@dataclass(frozen=True)
class PowerCode:
    """x in [-1, 1] -> the byte round(levels * sign(x) * |x| ** (1/power)); back: sign(q) * (|q| / levels) ** power.

    The power is 1, 2 or 4: its root is one or two square roots and its power one or two squarings, which
    every device does fast (a general pow is ten times slower on a CPU).
    """

    power: int  # 1 is a linear code; larger powers give small values finer steps
    levels: int  # codes run from -levels to levels (signed) or 0 to levels
    dtype: torch.dtype  # int8 for a signed moment, uint8 for a non-negative one

    def __post_init__(self) -> None:
        if self.power not in (1, 2, 4):
            raise ValueError(f"a PowerCode's power must be 1, 2 or 4, got {self.power}")

    @property
    def square_roots(self) -> int:
        return self.power.bit_length() - 1  # |x| ** (1/4) = sqrt(sqrt(|x|))


M_CODE = PowerCode(power=2, levels=127, dtype=torch.int8)  # the first moment: signed
V_CODE = PowerCode(power=4, levels=255, dtype=torch.uint8)  # the second moment: never negative
LINEAR_CODE = PowerCode(power=1, levels=255, dtype=torch.uint8)  # what not to use for v (see the docstring)


def n_blocks(numel: int) -> int:
    """Blocks of BLOCK values in a tensor of `numel` values: the last one may be partial."""
    return -(-numel // BLOCK)


def _block_absmax(x: torch.Tensor) -> torch.Tensor:
    """The largest |value| of each block of a 1-D tensor (its last block may be partial).

    max(largest, -smallest) per block: two reductions, and no |x| tensor as large as x.
    """
    full = x.numel() // BLOCK * BLOCK
    blocks, tail = x[:full].view(-1, BLOCK), x[full:]
    absmax = torch.maximum(blocks.amax(dim=1), blocks.amin(dim=1).neg_())
    if tail.numel():
        absmax = torch.cat([absmax, torch.maximum(tail.amax(), tail.amin().neg_()).reshape(1)])
    return absmax


def _scale_blocks_(x: torch.Tensor, per_block: torch.Tensor) -> torch.Tensor:
    """Multiply each block of a 1-D tensor by its own factor, in place."""
    full = x.numel() // BLOCK * BLOCK
    x[:full].view(-1, BLOCK).mul_(per_block[: full // BLOCK, None])
    if full < x.numel():
        x[full:].mul_(per_block[-1])
    return x


def quantize_(
    x: torch.Tensor, code: PowerCode, codes: torch.Tensor, scales: torch.Tensor, scratch: torch.Tensor | None = None
) -> None:
    """Write the codes and block scales of the 1-D fp32 tensor x into `codes` and `scales`.

    `scratch`, a tensor like x that may be overwritten (AdamW8bit passes the update's sqrt(v)), saves a
    temporary as large as x.
    """
    absmax = _block_absmax(x)
    scales.copy_(absmax)
    y = torch.abs(x, out=scratch) if scratch is not None else x.abs()
    _scale_blocks_(y, absmax.clamp_min_(torch.finfo(torch.float32).tiny).reciprocal_())  # |x| / scale, in [0, 1]
    for _ in range(code.square_roots):
        y.sqrt_()
    y.mul_(code.levels).round_()
    codes.copy_(y.copysign_(x) if code.dtype.is_signed else y)  # the copy casts to the code's integer type


def dequantize(
    codes: torch.Tensor,
    scales: torch.Tensor,
    code: PowerCode,
    out: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> torch.Tensor:
    """The fp32 values that `codes` (1-D) and their block `scales` stand for.

    `out`, an fp32 tensor as long as `codes`, receives them (else a new tensor does); `scratch`, one like it
    that may be overwritten, holds a signed code's |q| (else a temporary does).
    """
    x = out.copy_(codes) if out is not None else codes.float()  # q (the copy casts the integers to fp32)
    for _ in range(code.square_roots):
        # q ** 2, keeping q's sign for a signed code: x * |x| is sign(x) * x ** 2 exactly (a product's sign is
        # the factors' sign, its magnitude that of |x| * |x|), one pass cheaper than squaring then copysign
        x.mul_(torch.abs(x, out=scratch) if code.dtype.is_signed else x)
    return _scale_blocks_(x, scales / code.levels**code.power)  # sign(q) * (|q| / levels) ** power * scale


def quantize(x: torch.Tensor, code: PowerCode) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of any fp32 tensor, flattened: quantize_ into new tensors, x left as it was."""
    flat = x.detach().reshape(-1).float()
    codes = torch.empty(flat.numel(), dtype=code.dtype, device=x.device)
    scales = torch.empty(n_blocks(flat.numel()), dtype=torch.float32, device=x.device)
    quantize_(flat, code, codes, scales)
    return codes, scales
