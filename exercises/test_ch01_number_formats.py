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


@pytest.mark.exercise("1.1", points=3)
def test_decode_float_matches_the_bits(answers, contract):
    for name in FORMATS:
        for value in VALUES:
            expected = decode_bits(value, FORMATS[name])
            want = (str(expected.sign), expected.exponent_bits, expected.mantissa_bits)
            got = answers.decode_float(value, FORMATS[name])
            assert tuple(got) == want, (
                f"decode_float({value!r}, {name}) returned {got}, expected {want} "
                f"(sign | {len(want[1])} exponent bits | {len(want[2])} mantissa bits)"
            )
    # Exercise 1.1's contract is checked here, not in a test of its own: tests/test_grading_attacks.py expects
    # 1.1 to be one test (one message when an answer ends the grader's process).
    contract.check(answers, CONTRACTS["1.1"]())


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


@pytest.mark.exercise("1.2", points=1)
def test_1_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["1.2"]())


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


@pytest.mark.exercise("1.3", points=1)
def test_1_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["1.3"]())


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


@pytest.mark.exercise("1.4", points=1)
def test_1_4_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["1.4"]())


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract).
#
# Every comparison is exact: rounding into a format is IEEE-754 round-to-nearest-even, the same on every CPU,
# and every update below is itself a value of its format (so rounding it first, as `tensor + update` does in
# the 16-bit formats, changes nothing) or is far from any tie. The many small calls of an exercise go to its
# worker in a few batches (Calls, _each): one visit each, where a case per call would cost a round trip each.
# Each promise of a docstring gets a case of its own, a plain call.

from minigpt.grading.contract import Case  # noqa: E402

NOT_A_FORMAT = "Raises: ValueError if dtype is not torch.float32, torch.float16 or torch.bfloat16."
NOT_FINITE = "Raises: ValueError if w is inf or nan once stored in `dtype` (a w too large for fp16 becomes inf there)."
NOTHING_IN_PLACE = "In place: nothing."


class Calls(tuple):
    """(text, args, kwargs) of calls of one function, made in one visit to the worker by _each; shown by count."""

    def __repr__(self) -> str:
        return f"<{len(self)} calls>"


