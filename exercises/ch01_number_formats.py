# Chapter 1 exercises, generated from solutions/ch01_number_formats.py by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k 1.1      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
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
    raise NotImplementedError(
        "Exercise 1.1: view the tensor as an int of the same width, format it as binary digits, then split"
        " - see chapters/01_number_formats.ipynb"
    )


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
    raise NotImplementedError(
        "Exercise 1.2: bias = 2**(len(exponent) - 1) - 1; normal numbers have an implicit leading 1"
        " - see chapters/01_number_formats.ipynb"
    )


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
    raise NotImplementedError(
        "Exercise 1.3: round w into the dtype, add, round the sum into the dtype, then compare"
        " - see chapters/01_number_formats.ipynb"
    )


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
    raise NotImplementedError(
        "Exercise 1.4: half the gap to the next value above w in this dtype (torch.nextafter)"
        " - see chapters/01_number_formats.ipynb"
    )
