"""Chapter 1 exercises: number formats, one bit at a time.

Each function is one exercise; its docstring states the task. Work with torch only: the point is to do
by hand what minigpt.formats does for you (the grader compares your answers with it).
"""

from __future__ import annotations

import math

import torch

# The formats of this chapter; every exercise that takes a dtype takes one of these.
FORMATS = (torch.float32, torch.float16, torch.bfloat16)
# The integer type of the same width as each float format: viewing a tensor as it keeps the bytes.
INT_OF_WIDTH = {32: torch.int32, 16: torch.int16}


def decode_float(value: float, dtype: torch.dtype) -> tuple[str, str, str]:
    """Exercise 1.1: round `value` into `dtype` (fp32, fp16 or bf16) and return its bits as three strings.

    Return (sign, exponent, mantissa), e.g. decode_float(1.0, torch.bfloat16) == ("0", "01111111", "0000000").
    Store the value in a one-element tensor of `dtype`, view it as an integer of the same width
    (tensor.view(torch.int16) keeps the bytes, no conversion), and split its binary digits. The number
    of mantissa bits is -log2(torch.finfo(dtype).eps); the exponent has the bits that are left after the sign.
    The rounding is torch's: to the nearest value of `dtype`, and a tie (exactly halfway) to the neighbour whose
    last mantissa bit is 0. Too large a value becomes inf, too small a one a subnormal or zero; -0.0 and -inf
    keep their sign bit; nan comes out as torch stores it (exponent all ones, mantissa 1 then 0s).

    Returns: a tuple of three str of 0s and 1s, (sign, exponent, mantissa): 1 + 8 + 23 characters for fp32,
      1 + 5 + 10 for fp16, 1 + 8 + 7 for bf16.
    In place: nothing.
    Raises: ValueError if dtype is not torch.float32, torch.float16 or torch.bfloat16.
    """
    # BEGIN SOLUTION 1.1: view the tensor as an int of the same width, format it as binary digits, then split
    if dtype not in FORMATS:
        raise ValueError(f"decode_float knows fp32, fp16 and bf16, not {dtype}")
    width = torch.finfo(dtype).bits
    mantissa_bits = round(-math.log2(torch.finfo(dtype).eps))
    exponent_bits = width - 1 - mantissa_bits
    stored = torch.tensor([value], dtype=torch.float64).to(dtype)
    pattern = stored.view(INT_OF_WIDTH[width]).item() & ((1 << width) - 1)  # as an unsigned int
    bits = format(pattern, f"0{width}b")
    return bits[0], bits[1 : 1 + exponent_bits], bits[1 + exponent_bits :]
    # END SOLUTION


def value_from_bits(sign: str, exponent: str, mantissa: str) -> float:
    """Exercise 1.2: the number that a sign, exponent and mantissa bit string stand for (the inverse of 1.1).

    The format follows from the lengths: bias = 2**(len(exponent) - 1) - 1, E = int(exponent, 2),
    M = int(mantissa, 2), m = len(mantissa). Then
      normal (0 < E < all ones):  (-1)**s * (1 + M / 2**m) * 2**(E - bias)   (the leading 1 is implicit)
      subnormal (E == 0):         (-1)**s * (M / 2**m) * 2**(1 - bias)       (no implicit 1, same exponent as E=1)
      E all ones:                 inf (M == 0) or nan (M != 0)
    e.g. value_from_bits("0", "01111111", "1000000") == 1.5. Any lengths work, not only those of fp32, fp16
    and bf16: ("0", "1000", "100") is a tiny 8-bit format's 3.0, ("0", "10000000000", "0" * 52) fp64's 2.0.

    Returns: float, the value the bits stand for: the sign counts for zero (sign "1" gives -0.0) and for
      inf (-inf); any nan is nan.
    In place: nothing.
    Raises: ValueError if sign is not "0" or "1", or if exponent or mantissa is empty or holds anything but the
      digits 0 and 1.
    """
    # BEGIN SOLUTION 1.2: bias = 2**(len(exponent) - 1) - 1; normal numbers have an implicit leading 1
    if sign not in ("0", "1"):
        raise ValueError(f"the sign is one bit, '0' or '1', not {sign!r}")
    for name, bits in (("exponent", exponent), ("mantissa", mantissa)):
        if not bits or set(bits) - {"0", "1"}:
            raise ValueError(f"the {name} must be a non-empty string of 0s and 1s, not {bits!r}")
    s, e, m = int(sign, 2), int(exponent, 2), int(mantissa, 2)
    bias, fraction = 2 ** (len(exponent) - 1) - 1, m / 2 ** len(mantissa)
    if e == 2 ** len(exponent) - 1:
        return math.nan if m else (-1) ** s * math.inf
    if e == 0:
        return (-1) ** s * fraction * 2.0 ** (1 - bias)
    return (-1) ** s * (1 + fraction) * 2.0 ** (e - bias)
    # END SOLUTION


