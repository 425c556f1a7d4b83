"""Number formats: what each float format (fp64 ... fp8) can hold, and how a value is stored in its bits.

Chapter 1's tools: the formats table (every number derived from torch.finfo), a bit decoder that shows
sign | exponent | mantissa, and rounding helpers that show what storing a number in a format loses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tabulate import tabulate

# ----------------------------------------------------------------------------------------------------------
# 1. The formats table

# (short name, attribute of the torch module). tf32 has no attribute: it is not a storage dtype (see below).
FORMATS: list[tuple[str, str | None]] = [
    ("fp64", "float64"),
    ("fp32", "float32"),
    ("tf32", None),
    ("fp16", "float16"),
    ("bf16", "bfloat16"),
    ("fp8 e4m3fn", "float8_e4m3fn"),
    ("fp8 e5m2", "float8_e5m2"),
    ("fp8 e8m0fnu", "float8_e8m0fnu"),
]

# tf32 layout: 1 sign, 8 exponent (as fp32), 10 mantissa (as fp16) bits, held in a 32-bit fp32 register.
TF32_EXPONENT_BITS, TF32_MANTISSA_BITS = 8, 10

_NOTES = {
    "tf32": "described, not a torch dtype: a matmul mode on fp32 tensors (stored in 32 bits)",
    "fp8 e4m3fn": "no inf; NaN is the all-ones pattern (fn = finite)",
    "fp8 e8m0fnu": "no sign, no mantissa, no zero, no subnormals: a power-of-two scale (MX formats)",
}


def _dtype_of(attr: str | None) -> torch.dtype | None:
    """The torch dtype called `attr`, or None when this torch does not have it (older versions)."""
    return getattr(torch, attr, None) if attr else None


def missing_formats() -> list[str]:
    """Short names of the formats in FORMATS that this torch does not have (skipped in the table)."""
    return [name for name, attr in FORMATS if attr is not None and _dtype_of(attr) is None]


def _layout(dtype: torch.dtype) -> tuple[bool, int, int]:
    """(signed, exponent bits, mantissa bits) of a float dtype, derived from torch.finfo.

    eps = 2**-mantissa_bits (the gap above 1.0), so mantissa = -log2(eps); a format whose smallest value
    is positive (e8m0fnu) has no sign bit; the exponent takes the bits that are left.
    """
    fi = torch.finfo(dtype)
    signed = fi.min < 0
    mantissa = round(-math.log2(fi.eps))
    return signed, fi.bits - mantissa - int(signed), mantissa


def format_rows() -> list[dict]:
    """One dict per format: bits, exponent/mantissa split, max, smallest normal/subnormal and eps.

    Every number comes from torch.finfo. smallest subnormal = smallest_normal * eps (the last mantissa bit
    at the lowest exponent), None for a format without subnormals (no mantissa bits: e8m0fnu).
    tf32 is not a storage dtype: it is how tensor cores read fp32 inputs of a matmul when
    torch.backends.cuda.matmul.allow_tf32 = True or torch.set_float32_matmul_precision("high"); its row is
    computed from its layout (fp32's exponent, 10 mantissa bits) and marked "described, not a torch dtype".
    """
    rows = []
    for name, attr in FORMATS:
        if attr is None:  # tf32: IEEE-style numbers from its layout
            e, m = TF32_EXPONENT_BITS, TF32_MANTISSA_BITS
            bias = 2 ** (e - 1) - 1
            smallest_normal = 2.0 ** (1 - bias)
            rows.append(
                {
                    "name": name,
                    "torch dtype": "(matmul mode)",
                    "bits": 1 + e + m,
                    "exponent bits": e,
                    "mantissa bits": m,
                    "max": (2 - 2.0**-m) * 2.0**bias,
                    "smallest normal": smallest_normal,
                    "smallest subnormal": smallest_normal * 2.0**-m,
                    "eps": 2.0**-m,
                    "note": _NOTES[name],
                }
            )
            continue
        dtype = _dtype_of(attr)
        if dtype is None:
            continue  # listed by missing_formats()
        fi = torch.finfo(dtype)
        _, e, m = _layout(dtype)
        rows.append(
            {
                "name": name,
                "torch dtype": f"torch.{attr}",
                "bits": fi.bits,
                "exponent bits": e,
                "mantissa bits": m,
                "max": fi.max,
                "smallest normal": fi.smallest_normal,
                "smallest subnormal": fi.smallest_normal * fi.eps if m > 0 else None,
                "eps": fi.eps,
                "note": _NOTES.get(name, ""),
            }
        )
    return rows


def formats_table(fmt: str = "github") -> str:
    """The formats table as text (what `minigpt formats` prints), with a line naming skipped formats."""
    table = tabulate(format_rows(), headers="keys", tablefmt=fmt, floatfmt="g", missingval="none")
    missing = missing_formats()
    if missing:
        table += f"\n\nSkipped, not in torch {torch.__version__}: {', '.join(missing)}"
    return table


# ----------------------------------------------------------------------------------------------------------
# 2. The bit decoder

_INT_OF_WIDTH = {64: torch.int64, 32: torch.int32, 16: torch.int16, 8: torch.uint8}


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A torch float dtype from a dtype, a short name ("bf16", "fp8 e4m3fn") or an attribute ("bfloat16")."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"{dtype} is not a floating-point dtype")
        return dtype
    names = {name: attr for name, attr in FORMATS if attr is not None}
    found = _dtype_of(names.get(dtype, dtype))
    if not isinstance(found, torch.dtype) or not found.is_floating_point:
        raise ValueError(f"unknown float format {dtype!r}; use a torch dtype or one of {sorted(names)}")
    return found


def short_name(dtype: torch.dtype) -> str:
    """The course's short name of a dtype ("bf16" for torch.bfloat16), or torch's own name."""
    for name, attr in FORMATS:
        if attr is not None and _dtype_of(attr) == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def _bits_of(t: torch.Tensor) -> int:
    """The bit pattern of a one-element float tensor, as an unsigned Python int."""
    width = torch.finfo(t.dtype).bits
    return t.view(_INT_OF_WIDTH[width]).item() & ((1 << width) - 1)


def _from_bits(bits: int, dtype: torch.dtype) -> torch.Tensor:
    """The one-element tensor of `dtype` whose bit pattern is `bits` (the inverse of _bits_of)."""
    width = torch.finfo(dtype).bits
    int_dtype = _INT_OF_WIDTH[width]
    if int_dtype.is_signed and bits >= 1 << (width - 1):
        bits -= 1 << width  # same bits, as a two's-complement signed int
    return torch.tensor([bits], dtype=int_dtype).view(dtype)


@dataclass
class BitLayout:
    """A value rounded into a float format, split into its sign, exponent and mantissa bits."""

    value: float  # what was asked for
    format: str  # short name, e.g. "bf16"
    sign: int | None  # None for unsigned formats (e8m0fnu)
    exponent_bits: str
    mantissa_bits: str
    stored_value: float  # the value after rounding into the format
    biased_exponent: int  # the exponent field read as an unsigned int
    unbiased_exponent: int | None  # the power of two it means; None for zero, inf and nan
    kind: str  # normal, subnormal, zero, inf or nan

    def __str__(self) -> str:
        sign = " " if self.sign is None else str(self.sign)
        return f"{sign} | {self.exponent_bits} | {self.mantissa_bits}  = {self.stored_value!r} ({self.format})"


def decode_bits(value: float, dtype: torch.dtype | str) -> BitLayout:
    """Round `value` into `dtype` and show its bits: sign | exponent | mantissa.

    The tensor is viewed as an integer of the same width (no conversion, the same bytes), then split.
    value = (-1)**sign * 1.mantissa * 2**(exponent - bias) for normal numbers; 0.mantissa * 2**(1 - bias)
    for subnormals (exponent field all zeros).
    """
    dtype = resolve_dtype(dtype)
    fi = torch.finfo(dtype)
    signed, e, m = _layout(dtype)
    stored = torch.tensor([value], dtype=torch.float64).to(dtype)
    stored_value = stored.to(torch.float64).item()
    bits = f"{_bits_of(stored):0{fi.bits}b}"
    s = int(signed)  # 1 sign bit, or none
    sign_bits, exponent_bits, mantissa_bits = bits[:s], bits[s : s + e], bits[s + e :]
    biased = int(exponent_bits, 2)
    has_subnormals = m > 0
    # the smallest normal is 2**(1 - bias), or 2**-bias in a format without subnormals (e8m0fnu)
    bias = int(has_subnormals) - round(math.log2(fi.smallest_normal))

    if math.isnan(stored_value):
        kind, unbiased = "nan", None
    elif math.isinf(stored_value):
        kind, unbiased = "inf", None
    elif stored_value == 0:
        kind, unbiased = "zero", None
    elif abs(stored_value) < fi.smallest_normal:
        kind, unbiased = "subnormal", 1 - bias
    else:
        kind, unbiased = "normal", biased - bias
    return BitLayout(
        value=value,
        format=short_name(dtype),
        sign=int(sign_bits) if signed else None,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        stored_value=stored_value,
        biased_exponent=biased,
        unbiased_exponent=unbiased,
        kind=kind,
    )


# ----------------------------------------------------------------------------------------------------------
# 3. Rounding helpers the chapters use


def round_trip(x: torch.Tensor, dtype: torch.dtype | str) -> torch.Tensor:
    """Cast x to `dtype` and back to x's dtype: what survives storing x in that format."""
    return x.to(resolve_dtype(dtype)).to(x.dtype)


def relative_error(x: torch.Tensor | float, dtype: torch.dtype | str) -> float:
    """||round_trip(x) - x|| / ||x||, computed in fp64: how much of x is lost by storing it in `dtype`.

    For a single number this is |x' - x| / |x|. A zero x gives 0.0; an x that overflows gives inf or nan.
    """
    x64 = torch.as_tensor(x, dtype=torch.float64)
    norm = torch.linalg.vector_norm(x64).item()
    if norm == 0:
        return 0.0
    return torch.linalg.vector_norm(round_trip(x64, dtype) - x64).item() / norm


def update_is_lost(w: float, update: float, dtype: torch.dtype | str) -> bool:
    """True when w + update == w once w and the sum are rounded into `dtype`: the step did nothing.

    This is why pure low-precision weights stall: an update smaller than half the gap between w and its
    neighbour rounds back to w. The sum is formed in fp64, and torch casts fp64 to bf16/fp16/fp8 through
    fp32, so an update within fp32's resolution (2**-24 * |w|) of exactly half a gap counts as the tie.
    """
    dtype = resolve_dtype(dtype)
    w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
    total = (w_stored.to(torch.float64) + update).to(dtype)
    return bool(torch.equal(total, w_stored))


def _next_up(t: torch.Tensor) -> torch.Tensor:
    """The next representable value above a one-element float tensor (bit pattern +1 or -1)."""
    bits = _bits_of(t)
    if t.item() == 0:
        return _from_bits(1, t.dtype)  # from +0 or -0: the smallest positive value
    return _from_bits(bits + 1 if t.item() > 0 else bits - 1, t.dtype)  # sign-magnitude: |t| up or down


def smallest_update_that_survives(w: float, dtype: torch.dtype | str) -> float:
    """Half the gap between w and the next value above it in `dtype`: the threshold for a positive update.

    Any update above it changes w, any update below it is lost. Exactly half is a tie, and round to
    nearest even keeps w when w's last mantissa bit is 0 (1.0) and moves it when that bit is 1.
    (Below a power of two the gap is half as wide, so a negative update needs only half as much.)
    """
    dtype = resolve_dtype(dtype)
    w_stored = torch.tensor([w], dtype=torch.float64).to(dtype)
    gap = _next_up(w_stored).to(torch.float64).item() - w_stored.to(torch.float64).item()
    return gap / 2
