"""The device and 16-bit precision every chapter's settings cell uses, read from the device's capabilities.

`chapter_settings(SCALE)` is the one place a chapter chooses them, so a T4, an A100, a Mac or a CPU all work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minigpt.device import DeviceInfo, device_info, pick_device
from minigpt.precision import PrecisionFacts, autocast_dtype, normalize_precision, param_dtype, precision_problem

SCALES = ("small", "full")


def simulated_facts(info: DeviceInfo, precision: str) -> PrecisionFacts:
    """What check_precision's probe would observe for `precision` on the device `info` describes.

    Built from the capabilities alone (nothing runs), so a test can judge a T4 or an MPS on any machine.
    """
    p = normalize_precision(precision)
    wanted = autocast_dtype(p) or param_dtype(p)
    if wanted == torch.bfloat16:
        works = info.supports_bf16
    elif wanted == torch.float16:
        works = info.supports_fp16_autocast
    else:
        works = True
    return PrecisionFacts(
        device=info.device,
        precision=p,
        compute_capability=info.compute_capability if info.type == "cuda" else None,
        device_name=info.name,
        observed_dtype=wanted if works else torch.float32,
    )


def supports(info: DeviceInfo, precision: str) -> bool:
    """Whether `precision` really runs on the device `info` describes (precision_problem finds nothing).

    A GPU without native bf16 (sm_75 and older) counts as not supporting bf16, as check_precision rules.
    """
    return precision_problem(simulated_facts(info, precision)) is None


def low_precision_for(info: DeviceInfo) -> tuple[str, str]:
    """The 16-bit autocast precision for a device, and why: bf16 where it runs, else fp16 + GradScaler.

    A CPU gets bf16 even without bf16 instructions: correct but emulated (slow), which the reason says.
    """
    if info.type == "cpu":
        if info.bf16_is_fast:
            return "bf16", f"bf16 autocast: this CPU has bf16 instructions ({info.note})"
        return "bf16", "bf16 autocast, emulated through fp32: this CPU has no bf16 instructions (correct, slow)"
    if supports(info, "bf16"):
        return "bf16", f"bf16 autocast: the {info.name} runs bf16 natively, no GradScaler needed"
    if supports(info, "fp16"):
        return "fp16", f"fp16 autocast + GradScaler: the {info.name} has no native bf16"
    return "fp32", f"fp32: the {info.name} runs neither bf16 nor fp16 autocast"


@dataclass(frozen=True)
class ChapterSettings:
    """What a chapter runs on: the device, its 16-bit precision, and where bf16-only demos run."""

    scale: str
    info: DeviceInfo
    precision: str  # "bf16", "fp16" or "fp32": the chapter's mixed-precision runs on `device`
    reason: str

    @property
    def device(self) -> torch.device:
        """The device the chapter computes on (the GPU when one is attached, at either scale)."""
        return torch.device(self.info.device)

    @property
    def bf16_device(self) -> torch.device:
        """Where demos that need bf16 weights (bf16-pure) run: `device` if it has bf16, else the CPU.

        On a T4 (sm_75) bf16 is not native, so those demos move to the CPU, where bf16 always runs.
        """
        return self.device if supports(self.info, "bf16-pure") else torch.device("cpu")

    def supports(self, precision: str) -> bool:
        """Whether `precision` really runs on this chapter's device."""
        return supports(self.info, precision)

    def describe(self) -> str:
        """One line for the settings cell: scale, device and the precision with its reason."""
        return f"SCALE={self.scale}, DEVICE={self.device}, 16-bit precision: {self.reason}"


def chapter_settings(scale: str, info: DeviceInfo | None = None) -> ChapterSettings:
    """The settings of a chapter at `scale` ("small" or "full") on the device `info` (default: this one).

    Both scales take the best device here (cuda, then mps, then cpu); the scale only sets the sizes.
    """
    if scale not in SCALES:
        raise ValueError(f"SCALE must be one of {SCALES}, not {scale!r}")
    info = info or device_info(pick_device())
    precision, reason = low_precision_for(info)
    return ChapterSettings(scale=scale, info=info, precision=precision, reason=reason)
