"""Number formats and precision modes: what each float format can hold, and which mode this device can run.

Three parts, each readable on its own:
  1. the formats table (fp64 ... fp8), every number derived from torch.finfo, never typed in by hand;
  2. a bit decoder that shows sign | exponent | mantissa of a value rounded into a format;
  3. the precision modes of the training loop (fp32, bf16, fp16, bf16-pure), their autocast context,
     a check that refuses a mode the device would silently ignore, and the static bytes per parameter.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
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


# ----------------------------------------------------------------------------------------------------------
# 4. Precision modes of the training loop

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-pure")
DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# The dtype the matmuls of each mode should come out in (the probe in check_precision checks this).
_COMPUTE_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "bf16-pure": torch.bfloat16}
# What to suggest instead when a mode cannot run here.
_ALTERNATIVE = {
    "fp32": "a different --device",
    "bf16": "fp16 (with GradScaler) or fp32",
    "fp16": "bf16 or fp32",
    "bf16-pure": "fp16 (with GradScaler) or fp32",
}


def normalize_precision(name: str) -> str:
    """The canonical precision name ("bfloat16" -> "bf16"); a ValueError listing valid names otherwise."""
    key = str(name).strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in PRECISIONS:
        aliases = ", ".join(f"{a} (= {p})" for a, p in DTYPE_ALIASES.items())
        raise ValueError(f"unknown precision {name!r}; use one of {', '.join(PRECISIONS)} or {aliases}")
    return key


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype autocast runs matmuls in: bf16 -> bfloat16, fp16 -> float16; None = no autocast."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(normalize_precision(precision))


def param_dtype(precision: str) -> torch.dtype:
    """The dtype the model's parameters are stored in: bfloat16 for bf16-pure, float32 otherwise."""
    return torch.bfloat16 if normalize_precision(precision) == "bf16-pure" else torch.float32


def needs_grad_scaler(precision: str) -> bool:
    """fp16 gradients underflow (smallest normal 2**-14), so fp16 training scales the loss first."""
    return normalize_precision(precision) == "fp16"


def autocast_context(device: torch.device | str, precision: str) -> contextlib.AbstractContextManager:
    """torch.autocast for bf16/fp16 (matmuls in low precision, weights stay fp32); a no-op context else."""
    dtype = autocast_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


class PrecisionNotSupportedError(ValueError):
    """The requested precision would not run (or would silently run as fp32) on this device."""


@dataclass
class PrecisionFacts:
    """What was observed about one precision on one device; precision_problem() judges it."""

    device: str  # e.g. "cuda:0", "cpu"
    precision: str
    autocast_available: bool = True
    compute_capability: tuple[int, int] | None = None  # NVIDIA GPUs only
    device_name: str = ""
    observed_dtype: torch.dtype | None = None  # dtype of the probe matmul; None when it raised
    error: str = ""  # the exception the probe raised, if any
    torch_warnings: list[str] = field(default_factory=list)  # what torch warned during the probe


def precision_problem(facts: PrecisionFacts) -> str | None:
    """Why `facts.precision` cannot run as asked on that device (a message naming what to use), or None.

    A pure function of the facts, so a test can feed a simulated T4 or an autocast that was ignored.
    """
    p = normalize_precision(facts.precision)
    device_type = torch.device(facts.device).type
    alternative = f"use --precision {_ALTERNATIVE[p]}"
    if autocast_dtype(p) is not None and not facts.autocast_available:
        return (
            f"autocast is not available for device type '{device_type}' in torch {torch.__version__}, "
            f"so --precision {p} would silently train in fp32; {alternative}"
        )
    cc = facts.compute_capability
    if p in ("bf16", "bf16-pure") and cc is not None and cc < (8, 0):
        return (
            f"this GPU ({facts.device_name or facts.device}, sm_{cc[0]}{cc[1]}) has no bf16; "
            f"use --precision fp16 (with GradScaler) or fp32"
        )
    expected = _COMPUTE_DTYPE[p]
    heard = f" (torch warned: {' | '.join(facts.torch_warnings)})" if facts.torch_warnings else ""
    if facts.observed_dtype is None:
        return f"a {p} matmul failed on {facts.device}: {facts.error or 'no result'}{heard}; {alternative}"
    if facts.observed_dtype != expected:
        return (
            f"--precision {p} was ignored on {facts.device}: a matmul came out "
            f"{short_name(facts.observed_dtype)}, not {short_name(expected)}, so training would "
            f"silently run in {short_name(facts.observed_dtype)}{heard}; {alternative}"
        )
    return None


