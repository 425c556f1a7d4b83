"""Precision modes of the training loop: fp32, bf16 and fp16 autocast, and pure bf16 weights.

Each mode's autocast context and parameter dtype, a check that refuses a mode the device would silently
run as fp32, and the static bytes per parameter each mode costs with AdamW.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from minigpt.formats import short_name

# ----------------------------------------------------------------------------------------------------------
# 1. Precision modes of the training loop

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
# 2. Static memory per parameter with AdamW (weights + grads + optimizer state; activations come on top)

BYTES_PER_PARAM: dict[str, dict[str, int]] = {
    # fp32 weights (4), fp32 grads (4), Adam m and v in fp32 (4 + 4).
    "fp32": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # autocast keeps the fp32 weights; the bf16 copies for each matmul are made on the fly and freed,
    # and the grads land on the fp32 weights: the same 16 bytes as fp32 (the saving is in activations).
    "bf16": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # fp16 autocast: as bf16 (the GradScaler adds one scalar, not bytes per parameter).
    "fp16": {"weights": 4, "master_weights": 0, "grads": 4, "optimizer": 8},
    # everything in bf16: weights 2, grads 2, Adam m and v 2 + 2. Half the memory, but small updates
    # are lost when added to bf16 weights (see minigpt.formats.update_is_lost).
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
