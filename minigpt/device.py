"""Which device to train on (cuda, then mps, then cpu), what it is, and what precision it can run.

`minigpt doctor` prints doctor_rows(): the report a learner pastes into a bug report.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import inspect
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass

import torch

from minigpt import __version__
from minigpt.precision import precision_problem, probe_precision

SUPPORTED_DEVICE_TYPES = ("cuda", "mps", "cpu")


def _mps_available() -> bool:
    return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()


def available_devices() -> list[str]:
    """Every device this machine can train on, best first: cuda:0, cuda:1, ..., mps, cpu."""
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    if _mps_available():
        devices.append("mps")
    return devices + ["cpu"]


def pick_device(requested: str | None = None) -> torch.device:
    """The device to use: None or "auto" picks cuda, then mps, then cpu; a named one must exist here.

    Raises ValueError naming the devices that are available when the requested one is not.
    """
    available = available_devices()
    if requested is None or requested.strip().lower() == "auto":
        return torch.device(available[0].split(":")[0])  # "cuda" (the current GPU), "mps" or "cpu"
    try:
        device = torch.device(requested.strip().lower())
    except RuntimeError as error:
        raise ValueError(
            f"{requested!r} is not a device name ({error}); use auto or one of: {', '.join(available)}"
        ) from None
    if device.type not in SUPPORTED_DEVICE_TYPES:
        raise ValueError(
            f"device type {device.type!r} is not supported by this course; use auto or one of: {', '.join(available)}"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        build = (
            "this torch is a CPU-only build"
            if torch.version.cuda is None and torch.version.hip is None
            else "torch finds no GPU (driver?)"
        )
        raise ValueError(f"device {requested!r} is not available: {build}. Available: {', '.join(available)}")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(
            f"device {requested!r} does not exist: this machine has "
            f"{torch.cuda.device_count()} GPU(s). Available: {', '.join(available)}"
        )
    if device.type == "mps" and not _mps_available():
        raise ValueError(
            f"device {requested!r} is not available (MPS needs an Apple-silicon Mac and a "
            f"torch built with MPS). Available: {', '.join(available)}"
        )
    return device


# ----------------------------------------------------------------------------------------------------------
# What the device is


def _cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _system_ram_bytes() -> int | None:
    """Physical RAM from os.sysconf (Linux, macOS); None where the OS does not say (Windows)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def cpu_bf16_hardware() -> list[str]:
    """The CPU instructions that make bf16 matmuls fast here (AMX-BF16, AVX512-BF16, ARM BF16), if any.

    Without them torch still computes bf16 on the CPU, but by converting to fp32: correct and slow.
    """
    return _cpu_instructions(("amx_bf16", "avx512_bf16", "bf16", "sve_bf16"))


def cpu_fp16_hardware() -> list[str]:
    """The CPU's fp16 arithmetic instructions (AMX-FP16, AVX512-FP16), if any: without them fp16 goes through fp32."""
    return _cpu_instructions(("amx_fp16", "avx512_fp16"))


def _cpu_instructions(names: tuple[str, ...]) -> list[str]:
    """Which of `names` this CPU has: from torch's CPUID reading, or the kernel's flags on an older torch."""
    if hasattr(torch.cpu, "get_capabilities"):
        caps = torch.cpu.get_capabilities()
        return [name for name in names if caps.get(name) is True]
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return []
    return [name for name in names if name in flags]


def _cuda_native_bf16(device: torch.device) -> bool:
    """Native bf16 on this GPU, not the slow emulation torch also accepts (Ampere, sm_80, and newer)."""
    with torch.cuda.device(device):
        if "including_emulation" in inspect.signature(torch.cuda.is_bf16_supported).parameters:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        if torch.version.hip is not None:
            return torch.cuda.is_bf16_supported()
        return torch.cuda.get_device_capability() >= (8, 0)


@dataclass
class DeviceInfo:
    """What a device is and which precisions it can run."""

    type: str  # "cuda", "mps" or "cpu"
    device: str  # as torch names it, e.g. "cuda:0"
    name: str
    total_memory_bytes: int | None  # GPU memory; for mps and cpu the system RAM
    supports_bf16: bool
    bf16_is_fast: bool  # False on CPUs without bf16 instructions: works, but emulated through fp32
    supports_fp16_autocast: bool
    compute_capability: tuple[int, int] | None = None  # cuda only
    note: str = ""

    def describe(self) -> str:
        """One line, e.g. `cuda:0 NVIDIA A100 (sm_80), 40.0 GiB, bf16: yes, fp16 autocast: yes`."""
        name = self.name + (
            f" (sm_{self.compute_capability[0]}{self.compute_capability[1]})" if self.compute_capability else ""
        )
        memory = f"{self.total_memory_bytes / 2**30:.1f} GiB" if self.total_memory_bytes else "memory unknown"
        bf16 = ("yes" if self.bf16_is_fast else "yes, emulated (slow)") if self.supports_bf16 else "no"
        fp16 = "yes" if self.supports_fp16_autocast else "no"
        line = f"{self.device} {name}, {memory}, bf16: {bf16}, fp16 autocast: {fp16}"
        return f"{line} ({self.note})" if self.note else line