def update_is_lost(w: float, update: float, dtype: torch.dtype) -> bool:
    """Exercise 1.3: does `w + update` round back to `w` when weights are stored in `dtype`?

    This is why weights kept in bf16 stop learning: a small enough step does nothing at all. Store w in
    `dtype`, add the update, store the sum in `dtype`, compare. Python floats are fp64: the comparison
    has to happen after rounding into `dtype`, not before (w itself may not be a value of `dtype`).
    Let torch round: an update of exactly half the gap to a neighbour is a tie, which goes to the neighbour
    whose last mantissa bit is 0, and just below a power of two the gap is half as wide as just above it.

    Returns: bool, True when the sum stored in `dtype` equals w stored in `dtype` (the update did nothing);
      an update that makes the sum inf or nan changes w, so it is not lost (False).
    In place: nothing.
    Raises: ValueError if dtype is not torch.float32, torch.float16 or torch.bfloat16.
    Raises: ValueError if w is inf or nan once stored in `dtype` (a w too large for fp16 becomes inf there).
    """
    # BEGIN SOLUTION 1.3: round w into the dtype, add, round the sum into the dtype, then compare
    if dtype not in FORMATS:
        raise ValueError(f"update_is_lost knows fp32, fp16 and bf16, not {dtype}")
    w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
    if not torch.isfinite(w_stored).all():
        raise ValueError(f"w={w} is {w_stored.item()} in {dtype}: a weight must be a finite value")
    total = (w_stored.double() + update).to(dtype)
    return bool(torch.equal(total, w_stored))
    # END SOLUTION


def smallest_update_that_survives(w: float, dtype: torch.dtype) -> float:
    """Exercise 1.4: the threshold above which a positive update to `w` (stored in `dtype`) changes it.

    It is half the gap between w and the next representable value above it: anything smaller rounds
    back to w. The gap grows with |w| (it is eps * 2**exponent of w, for a normal w), so a big weight
    loses bigger updates. Find the next value with torch.nextafter in `dtype` (or the bit pattern + 1).
    Round w into `dtype` first. "Above" means towards +inf, whatever the sign of w: from -1.0 the next value
    up is nearer than from 1.0 (the gap below a power of two is half the gap above it). From 0.0 (or -0.0) it
    is the smallest subnormal; from the largest finite value it is inf, and so is the answer.

    Returns: float (a Python float, not a tensor), half that gap.
    In place: nothing.
    Raises: ValueError if dtype is not torch.float32, torch.float16 or torch.bfloat16.
    Raises: ValueError if w is inf or nan once stored in `dtype` (a w too large for fp16 becomes inf there).
    """
    # BEGIN SOLUTION 1.4: half the gap to the next value above w in this dtype (torch.nextafter)
    if dtype not in FORMATS:
        raise ValueError(f"smallest_update_that_survives knows fp32, fp16 and bf16, not {dtype}")
    w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
    if not torch.isfinite(w_stored).all():
        raise ValueError(f"w={w} is {w_stored.item()} in {dtype}: a weight must be a finite value")
    above = torch.nextafter(w_stored, torch.tensor([math.inf], dtype=dtype))
    return (above.double() - w_stored.double()).item() / 2
    # END SOLUTION
