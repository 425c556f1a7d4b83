"""Hardware to plan for: a catalogue of common GPUs and this machine's device, and the precision each runs.

Sizes are taken as marketed, in GB (10**9 bytes), and reported in GiB (2**30 bytes, the unit of torch and
nvidia-smi): a "16 GB" T4 is 16e9 bytes = 14.90 GiB. detect_hardware() reads the real size of this device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GB = 10**9  # marketing gigabyte: how GPU and RAM sizes are sold
GIB = 2**30  # how the course reports every size (the unit of torch and nvidia-smi)


def gib(n_bytes: float) -> str:
    """`n_bytes` as GiB with two decimals, e.g. "14.90 GiB"."""
    return f"{n_bytes / GIB:.2f} GiB"


# ----------------------------------------------------------------------------------------------------------
# The catalogue


@dataclass(frozen=True)
class Hardware:
    """A device to plan for. memory_bytes is what it has; usable_fraction the part training may use."""

    key: str
    name: str
    memory_bytes: int
    supports_bf16: bool  # native bf16 (Ampere sm_80 and newer, Apple M-series, CPUs with bf16 instructions)
    supports_fp16: bool  # fast fp16: tensor cores (Volta sm_70 and newer) or Apple's GPU
    kind: str  # "cuda" | "mps" | "cpu"
    note: str = ""
    usable_fraction: float = 1.0  # mps: the GPU may only wire part of the unified memory

    @property
    def usable_memory_bytes(self) -> int:
        return int(self.memory_bytes * self.usable_fraction)


MPS_USABLE_FRACTION = 2 / 3  # Metal's recommended GPU working set is about 2/3 of RAM on 8-32 GB Macs

_TURING, _VOLTA = "Turing sm_75: fp16 tensor cores, no bf16", "Volta sm_70: fp16 tensor cores, no bf16"
HARDWARE: dict[str, Hardware] = {
    h.key: h
    for h in [
        Hardware("t4", "NVIDIA T4", 16 * GB, False, True, "cuda", _TURING),
        Hardware("v100-16", "NVIDIA V100 16GB", 16 * GB, False, True, "cuda", _VOLTA),
        Hardware("v100-32", "NVIDIA V100 32GB", 32 * GB, False, True, "cuda", _VOLTA),
        Hardware("l4", "NVIDIA L4", 24 * GB, True, True, "cuda", "Ada sm_89"),
        Hardware("a10", "NVIDIA A10", 24 * GB, True, True, "cuda", "Ampere sm_86"),
        Hardware("rtx3090", "NVIDIA RTX 3090", 24 * GB, True, True, "cuda", "Ampere sm_86"),
        Hardware("rtx4090", "NVIDIA RTX 4090", 24 * GB, True, True, "cuda", "Ada sm_89"),
        Hardware("a100-40", "NVIDIA A100 40GB", 40 * GB, True, True, "cuda", "Ampere sm_80 (Colab's A100)"),
        Hardware("a100-80", "NVIDIA A100 80GB", 80 * GB, True, True, "cuda", "Ampere sm_80"),
        Hardware("h100", "NVIDIA H100 80GB", 80 * GB, True, True, "cuda", "Hopper sm_90"),
        # Unified memory: 16 GB of RAM by default (pass memory_bytes= your Mac's RAM).
        Hardware(
            "mps",
            "Apple M-series GPU",
            16 * GB,
            True,
            True,
            "mps",
            "unified memory shared with the CPU, the GPU may use about 2/3 of it; bf16 needs macOS 14+",
            usable_fraction=MPS_USABLE_FRACTION,
        ),
        # 16 GB of RAM by default (pass memory_bytes= the RAM that is free).
        Hardware(
            "cpu",
            "CPU",
            16 * GB,
            False,
            False,
            "cpu",
            "a typical CPU without bf16 instructions; detect_hardware() describes this machine's",
        ),
    ]
}


def detect_hardware(device: str | torch.device | None = None) -> Hardware:
    """This machine's device as a Hardware (default: the one training would pick), from minigpt.device."""
    from minigpt.device import device_info

    info = device_info(device)
    fraction = MPS_USABLE_FRACTION if info.type == "mps" else 1.0
    tensor_cores = info.type == "mps" or (info.compute_capability or (0, 0)) >= (7, 0)  # Volta and newer
    return Hardware(
        key="this",
        name=info.name,
        memory_bytes=info.total_memory_bytes or 0,
        supports_bf16=info.bf16_is_fast,
        supports_fp16=info.supports_fp16_autocast and tensor_cores,
        kind=info.type,
        note=info.note,
        usable_fraction=fraction,
    )


def get_hardware(hardware: str | Hardware) -> Hardware:
    """A Hardware from its key in HARDWARE (or the Hardware itself); ValueError naming the keys otherwise."""
    if isinstance(hardware, Hardware):
        return hardware
    key = str(hardware).strip().lower()
    if key not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; choose one of: {', '.join(HARDWARE)}")
    return HARDWARE[key]


def choose_precision(hw: Hardware) -> tuple[str, str]:
    """The precision for `hw`, and why: bf16 if native, else fp16 + GradScaler on a GPU, else fp32."""
    if hw.supports_bf16:
        return "bf16", (
            f"precision bf16 (autocast): the {hw.name} runs bf16 natively, and bf16 has fp32's "
            f"range, so no GradScaler is needed"
        )
    if hw.supports_fp16 and hw.kind != "cpu":
        return "fp16", (
            f"precision fp16 (autocast) with a GradScaler: the {hw.name} has fast fp16 but no "
            f"bf16 ({hw.note}); fp16 gradients underflow, so the loss is scaled before backward"
        )
    return "fp32", (
        f"precision fp32: the {hw.name} has no bf16 instructions, so bf16 would be emulated "
        f"through fp32 (slower), and fp16 autocast on a CPU is slower still"
    )