def cuda_index(device: torch.device) -> int:
    """The GPU a CUDA device names: its index, or for a bare `cuda` the current GPU (torch's meaning of it)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def device_info(device: torch.device | str | None = None) -> DeviceInfo:
    """Describe `device` (default: the one pick_device() chooses), probing fp16 autocast and bf16 on it."""
    device = pick_device(device) if device is None or isinstance(device, str) else device
    fp16_ok = precision_problem(probe_precision(device, "fp16")) is None
    if device.type == "cuda":
        device = torch.device("cuda", cuda_index(device))
        bf16 = _cuda_native_bf16(device)
        return DeviceInfo(
            type="cuda",
            device=str(device),
            name=torch.cuda.get_device_name(device),
            total_memory_bytes=torch.cuda.get_device_properties(device).total_memory,
            supports_bf16=bf16,
            bf16_is_fast=bf16,
            supports_fp16_autocast=fp16_ok,
            compute_capability=tuple(torch.cuda.get_device_capability(device)),
            note="ROCm" if torch.version.hip is not None else "",
        )
    if device.type == "mps":
        # bf16 on MPS depends on the macOS version (14+) and the torch build: ask by running a bf16 matmul.
        bf16 = precision_problem(probe_precision(device, "bf16-pure")) is None
        return DeviceInfo(
            type="mps",
            device="mps",
            name="Apple GPU (MPS)",
            total_memory_bytes=_system_ram_bytes(),
            supports_bf16=bf16,
            bf16_is_fast=bf16,
            supports_fp16_autocast=fp16_ok,
            note="unified memory: shared with the CPU",
        )
    fast = cpu_bf16_hardware()
    return DeviceInfo(
        type="cpu",
        device="cpu",
        name=_cpu_name(),
        total_memory_bytes=_system_ram_bytes(),
        supports_bf16=True,
        bf16_is_fast=bool(fast),
        supports_fp16_autocast=fp16_ok,
        note=f"bf16 hardware: {', '.join(fast)}" if fast else "no bf16 instructions: bf16 is emulated",
    )


CPU_MATMUL_N = 256  # the matrix size of doctor's 16-bit check: a 16-bit speed-up grows with the size


@functools.lru_cache
def cpu_matmul_slowdown(dtype: torch.dtype, n: int = CPU_MATMUL_N, repeats: int = 5) -> float:
    """How many times slower an n x n matmul runs in `dtype` than in fp32 on this CPU (measured once, cached).

    A CPU without bf16 (or fp16) instructions still computes in that dtype, by converting through fp32:
    correct, and often 10-1000x slower. Measuring answers for this CPU, whatever its flags say. n = 256: at 128
    the fixed cost of a bf16 call hides the kernel (on an AMX CPU bf16 came out 1.3x slower at 128, 2x faster
    at 256); at 1024 an emulated fp16 matmul takes seconds.
    """

    def best_seconds(dt: torch.dtype) -> float:
        a, b = torch.ones(n, n, dtype=dt), torch.ones(n, n, dtype=dt)
        a @ b  # warm-up: the first call may pick or load a kernel
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return min(times)

    return best_seconds(dtype) / max(best_seconds(torch.float32), 1e-9)


# ----------------------------------------------------------------------------------------------------------
# The environment report

DOCTOR_PACKAGES = {  # row label -> distribution name
    "tiktoken": "tiktoken",
    "jupyter (jupyter_core)": "jupyter_core",
    "nbval": "nbval",
    "matplotlib": "matplotlib",
    "numpy": "numpy",
    "tabulate": "tabulate",
}


def package_version(distribution: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def torch_build() -> str:
    """torch's version and what it was built for: CUDA x.y, ROCm x.y or CPU only."""
    if torch.version.cuda is not None:
        return f"{torch.__version__} (CUDA {torch.version.cuda})"
    if torch.version.hip is not None:
        return f"{torch.__version__} (ROCm {torch.version.hip})"
    return f"{torch.__version__} (CPU-only build)"


