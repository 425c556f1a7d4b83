import math

import pytest
import torch

from minigpt.formats import (
    FORMATS,
    decode_bits,
    format_rows,
    formats_table,
    missing_formats,
    relative_error,
    round_trip,
    smallest_update_that_survives,
    update_is_lost,
)

PRESENT = [(name, getattr(torch, attr)) for name, attr in FORMATS if attr and hasattr(torch, attr)]

# ---------------------------------------------------------------------------------------- formats table


def test_table_numbers_are_torch_finfo_for_every_present_dtype():
    rows = {row["name"]: row for row in format_rows()}
    assert PRESENT, "this torch has none of the listed dtypes?"
    for name, dtype in PRESENT:
        fi = torch.finfo(dtype)
        row = rows[name]
        # exact equality: the table must copy finfo, not re-derive or round it
        assert (row["max"], row["eps"], row["smallest normal"], row["bits"]) == (
            fi.max,
            fi.eps,
            fi.smallest_normal,
            fi.bits,
        ), name


def test_bits_add_up_and_eps_matches_mantissa():
    for row in format_rows():
        signed = row["name"] != "fp8 e8m0fnu"
        assert int(signed) + row["exponent bits"] + row["mantissa bits"] == row["bits"], row["name"]
        assert row["eps"] == 2.0 ** -row["mantissa bits"], row["name"]


def test_known_layouts():
    rows = {row["name"]: (row["exponent bits"], row["mantissa bits"]) for row in format_rows()}
    expected = {
        "fp32": (8, 23),
        "tf32": (8, 10),
        "fp16": (5, 10),
        "bf16": (8, 7),
        "fp8 e4m3fn": (4, 3),
        "fp8 e5m2": (5, 2),
        "fp8 e8m0fnu": (8, 0),
    }
    assert {k: rows[k] for k in expected if k in rows} == {k: v for k, v in expected.items() if k in rows}


def test_smallest_subnormal_is_the_smallest_positive_value():
    rows = {row["name"]: row for row in format_rows()}
    for name, dtype in PRESENT:
        tiny = rows[name]["smallest subnormal"]
        if tiny is None:  # no subnormals: the smallest positive value is the smallest normal
            assert rows[name]["mantissa bits"] == 0
            continue
        t = torch.tensor([tiny, tiny / 4], dtype=torch.float64).to(dtype).to(torch.float64)
        assert t[0].item() == tiny, name  # representable exactly
        assert t[1].item() == 0.0, name  # a quarter of it rounds to zero: nothing smaller exists


def test_tf32_is_described_not_a_dtype():
    tf32 = next(row for row in format_rows() if row["name"] == "tf32")
    assert "not a torch dtype" in tf32["note"]
    assert tf32["smallest normal"] == torch.finfo(torch.float32).smallest_normal  # fp32's exponent range


def test_missing_dtype_is_skipped_with_a_note(monkeypatch):
    monkeypatch.delattr(torch, "float8_e8m0fnu", raising=False)
    assert "fp8 e8m0fnu" in missing_formats()
    assert "fp8 e8m0fnu" not in [row["name"] for row in format_rows()]
    table = formats_table()
    assert "Skipped" in table and "fp8 e8m0fnu" in table.split("Skipped")[1]
    assert "bf16" in table


# ---------------------------------------------------------------------------------------- bit decoder


def test_decode_one_in_bf16():
    layout = decode_bits(1.0, torch.bfloat16)
    assert (layout.sign, layout.exponent_bits, layout.mantissa_bits) == (0, "01111111", "0000000")
    assert (layout.biased_exponent, layout.unbiased_exponent, layout.kind) == (127, 0, "normal")
    assert str(layout) == "0 | 01111111 | 0000000  = 1.0 (bf16)"


def test_decode_minus_two_in_fp32():
    layout = decode_bits(-2.0, torch.float32)
    assert (layout.sign, layout.exponent_bits, layout.mantissa_bits) == (1, "10000000", "0" * 23)
    assert (layout.stored_value, layout.unbiased_exponent) == (-2.0, 1)


def test_decode_fp16_max_and_overflow():
    top = decode_bits(65504, torch.float16)
    assert (top.exponent_bits, top.mantissa_bits, top.kind, top.stored_value) == (
        "11110",
        "1111111111",
        "normal",
        65504.0,
    )
    over = decode_bits(65520, torch.float16)  # half-way to the next power: rounds to even = inf
    assert (over.exponent_bits, over.mantissa_bits, over.kind) == ("11111", "0000000000", "inf")
    assert over.stored_value == math.inf