def probe_precision(device: torch.device | str, precision: str) -> PrecisionFacts:
    """Run one small matmul (F.linear) the way training would in `precision` and record what happened."""
    device = torch.device(device)
    p = normalize_precision(precision)
    facts = PrecisionFacts(
        device=str(device), precision=p, autocast_available=torch.amp.autocast_mode.is_autocast_available(device.type)
    )
    if device.type == "cuda" and not torch.cuda.is_available():
        facts.error = f"no CUDA device here (torch {torch.__version__}, cuda available: False)"
        return facts
    if device.type == "cuda" and torch.version.hip is None:  # compute capability means NVIDIA's sm_XY
        facts.compute_capability = tuple(torch.cuda.get_device_capability(device))
        facts.device_name = torch.cuda.get_device_name(device)
    if autocast_dtype(p) is not None and not facts.autocast_available:
        return facts  # nothing to run: autocast would be ignored
    weights_dtype = param_dtype(p)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            x = torch.randn(8, 16, device=device, dtype=weights_dtype)
            w = torch.randn(4, 16, device=device, dtype=weights_dtype)
            with autocast_context(device, p):
                y = F.linear(x, w)
            y.sum().item()  # wait for the device, so an asynchronous error shows up here
            facts.observed_dtype = y.dtype
        except Exception as error:  # noqa: BLE001 - any failure means "this mode does not run here"
            facts.error = f"{type(error).__name__}: {error}".strip()
    facts.torch_warnings = [str(c.message).replace("\n", " ") for c in caught]
    return facts


def check_precision(device: torch.device | str, precision: str) -> None:
    """Run the probe matmul and raise PrecisionNotSupportedError if `precision` would not really be used.

    Call it before training: without it, autocast with an unsupported dtype only warns and runs fp32.
    """
    problem = precision_problem(probe_precision(device, precision))
    if problem is not None:
        raise PrecisionNotSupportedError(problem)


# ----------------------------------------------------------------------------------------------------------
# Static memory per parameter with AdamW (weights + grads + optimizer state; activations come on top)

BYTES_PER_PARAM: dict[str, dict[str, int]] = {
    # fp32 weights (4), fp32 grads (4), Adam m and v in fp32 (4 + 4).
    "fp32": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # autocast keeps the fp32 weights; the bf16 copies for each matmul are made on the fly and freed,
    # and the grads land on the fp32 weights: the same 16 bytes as fp32 (the saving is in activations).
    "bf16": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # fp16 autocast: as bf16 (the GradScaler adds one scalar, not bytes per parameter).
    "fp16": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # everything in bf16: weights 2, grads 2, Adam m and v 2 + 2. Half the memory, but small updates
    # are lost when added to bf16 weights (see update_is_lost).
    "bf16-pure": {"weights": 2, "master_weights": 0, "grads": 2, "optimizer": 4},
    # bf16 weights for the forward/backward (2) plus an fp32 master copy the optimizer updates (4),
    # grads accumulated in fp32 (4), Adam m and v in fp32 (8): 18, more than plain fp32.
    "bf16-pure+master": {"weights": 2, "master_weights": 4, "grads": 4, "optimizer": 8},
}


def static_bytes_per_param(precision: str, master_weights: bool = False) -> dict[str, int]:
    """Bytes per parameter for weights, master weights, grads and AdamW state, and their total.

    master_weights=True (bf16-pure only) keeps an fp32 copy of the weights and fp32 grads and state.
    """
    p = normalize_precision(precision)
    if master_weights and p != "bf16-pure":
        raise ValueError(f"master_weights applies to bf16-pure only; {p} already updates fp32 weights")
    row = dict(BYTES_PER_PARAM["bf16-pure+master" if master_weights else p])
    row["total"] = sum(row.values())
    return row