def executed_on(info: DeviceInfo | None = None, date: datetime.date | None = None) -> str:
    """One line naming the machine a notebook's outputs come from: device, its bf16/fp16 support, torch, date.

    e.g. `Executed on Intel(R) Xeon(R) Processor (2 threads; bf16 native: amx_bf16, avx512_bf16; fp16
    autocast: yes), torch 2.13.0+cpu, 2026-11-24`. `info` defaults to device_info() of the picked device.
    """
    info = info or device_info()
    fp16 = f"fp16 autocast: {'yes' if info.supports_fp16_autocast else 'no'}"
    if info.type == "cpu":
        flags = cpu_bf16_hardware()
        bf16 = f"bf16 native: {', '.join(flags)}" if flags else "bf16: emulated (no bf16 instructions)"
        threads = torch.get_num_threads()
        what = f"{threads} thread{'s' if threads != 1 else ''}; {bf16}; {fp16}"
    else:
        bf16 = "bf16 native: yes" if info.bf16_is_fast else "bf16: no"
        what = f"{bf16}; {fp16}"
        if info.compute_capability:
            what = f"sm_{info.compute_capability[0]}{info.compute_capability[1]}; {what}"
    day = (date or datetime.date.today()).isoformat()
    return f"Executed on {info.name} ({what}), torch {torch.__version__}, {day}"


COURSE_TORCH = (2, 7)  # the oldest torch with everything the chapters use (pyproject.toml says why)
# torch features by the version that brought them, and what needs each: what an older torch (Colab's own) loses
TORCH_FEATURES = (
    ((2, 7), "float8_e8m0fnu", "chapter 1's fp8 scale format (skipped in `minigpt formats`)"),
    ((2, 6), "torch.nn.utils.get_total_norm", "chapter 4's gradient-norm cell"),
    ((2, 4), "F.rms_norm", "the model itself (RMSNorm): nothing trains"),
    ((2, 4), "selective checkpointing", "--checkpointing selective"),
    ((2, 4), "fused AdamW on the CPU", "speed only: AdamW falls back to foreach"),
)


def torch_version_tuple(version: str = torch.__version__) -> tuple[int, int]:
    """(major, minor) of a torch version string such as '2.5.1+cu121'."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def torch_too_old(version: str = torch.__version__) -> str | None:
    """None when torch is new enough for the course; else one line: what is missing and how to upgrade."""
    found = torch_version_tuple(version)
    if found >= COURSE_TORCH:
        return None
    missing = [f"{what} (needs {a}.{b}: {where})" for (a, b), what, where in TORCH_FEATURES if found < (a, b)]
    return (
        f"torch {version} is older than the course's {COURSE_TORCH[0]}.{COURSE_TORCH[1]}; missing: "
        + "; ".join(missing)
        + ". Upgrade with pip install -U 'torch>=2.7' (on Colab: then Runtime > Restart session)"
    )


def doctor_rows() -> list[tuple[str, str]]:
    """(what, value) rows describing this environment and the device training would use."""
    info = device_info(pick_device())
    memory = f"{info.total_memory_bytes / 2**30:.1f} GiB" if info.total_memory_bytes else "unknown"
    rows = [
        ("python", sys.version.split()[0]),
        ("platform", platform.platform()),
        ("minigpt", __version__),
        ("torch", torch_build()),
    ]
    rows += [(label, package_version(dist)) for label, dist in DOCTOR_PACKAGES.items()]
    rows += [
        ("device picked", info.device),
        (
            "device name",
            info.name
            + (f" (sm_{info.compute_capability[0]}{info.compute_capability[1]})" if info.compute_capability else ""),
        ),
        ("device memory", memory + (" (system RAM)" if info.type != "cuda" else "")),
        ("bf16", ("yes" if info.bf16_is_fast else "yes, emulated (slow)") if info.supports_bf16 else "no"),
        ("fp16 autocast", "yes" if info.supports_fp16_autocast else "no"),
        ("CPU threads", f"{torch.get_num_threads()} used by torch, {os.cpu_count()} logical CPUs"),
    ]
    if info.type == "cpu":  # what the flags promise, checked: a 16-bit matmul timed against fp32 on this CPU
        for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            slowdown = cpu_matmul_slowdown(dtype)
            speed = f"{1 / slowdown:.1f}x faster" if slowdown < 1 else f"{slowdown:.1f}x slower"
            rows.append((f"{name} matmul vs fp32 (measured, {CPU_MATMUL_N} x {CPU_MATMUL_N})", speed))
    if info.note:
        rows.append(("device note", info.note))
    old = torch_too_old()
    if old:
        rows.append(("torch too old", old))
    return rows


def check_compile(device: torch.device) -> None:
    """Raise ValueError where torch.compile cannot work: no C++ compiler for CPU kernels, or an Apple GPU."""
    if device.type == "mps":
        raise ValueError("--compile: torch.compile for Apple GPUs (mps) is a prototype in PyTorch; train without it")
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++", "cl")):
        raise ValueError(
            "--compile on the CPU needs a C++ compiler on the PATH (g++ or clang++; on Windows, MSVC's cl): "
            "install one, or train without --compile"
        )