def _calls(function: str, inputs: list, **kwargs: object) -> Calls:
    """Calls of function on each tuple of positional arguments in inputs, each with the same keyword arguments."""
    texts = [", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]) for args in inputs]
    return Calls((f"{function}({text})", tuple(args), dict(kwargs)) for text, args in zip(texts, inputs))


def _each(function, calls: Calls, zero_sign: bool = False) -> dict:
    """{call: what it returned, or {"raised ValueError": True} for the kind of error it raised}. zero_sign: a
    returned zero comes with its sign (0.0 == -0.0, so the value alone cannot tell them apart)."""
    results = {}
    for text, args, kwargs in calls:
        try:
            value = function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - a documented error is an outcome like a value
            if any(isinstance(e, NotImplementedError) for e in _chain(error)):
                raise  # not done yet, not a wrong answer
            kind = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
            results[text] = {f"raised {kind}": True}  # the kind of error, as the grader compares it
            continue
        if zero_sign and isinstance(value, (int, float)) and value == 0:
            value = (value, "zero with the sign of", math.copysign(1.0, value))
        results[text] = value
    return results


def _each_with_zero_sign(function, calls: Calls) -> dict:
    return _each(function, calls, zero_sign=True)


def _chain(error: BaseException | None):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _edges(dtype: torch.dtype) -> dict[str, float]:
    """The values of a format where shortcuts go wrong: its step near 1, its smallest and largest values."""
    info = torch.finfo(dtype)
    eps, tiny, big = info.eps, info.smallest_normal, info.max
    return {"eps": eps, "tiny": tiny, "sub": tiny * eps, "max": big, "ulp_max": big * eps / (2 - eps)}


def _cases_1_1() -> list[Case]:
    cases = []
    for dtype in FORMATS.values():
        e = _edges(dtype)
        eps, sub = e["eps"], e["sub"]
        values = [
            1.0,
            -2.5,
            0.1,
            -1 / 3,
            300.0,
            1 + eps / 2,  # a tie: rounds down to 1.0, whose last mantissa bit is 0
            1 + 3 * eps / 2,  # a tie: rounds up to 1 + 2 eps (even), not down to 1 + eps (odd)
            -(1 + 3 * eps / 2),  # the same tie, negative
            1 + eps / 2 + eps / 8,  # just above a tie: up (exact in fp32, so no double rounding)
            e["max"],
            -e["max"],
            e["max"] + e["ulp_max"] / 2,  # a tie above the largest value: inf
            -e["max"] - e["ulp_max"] / 4,  # nearer the largest value: stays finite
            e["tiny"],  # the smallest normal value
            e["tiny"] - sub,  # the largest subnormal
            -3 * sub,  # a negative subnormal
            sub,  # the smallest subnormal
            sub / 2,  # a tie between 0 and the smallest subnormal: 0
            1.5 * sub,  # a tie between 1 and 2 smallest subnormals: 2 (even)
            1e-300,  # below every format: 0
            0.0,
            -0.0,
            math.inf,
            -math.inf,
            math.nan,
        ]
        cases.append(Case("decode_float", (_calls("decode_float", [(v, dtype) for v in values]),), drive=_each))
    other = [(1.0, torch.float64), (1.0, torch.int16), (-2.0, torch.float8_e5m2)]
    cases.append(Case("decode_float", (_calls("decode_float", other),), drive=_each))
    returns = (
        "Returns: a tuple of three str of 0s and 1s, (sign, exponent, mantissa): 1 + 8 + 23 characters for fp32, "
        "1 + 5 + 10 for fp16, 1 + 8 + 7 for bf16."
    )
    cases.append(Case("decode_float", (-0.75, torch.float16), promise=(returns, NOTHING_IN_PLACE)))
    cases.append(Case("decode_float", (1.0, torch.float64), promise=NOT_A_FORMAT))
    return cases


def _cases_1_2() -> list[Case]:
    bits = []
    for dtype in FORMATS.values():
        e = _edges(dtype)
        values = [1.0, -2.5, 0.1, 300.0, -e["max"], e["tiny"], e["tiny"] - e["sub"], -3 * e["sub"], 0.0, -0.0]
        for value in values + [math.inf, -math.inf]:
            layout = decode_bits(value, dtype)
            bits.append((str(layout.sign), layout.exponent_bits, layout.mantissa_bits))
    bits += [  # other widths: the bias and the fraction follow from the lengths
        ("0", "0111", "000"),  # 1.0 in a format with a 4-bit exponent and a 3-bit mantissa
        ("1", "1000", "101"),  # -3.25 there
        ("0", "0000", "011"),  # a subnormal there
        ("0", "1111", "000"),  # inf there
        ("1", "1111", "010"),  # nan there
        ("0", "10", "1"),  # 3.0 in a 4-bit format
        ("1", "00", "1"),  # its negative subnormal, -0.5
        ("0", "0", "1"),  # a one-bit exponent: bias 0, only subnormals: 1.0
        ("0", "1", "0"),  # and inf
        ("1", "011111", "00001"),  # a 6-bit exponent
        ("0", "10000000000", "1" + "0" * 51),  # fp64's 3.0
        ("1", "00000000000", "0" * 51 + "1"),  # fp64's smallest subnormal, negative
        ("0", "11111111110", "1" * 52),  # fp64's largest value
        ("1", "11111", "0000000001"),  # a nan
    ]
    bad = [
        ("01", "10000", "0000000000"),  # a sign of two bits
        ("11", "10000", "0000000000"),
        ("", "10000", "0000000000"),
        ("1 ", "10000", "0000000000"),  # int(..., 2) reads these four; they are no bit strings
        ("0", "1_0000", "00"),
        ("0", "10000", "0b11"),
        ("0", " 10000", "00"),
        ("0", "10000", "0120"),
        ("0", "", "0000000000"),
        ("0", "10000", ""),
    ]
    returns = (
        'Returns: float, the value the bits stand for: the sign counts for zero (sign "1" gives -0.0) and for inf '
        "(-inf); any nan is nan."
    )
    raises = (
        'Raises: ValueError if sign is not "0" or "1", or if exponent or mantissa is empty or holds anything but '
        "the digits 0 and 1."
    )
    return [
        Case("value_from_bits", (_calls("value_from_bits", bits),), drive=_each_with_zero_sign),
        Case("value_from_bits", (_calls("value_from_bits", bad),), drive=_each),
        Case("value_from_bits", ("1", "10000", "1000000000"), promise=(returns, NOTHING_IN_PLACE)),
        Case("value_from_bits", ("10", "01111", "0000000000"), promise=raises),
        Case("value_from_bits", ("0", "01111", "00000000 0"), promise=raises),
    ]


def _cases_1_3() -> list[Case]:
    cases = []
    for dtype in FORMATS.values():
        e = _edges(dtype)
        eps, sub = e["eps"], e["sub"]
        pairs = [
            (1.0, eps / 2),  # a tie: back to 1.0 (even): lost
            (1.0, 3 * eps / 4),  # past the tie: survives
            (1.0, eps / 4),  # lost
            (1.0, -eps / 4),  # just below 1 the gap is eps/2: a tie, back to 1.0: lost
            (1.0, -3 * eps / 8),  # past that tie: survives, though |update| < half the gap above
            (1.0, -eps / 2),  # exactly the value below: survives
            (1 + eps, eps / 2),  # a tie from an odd mantissa: up to the even 1 + 2 eps: survives
            (1 + eps, -eps / 2),  # a tie down to the even 1.0: survives
            (1 + eps, eps / 4),  # lost
            (-1.0, eps / 4),  # a tie towards zero, back to -1.0: lost
            (-1.0, 3 * eps / 8),  # survives
            (-1.0, -eps / 2),  # a tie away from zero, back to -1.0: lost
            (2.0, -0.75 * eps),  # below 2 the gap is eps: survives (half the gap above is eps too)
            (-2.0, 0.75 * eps),  # the same, negative
            (0.1, eps / 64),  # w is no value of the format: round it first
            (-0.7, eps / 8),
            (300.0, 1.0),
            (0.0, sub),  # the smallest subnormal changes 0
            (e["tiny"], -sub),  # down to the largest subnormal
            (1.0, 0.0),
            (e["max"], e["max"]),  # the sum overflows to inf: w changed
            (e["max"], e["ulp_max"] / 2),  # a tie above the largest value: inf, changed
            (e["max"], e["ulp_max"] / 4),  # lost
            (1.0, -1.0),  # down to 0
            (1.0, math.inf),  # inf and nan change w
            (-1.0, -math.inf),
            (-3.0, math.nan),
        ]
        cases.append(Case("update_is_lost", (_calls("update_is_lost", pairs, dtype=dtype),), drive=_each))
    bad = [(1.0, 0.5, torch.float64), (1.0, 0.5, torch.int32), (1e5, 1.0, torch.float16)]
    bad += [(65520.0, 1.0, torch.float16), (math.inf, -1.0, torch.float32), (math.nan, 0.0, torch.bfloat16)]
    cases.append(Case("update_is_lost", (_calls("update_is_lost", bad),), drive=_each))
    returns = (
        "Returns: bool, True when the sum stored in `dtype` equals w stored in `dtype` (the update did nothing); an "
        "update that makes the sum inf or nan changes w, so it is not lost (False)."
    )
    cases.append(Case("update_is_lost", (0.25, 2.0**-12, torch.bfloat16), promise=(returns, NOTHING_IN_PLACE)))
    cases.append(Case("update_is_lost", (0.25, 2.0**-7), {"dtype": torch.bfloat16}, promise=returns))
    cases.append(Case("update_is_lost", (1.0, 2.0**-30, torch.float64), promise=NOT_A_FORMAT))
    cases.append(Case("update_is_lost", (-1e39, 1.0, torch.float32), promise=NOT_FINITE))
    return cases


def _cases_1_4() -> list[Case]:
    cases = []
    for dtype in FORMATS.values():
        e = _edges(dtype)
        weights = [
            1.0,
            -1.0,  # the next value up from -1.0 is nearer than from 1.0
            2.0,
            -2.0,
            1.5,
            -1.5,
            0.1,  # no value of the format: round it first
            -0.7,
            300.0,
            -3.0,
            0.0,  # half the smallest subnormal
            -0.0,
            e["sub"],
            -e["sub"],  # the next value up is -0.0
            e["tiny"],
            -e["tiny"],  # the next value up is the largest subnormal
            e["tiny"] - e["sub"],
            e["max"],  # the next value up is inf
            -e["max"],
            1e-300,  # 0 in every format
        ]
        inputs = [(w,) for w in weights]
        cases.append(
            Case(
                "smallest_update_that_survives",
                (_calls("smallest_update_that_survives", inputs, dtype=dtype),),
                drive=_each,
            )
        )
    bad = [(1.0, torch.float64), (1.0, torch.int32), (1e5, torch.float16), (65520.0, torch.float16)]
    bad += [(math.inf, torch.bfloat16), (-math.inf, torch.float32), (math.nan, torch.float16)]
    cases.append(Case("smallest_update_that_survives", (_calls("smallest_update_that_survives", bad),), drive=_each))
    returns = "Returns: float (a Python float, not a tensor), half that gap."
    cases.append(Case("smallest_update_that_survives", (-4.0, torch.float16), promise=(returns, NOTHING_IN_PLACE)))
    cases.append(Case("smallest_update_that_survives", (0.5,), {"dtype": torch.int64}, promise=NOT_A_FORMAT))
    cases.append(Case("smallest_update_that_survives", (4e38, torch.float32), promise=NOT_FINITE))
    return cases


CONTRACTS = {"1.1": _cases_1_1, "1.2": _cases_1_2, "1.3": _cases_1_3, "1.4": _cases_1_4}
