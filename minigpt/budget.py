"""A memory budget for the whole training process: read from text ("8GiB"), or from this machine (--budget auto).

The budget is what the PROCESS may hold, not just its tensors: on a CPU the Python interpreter, torch and its
libraries take their own resident memory before the model's tensors exist (runtime_baseline_bytes measures
it), so a plan for 1 GiB must fit the step's tensors in 1 GiB minus that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

# Units as people write them: GB is a power of ten (how RAM and GPUs are sold), GiB a power of two (how torch,
# nvidia-smi and the course report sizes). A "16 GB" card holds 14.90 GiB.
UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}

# --budget auto keeps this share of the free memory back. On a CPU: the page cache, other processes and the
# kernel's own reserve all move while a run goes on, and glibc's heap keeps freed blocks for reuse, so the
# process's resident peak sits a few percent above its largest set of live tensors. On a GPU: the CUDA
# context and the caching allocator's rounding take a few hundred MiB that no tensor accounts for.
AUTO_HEADROOM = 0.10


def parse_budget(text: str) -> tuple[int, str]:
    """Bytes in a budget such as "8GiB", "8GB", "8000MiB" or "1.5 GiB", and how it was read ("8 GiB = 2^30 ...").

    A number without a unit is refused: 8 could be GB or GiB, which differ by 7%.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text or "")
    if not match:
        raise ValueError(f"--budget {text!r} is not a size; write it like 8GiB, 8GB or 8000MiB")
    number, unit = float(match.group(1)), match.group(2).upper()
    if not unit:
        raise ValueError(f"--budget {text!r} has no unit: write {text}GiB (powers of 2) or {text}GB (powers of 10)")
    if unit not in UNITS:
        raise ValueError(f"--budget {text!r}: unknown unit {match.group(2)!r}; use one of B, MB, GB, MiB, GiB")
    n_bytes = int(number * UNITS[unit])
    if n_bytes < 1:
        raise ValueError(f"--budget {text!r} is zero; give a positive size such as 8GiB")
    kind = "powers of 2" if "I" in unit else "powers of 10"
    return n_bytes, f"{text.strip()} read as {n_bytes:,} bytes ({unit.replace('I', 'i')}: {kind})"


def available_bytes(device: torch.device) -> int:
    """Free memory of the device now: MemAvailable of /proc/meminfo on a CPU; on CUDA, cudaMemGetInfo's free
    plus what PyTorch's caching allocator holds unused (cached blocks are not free to the GPU, but are to us)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + cached)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024  # the kernel writes kB meaning KiB
    except (OSError, KeyError, ValueError):  # not Linux: all physical pages, a looser bound
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def total_bytes(device: torch.device) -> int:
    """All the memory the device has (the machine's RAM for a CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def auto_budget(device: torch.device) -> tuple[int, str]:
    """--budget auto: the device's free memory minus AUTO_HEADROOM of it, and a sentence that says so."""
    free = available_bytes(device)
    budget = int(free * (1 - AUTO_HEADROOM))
    where = "free GPU memory" if device.type == "cuda" else "available RAM (MemAvailable)"
    return budget, (
        f"auto: {free / 2**30:.2f} GiB {where}, minus {AUTO_HEADROOM:.0%} headroom for the allocator, the page "
        f"cache and other processes = {budget / 2**30:.2f} GiB"
    )


def rss_bytes_of(code: str, env: dict[str, str] | None = None) -> dict[str, int]:
    """Resident memory of a fresh Python process after it ran `code`: {"now": its RSS, "peak": its peak RSS}.

    `env` adds environment variables for that process.

    Read from /proc/self/status (VmRSS, VmHWM) where there is one, else getrusage's peak for both.
    """
    probe = code + (
        "\nimport resource, pathlib; s = pathlib.Path('/proc/self/status')"
        "\nf = dict(l.split(':', 1) for l in s.read_text().splitlines()) if s.exists() else {}"
        "\npeak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss"
        "\nprint(f.get('VmRSS', '-1 kB').split()[0], f.get('VmHWM', '-1 kB').split()[0], peak)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    now_kib, hwm_kib, max_rss = (int(v) for v in out.stdout.split()[-3:])
    peak = max_rss if sys.platform == "darwin" else max_rss * 1024  # macOS reports bytes, Linux KiB
    return {"now": now_kib * 1024 if now_kib >= 0 else peak, "peak": hwm_kib * 1024 if hwm_kib >= 0 else peak}


# glibc keeps freed heap blocks for reuse, so a CPU process's resident peak drifts above its largest set of live
# tensors (measured here: +14% on a 30M-parameter step). With this setting every block of 64 KiB or more is
# its own mapping, handed back to the OS when freed, and the peak RSS follows the live tensors the estimate
# predicts. The budget planner measures the runtime and prints its train command with it.
MALLOC_SETTING = {"MALLOC_MMAP_THRESHOLD_": "65536"}

WARM_UP_STEP = """
import gc
import torch
from minigpt.config import TrainConfig
from minigpt.step import build_step_state, train_step
cfg = TrainConfig(preset="125m", n_layer=1, n_embd=64, n_head=1, batch=1, ctx=8, precision="{precision}", verbose=False)
state = build_step_state(cfg.model_config(), cfg, torch.device("cpu"))
x = torch.randint(0, cfg.model_config().vocab_size, (1, 9))
train_step(state, [(x[:, :-1], x[:, 1:])], torch.device("cpu"), cfg.precision, 1.0)
del state, x
gc.collect()
"""


_RUNTIME_BYTES: dict[str, int] = {}  # precision -> measured runtime baseline, once per process
IMPORTED = "imported"  # the key of the runtime before any step: torch and minigpt imported, nothing run


def build_runtime_bytes() -> int:
    """Resident memory of a fresh process that imported torch and minigpt and ran nothing: the runtime while
    train() builds its model, before a step has loaded any kernels (with MALLOC_SETTING). Measured: a 125m
    LoRA build peaks 1-3% above this plus model_build_bytes."""
    if IMPORTED not in _RUNTIME_BYTES:
        measure_runtime_baselines([])
    return _RUNTIME_BYTES[IMPORTED]


def runtime_baseline_bytes(precision: str = "fp32") -> int:
    """Resident memory of the training runtime itself: a fresh process that imported torch and minigpt, ran one
    step of a 1-block model in `precision` and freed it (with MALLOC_SETTING).

    The first step initializes torch's kernels and thread pools for that precision (16-bit kernels bring their
    own), about 90 MiB here that stay for the process's life whatever the model; the model's own tensors are
    gone again. Measured once per process and precision.
    """
    if precision not in _RUNTIME_BYTES:
        measure_runtime_baselines([precision])
    return _RUNTIME_BYTES[precision]


def measure_runtime_baselines(precisions: list[str]) -> None:
    """Measure runtime_baseline_bytes for several precisions at once: one fresh process each, side by side."""
    todo = sorted(set(precisions) - set(_RUNTIME_BYTES)) + ([] if IMPORTED in _RUNTIME_BYTES else [IMPORTED])
    step = {p: "" if p == IMPORTED else WARM_UP_STEP.replace("{precision}", p) for p in todo}
    codes = {p: "import torch\nimport minigpt.train\n" + step[p] for p in todo}
    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:  # each thread waits on its own process
        measured = dict(zip(todo, pool.map(lambda p: rss_bytes_of(codes[p], env=MALLOC_SETTING)["now"], todo)))
    _RUNTIME_BYTES.update(measured)
