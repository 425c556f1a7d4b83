"""Grades chapter 1: decoding a float's bits, and when a weight update is lost.

Float formats are exact arithmetic (IEEE-754 rounding is the same on every CPU and GPU), so these tests
compare exactly with minigpt.formats, except where noted.
"""

import math

import pytest
import torch

from minigpt.formats import decode_bits, smallest_update_that_survives, update_is_lost

CHAPTER = "ch01_number_formats"
HINTS = {  # the hints of solutions/ch01_number_formats.py, shown under a wrong answer
    "1.1": "view the tensor as an int of the same width, format it as binary digits, then split",
    "1.2": "bias = 2**(len(exponent) - 1) - 1; normal numbers have an implicit leading 1",
    "1.3": "round w into the dtype, add, round the sum into the dtype, then compare",
    "1.4": "half the gap to the next value above w in this dtype (torch.nextafter)",
}
FORMATS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# normal, negative, inexact, huge (inf in fp16), fp16-subnormal, zero, -0, a value below every format and an
# fp32 and bf16 subnormal
VALUES = [1.0, -2.5, 0.1, 1 / 3, 65504.0, 1e38, 3e-5, 5.9e-8, 0.0, -0.0, 1e-46, 300.0, -0.02, -1e-40]


@pytest.mark.exercise("1.1", points=2)
def test_decode_float_matches_the_bits(answers):
    for name in FORMATS:
        for value in VALUES:
            expected = decode_bits(value, FORMATS[name])
            want = (str(expected.sign), expected.exponent_bits, expected.mantissa_bits)
            got = answers.decode_float(value, FORMATS[name])
            assert tuple(got) == want, (
                f"decode_float({value!r}, {name}) returned {got}, expected {want} "
                f"(sign | {len(want[1])} exponent bits | {len(want[2])} mantissa bits)"
            )


@pytest.mark.exercise("1.2", points=2)
def test_value_from_bits_inverts_the_decoding(answers):
    for name in FORMATS:
        for value in VALUES + [float("inf"), -float("inf")]:
            layout = decode_bits(value, FORMATS[name])
            got = answers.value_from_bits(str(layout.sign), layout.exponent_bits, layout.mantissa_bits)
            hint = ""
            if layout.kind == "subnormal":
                hint = " (a subnormal: exponent field 0 means 0.mantissa * 2**(1 - bias))"
            assert got == layout.stored_value and math.copysign(1, got) == math.copysign(1, layout.stored_value), (
                f"value_from_bits({layout.sign!r}, {layout.exponent_bits!r}, {layout.mantissa_bits!r}) returned "
                f"{got!r}, expected {layout.stored_value!r}{hint}"
            )


@pytest.mark.exercise("1.2", points=1)
def test_value_from_bits_knows_nan(answers):
    assert math.isnan(answers.value_from_bits("0", "11111", "1000000000")), "exponent all ones, mantissa != 0: nan"


@pytest.mark.exercise("1.3", points=2)
def test_update_is_lost_rounds_in_the_format(answers):
    for name in FORMATS:
        dtype = FORMATS[name]
        for w in [1.0, 0.02, -0.7, 300.0, 1e-3]:
            threshold = smallest_update_that_survives(w, dtype)
            # Half and twice the threshold: far from the tie at exactly the threshold, where rounding to
            # nearest-even (and fp64 -> fp32 -> bf16 double rounding) could go either way.
            for update in (0.5 * threshold, 2 * threshold, -2 * threshold):
                want = update_is_lost(w, update, dtype)
                got = answers.update_is_lost(w, update, dtype)
                assert bool(got) == want, (
                    f"update_is_lost({w}, {update:.3g}, {name}) returned {got}, expected {want}: "
                    + ("the sum rounds back to w in this format" if want else "this update changes w")
                )


@pytest.mark.exercise("1.4", points=2)
def test_smallest_update_is_half_the_gap(answers):
    for name in FORMATS:
        for w in [1.0, 1.5, 0.02, 300.0, -3.0, 6e-5, 0.0]:
            want = smallest_update_that_survives(w, FORMATS[name])
            got = answers.smallest_update_that_survives(w, FORMATS[name])
            assert isinstance(got, float), (
                f"smallest_update_that_survives({w}, {name}) returned {got!r}: return a Python float (.item() of a "
                f"one-element tensor), not a tensor"
            )
            # Exact up to fp64 rounding of the difference of two nearby floats.
            assert got == pytest.approx(want, rel=1e-12), (
                f"smallest_update_that_survives({w}, {name}) returned {got!r}, expected {want!r}: half the gap "
                f"between w and the next {name} value above it (the gap grows with w's exponent)"
            )
