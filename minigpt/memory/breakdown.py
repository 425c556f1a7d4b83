"""MemoryBreakdown: the bytes of one training step by kind, as estimate() predicts and measure() meters them.

Also the small rules both sides share: the bytes per value of each precision mode, and the checks of a
step's shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch

from minigpt.model import ModelConfig
from minigpt.precision import autocast_dtype, normalize_precision
from minigpt.recompute import CHECKPOINTING_MODES


@dataclass
class MemoryBreakdown:
    """Bytes of one training step, by kind. The same fields come from estimate() and from measure()."""

    weights: int  # model parameters (+ the fp32 master copy with master_weights)
    gradients: int  # .grad of the trained parameters
    optimizer: int  # AdamW exp_avg + exp_avg_sq (the 4-byte step counters, one per tensor, left out)
    activations: int  # tensors kept for backward at the end of the forward (parameters excluded)
    logits: int  # transient: logits, their fp32 upcast, and their fp32 gradients at the start of backward
    activation_grads: int  # transient: gradients in flight in backward, recomputed blocks, forward scratch
    weight_copies: int = 0  # transient: autocast's bf16/fp16 copies of the fp32 weight matrices
    optimizer_step: int = 0  # transient: gradient clipping's norms and AdamW's temporaries in optimizer_step
    moments: dict[str, int] = field(default_factory=dict)  # phase of the step -> live bytes at its worst
    device_peak: int | None = None  # measure() only: the real peak of the step (see measure)
    saved_by_hooks: int | None = None  # measure() only: what saved_tensors_hooks alone counted
    offloaded: int | None = None  # --offload-activations: saved tensors moved to host memory or disk (not the peak)

    @property
    def static(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def upper_bound(self) -> int:
        """static + every per-step term as if all were live at once: safe, but they never all are."""
        step = self.activations + self.weight_copies + self.logits + self.activation_grads
        return self.static + max(step, self.optimizer_step)

    @property
    def peak(self) -> int:
        """The peak of the step: device_peak when measured, else the largest of the predicted moments.

        The terms peak at different moments (activations at the end of the forward, gradients at the end
        of the backward), so the peak is the worst moment, not their sum (see `moments`).
        """
        if self.device_peak is not None:
            return self.device_peak
        return max(self.moments.values()) if self.moments else self.upper_bound

    def rows(self) -> list[tuple[str, int]]:
        """(name, bytes) rows for tabulate: the terms, static, each moment of the step, and the peak."""
        terms = [
            (f.name, getattr(self, f.name))
            for f in fields(self)
            if f.name != "moments" and getattr(self, f.name) is not None
        ]
        return [
            *terms,
            ("static", self.static),
            *((f"at {k}", v) for k, v in self.moments.items()),
            ("peak", self.peak),
        ]

    def to_dict(self) -> dict:
        """JSON-ready: every field in bytes, plus static and peak."""
        return {**asdict(self), "static": self.static, "peak": self.peak}


# ----------------------------------------------------------------------------------------------------------
# The bytes per value of a precision mode, and the checks of a step's shape


@dataclass(frozen=True)
class Widths:
    """Bytes per value of the tensors of one precision mode."""

    compute: int  # matmul inputs/outputs, attention, MLP: 4 in fp32, 2 otherwise
    residual: int  # the residual stream between blocks: fp32, except in bf16-pure (the embedding is bf16)
    model: int  # the model's own dtype (parameters, buffers, gradients as backward makes them): 2 in bf16-pure
    autocast: bool  # autocast casts each matmul input (and weight) to 16 bits: one copy per consumer


def widths(precision: str) -> Widths:
    p = normalize_precision(precision)
    pure = p == "bf16-pure"
    return Widths(
        compute=4 if p == "fp32" else 2,
        residual=2 if pure else 4,
        model=2 if pure else 4,
        autocast=autocast_dtype(p) is not None,
    )


def device_type(device: torch.device | str) -> str:
    return torch.device(device).type  # "cuda:1" -> "cuda"


def check_shape(cfg: ModelConfig, batch: int, ctx: int) -> None:
    """Raise ValueError unless batch and ctx are at least 1 and ctx fits the model."""
    if batch < 1 or ctx < 1:
        raise ValueError(f"batch and ctx must be at least 1, got batch={batch}, ctx={ctx}")
    if ctx > cfg.ctx:
        raise ValueError(f"ctx={ctx} is longer than the model's ctx={cfg.ctx}")


def check_mode(checkpointing: str) -> str:
    """Return `checkpointing` if it is one of CHECKPOINTING_MODES, else raise ValueError."""
    if checkpointing not in CHECKPOINTING_MODES:
        raise ValueError(f"unknown checkpointing {checkpointing!r}; choose one of: {', '.join(CHECKPOINTING_MODES)}")
    return checkpointing