def test_decode_fp16_subnormal():
    layout = decode_bits(2.0**-24, torch.float16)
    assert (layout.exponent_bits, layout.mantissa_bits, layout.kind) == ("00000", "0000000001", "subnormal")
    assert (layout.stored_value, layout.unbiased_exponent) == (2.0**-24, -14)


def test_decode_one_third_in_bf16():
    layout = decode_bits(1 / 3, "bf16")
    assert (layout.exponent_bits, layout.mantissa_bits) == ("01111101", "0101011")
    assert layout.stored_value == 0.333984375  # 1.0101011b * 2**-2, the nearest bf16 to 1/3


def test_decode_fp8_formats():
    e4m3 = decode_bits(1.0, "fp8 e4m3fn")
    assert (e4m3.sign, e4m3.exponent_bits, e4m3.mantissa_bits) == (0, "0111", "000")
    e5m2 = decode_bits(-2.0, "fp8 e5m2")
    assert (e5m2.sign, e5m2.exponent_bits, e5m2.mantissa_bits) == (1, "10000", "00")
    if hasattr(torch, "float8_e8m0fnu"):
        e8m0 = decode_bits(0.5, "fp8 e8m0fnu")
        assert (e8m0.sign, e8m0.exponent_bits, e8m0.mantissa_bits, e8m0.unbiased_exponent) == (None, "01111110", "", -1)


def test_decode_zero_and_nan_and_bad_format():
    assert decode_bits(0.0, torch.float16).kind == "zero"
    assert decode_bits(-0.0, torch.float16).sign == 1
    assert decode_bits(float("nan"), torch.float32).kind == "nan"
    with pytest.raises(ValueError, match="unknown float format"):
        decode_bits(1.0, "fp12")
    with pytest.raises(ValueError, match="not a floating-point"):
        decode_bits(1.0, torch.int32)


# ---------------------------------------------------------------------------------------- rounding helpers


def test_round_trip_and_relative_error():
    x = torch.tensor([1 / 3, 1.0, 1000.1])
    back = round_trip(x, torch.bfloat16)
    assert back.dtype == x.dtype and back[1] == 1.0 and back[0] != x[0]
    # round to nearest loses at most half an ulp: relative error <= eps / 2
    for dtype in (torch.bfloat16, torch.float16):
        assert 0 < relative_error(x, dtype) <= torch.finfo(dtype).eps / 2
    assert relative_error(0.5, torch.bfloat16) == 0.0  # a power of two is exact
    assert relative_error(torch.zeros(3), torch.float16) == 0.0


def test_lost_update():
    assert update_is_lost(1.0, 1e-3, torch.bfloat16)  # 1e-3 < half of bf16's gap above 1 (2**-7)
    assert not update_is_lost(1.0, 1e-3, torch.float32)
    assert not update_is_lost(1.0, 1e-2, torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("w", [1.0, 3.0, -0.75, 1000.0])
def test_smallest_update_that_survives_is_the_threshold(w, dtype):
    threshold = smallest_update_that_survives(w, dtype)
    # in w's binade [2**k, 2**(k+1)) values are eps * 2**k apart (none of these w is a negative power of 2)
    assert threshold == torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(abs(w))) / 2
    # nudge by threshold * 2**-10, about |w| * eps * 2**-11: far below the gap, and above the fp32 rounding
    # (|w| * 2**-24) that torch's fp64 -> bf16/fp16 cast goes through, so the tie cannot blur the answer
    assert not update_is_lost(w, threshold * (1 + 2**-10), dtype)
    assert update_is_lost(w, threshold * (1 - 2**-10), dtype)


def test_a_tie_goes_to_the_even_neighbour():
    even, odd = 1.0, 1.0 + 2**-7  # bf16 mantissas 0000000 and 0000001
    assert decode_bits(odd, torch.bfloat16).mantissa_bits == "0000001"
    assert update_is_lost(even, smallest_update_that_survives(even, torch.bfloat16), torch.bfloat16)
    assert not update_is_lost(odd, smallest_update_that_survives(odd, torch.bfloat16), torch.bfloat16)
