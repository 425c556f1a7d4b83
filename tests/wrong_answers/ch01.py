"""Wrong answers to chapter 1's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 1.1 decode_float
    "1.1: bf16 rounded half up (fp32 bits + 0x8000), not to even": Mistake(
        "1.1",
        "decode_float",
        "",
        (
            "stored = torch.tensor([value], dtype=torch.float64).to(dtype)\n"
            "    pattern = stored.view(INT_OF_WIDTH[width]).item() & ((1 << width) - 1)",
            "stored = torch.tensor([value], dtype=torch.float64).to(dtype)\n"
            "    pattern = stored.view(INT_OF_WIDTH[width]).item() & ((1 << width) - 1)\n"
            "    if dtype == torch.bfloat16:\n"
            "        bits32 = torch.tensor([value], dtype=torch.float32).view(torch.int32).item() & 0xFFFFFFFF\n"
            "        pattern = ((bits32 + 0x8000) >> 16) & 0xFFFF",
        ),
    ),
    "1.1: the sign taken from value < 0 (-0.0 gets sign 0)": Mistake(
        "1.1",
        "decode_float",
        "",
        (
            "return bits[0], bits[1 : 1 + exponent_bits]",
            'return ("1" if value < 0 else "0"), bits[1 : 1 + exponent_bits]',
        ),
    ),
    "1.1: no check of the dtype (float64 is a KeyError)": Mistake(
        "1.1",
        "decode_float",
        "",
        (
            '    if dtype not in FORMATS:\n        raise ValueError(f"decode_float',
            '    if False:\n        raise ValueError(f"decode_float',
        ),
    ),
    "1.1: the sign bit returned as an int": Mistake(
        "1.1",
        "decode_float",
        "",
        ("return bits[0], bits[1 : 1 + exponent_bits]", "return int(bits[0]), bits[1 : 1 + exponent_bits]"),
    ),
    # --- 1.2 value_from_bits
    "1.2: a sign of several bits accepted (int(sign, 2) odd or even)": Mistake(
        "1.2",
        "value_from_bits",
        "",
        ('    if sign not in ("0", "1"):\n        raise', '    if not sign or set(sign) - {"0", "1"}:\n        raise'),
    ),
    "1.2: the strings left to int() (accepts '0b10', ' 1', '1_0')": Mistake(
        "1.2",
        "value_from_bits",
        "",
        ('        if not bits or set(bits) - {"0", "1"}:', "        if not bits:"),
    ),
    "1.2: the bias looked up for fp32, fp16 and bf16 only": Mistake(
        "1.2",
        "value_from_bits",
        "",
        (
            "bias, fraction = 2 ** (len(exponent) - 1) - 1, m / 2 ** len(mantissa)",
            "bias, fraction = {8: 127, 5: 15}.get(len(exponent), 127), m / 2 ** len(mantissa)",
        ),
    ),
    "1.2: zero returned as 0.0 whatever its sign": Mistake(
        "1.2",
        "value_from_bits",
        "",
        (
            "    if e == 0:\n        return",
            "    if e == 0 and m == 0:\n        return 0.0\n    if e == 0:\n        return",
        ),
    ),
    # --- 1.3 update_is_lost
    "1.3: |update| below half the gap above w is lost": Mistake(
        "1.3",
        "update_is_lost",
        "",
        """
        def update_is_lost(w, update, dtype):
            return abs(update) < smallest_update_that_survives(w, dtype)
        """,
    ),
    "1.3: |update| up to half the gap above w is lost (ties included)": Mistake(
        "1.3",
        "update_is_lost",
        "",
        """
        def update_is_lost(w, update, dtype):
            return abs(update) <= smallest_update_that_survives(w, dtype)
        """,
    ),
    "1.3: returns a bool tensor": Mistake(
        "1.3", "update_is_lost", "", ("return bool(torch.equal(total, w_stored))", "return (total == w_stored).all()")
    ),
    "1.3: a w that overflows the format is not refused": Mistake(
        "1.3",
        "update_is_lost",
        "",
        """
        def update_is_lost(w, update, dtype):
            if dtype not in FORMATS:
                raise ValueError(f"unknown format {dtype}")
            w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
            return bool(torch.equal((w_stored.double() + update).to(dtype), w_stored))
        """,
    ),
    "1.3: the sum compared with w before rounding w": Mistake(
        "1.3",
        "update_is_lost",
        "",
        ("return bool(torch.equal(total, w_stored))", "return total.item() == w"),
    ),
    # --- 1.4 smallest_update_that_survives
    "1.4: the gap above |w| (negative powers of two wrong)": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "",
        (
            "above = torch.nextafter(w_stored, torch.tensor([math.inf], dtype=dtype))",
            "w_stored = w_stored.abs()\n    above = torch.nextafter(w_stored, torch.tensor([math.inf], dtype=dtype))",
        ),
    ),
    "1.4: the gap halved in the format (half the smallest subnormal is 0)": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "",
        ("return (above.double() - w_stored.double()).item() / 2", "return ((above - w_stored) / 2).double().item()"),
    ),
    "1.4: inf or nan w gives nan, not a ValueError": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "",
        """
        def smallest_update_that_survives(w, dtype):
            if dtype not in FORMATS:
                raise ValueError("unknown format")
            w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
            above = torch.nextafter(w_stored, torch.tensor([math.inf], dtype=dtype))
            return (above.double() - w_stored.double()).item() / 2
        """,
    ),
    "1.4: any dtype accepted (float64 works)": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "",
        (
            '    if dtype not in FORMATS:\n        raise ValueError(f"smallest_update_that_survives',
            '    if not dtype.is_floating_point:\n        raise ValueError(f"smallest_update_that_survives',
        ),
    ),
    "1.4: eps * 2**floor(log2|w|) / 2 (no subnormals, no max)": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "",
        """
        def smallest_update_that_survives(w, dtype):
            if dtype not in FORMATS:
                raise ValueError("unknown format")
            stored = torch.tensor([w], dtype=torch.float64).to(dtype).double().item()
            if not math.isfinite(stored):
                raise ValueError("w must be finite")
            if stored == 0:
                return torch.finfo(dtype).tiny * torch.finfo(dtype).eps / 2
            return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(abs(stored))) / 2
        """,
    ),
}
