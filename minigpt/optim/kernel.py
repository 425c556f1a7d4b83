"""AdamW8bit's compiled step on a CPU: the C loop in adamw8bit_kernel.c, built once by the system's C compiler.

torch.compile's fused pass (adamw8bit.fused_update_) reads each chunk twice and costs a Python call per chunk;
the hand-written loop reads every value once, works on a block at a time in the core's cache, and updates
every tensor of a step in one call. kernel_library() compiles it at its first use (about a second; the library
is cached on disk, keyed by the source, the compiler and the CPU) and loads it with ctypes, which hands the
loop the tensors' memory addresses: no copy, and no Python between the blocks.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path

import torch

from minigpt.corpus import default_cache_dir
from minigpt.optim.codes import BLOCK

SOURCE = Path(__file__).with_name("adamw8bit_kernel.c")
# -march=native: this CPU's vector instructions (the library is built where it runs); -ffp-contract=off: no
# multiply-add the source does not ask for, so the loop rounds as written; -fno-math-errno: sqrtf without the
# C library's error bookkeeping, which would keep the compiler from vectorizing it
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC")
DTYPES = {torch.float32: 0, torch.bfloat16: 1}  # the weight and gradient dtypes the loop reads (its FLOAT32, BFLOAT16)
HYPER = 7  # numbers per tensor: adamw8bit.hyper_parameters
# (weight, gradient, m's codes, v's codes, m's scales, v's scales) dtypes the loop reads
ROW_DTYPES = {(p, g, torch.int8, torch.uint8, torch.float32, torch.float32) for p in DTYPES for g in DTYPES}


def c_compiler() -> str | None:
    """The C compiler to build the kernel with: $CC, else cc, gcc or clang on the PATH (None if there is none)."""
    return os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def kernel_unavailable() -> str | None:
    """Why the C kernel cannot be built here, in a phrase; None where it can (Linux and a C compiler)."""
    if sys.platform != "linux":
        return f"the C kernel is built on Linux only (this is {sys.platform})"
    compiler = c_compiler()
    if compiler is None:
        return "there is no C compiler on the PATH (cc, gcc or clang; or set CC)"
    if not shutil.which(compiler):
        return f"the C compiler {compiler!r} (from $CC) is not on the PATH"
    return None


def library_path(compiler: str) -> Path:
    """Where the built library is cached: a name that changes with the source, the flags, the compiler and the
    CPU (-march=native builds for this CPU only)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    cpu = platform.machine()
    if Path("/proc/cpuinfo").exists():  # the model and its instruction sets
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu += "".join([line for line in lines if line.startswith(("model name", "flags"))][:2])
    key = hashlib.sha256("\n".join([SOURCE.read_text(), *FLAGS, compiler, version, cpu]).encode()).hexdigest()
    return default_cache_dir() / "kernels" / f"adamw8bit-{key[:16]}.so"


def build(compiler: str, path: Path) -> None:
    """Compile SOURCE into the shared library `path`: into a temporary file first, then renamed, so another process
    never loads a half-written library."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".so.tmp")
    except OSError as e:
        raise ValueError(
            f"cannot write AdamW8bit's C kernel into {path.parent} ({e.strerror}): "
            "set MINIGPT_CACHE to a writable folder"
        ) from None
    os.close(handle)
    try:
        done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", temporary], capture_output=True, text=True)
        if done.returncode:
            errors = [line for line in done.stderr.splitlines() if line.strip()] or ["(no message)"]
            raise ValueError(
                f"building AdamW8bit's C kernel with {compiler} failed: {errors[-1]} "
                "(it needs a C compiler with OpenMP: gcc, or clang with libomp); train without --compile"
            )
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


@functools.cache
def kernel_library() -> ctypes.CDLL:
    """The built kernel, loaded (built first if this source, compiler and CPU have no cached build yet)."""
    reason = kernel_unavailable()
    if reason:
        raise ValueError(f"AdamW8bit's C kernel cannot be used: {reason}")
    compiler = c_compiler()
    path = library_path(compiler)
    if not path.exists():
        build(compiler, path)
    try:
        return load(path)
    except OSError:  # a library that cannot be loaded (a disk that filled up, an edit): built again, once
        build(compiler, path)
        return load(path)


def load(path: Path) -> ctypes.CDLL:
    """A built library, loaded, its function's arguments declared: update_tensors(n, tensors, dtypes, blocks,
    hyper, threads), the four arrays passed as addresses."""
    library = ctypes.CDLL(str(path))
    library.update_tensors.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int]
    library.update_tensors.restype = None
    return library


def update_whole_blocks(work: list[tuple], threads: int | None = None) -> None:
    """Update the whole blocks of several tensors in one call of the C loop, after checking every tensor.

    `work`: per tensor (param, grad, m_codes, m_scales, v_codes, v_scales, blocks, hyper): contiguous CPU tensors
    (param and grad fp32 or bf16), the number of whole blocks to update from the start, and the seven numbers of
    adamw8bit.hyper_parameters. `threads`: torch's by default."""
    for row in work:  # the loop trusts every address it is given
        param, grad, m_codes, m_scales, v_codes, v_scales, count, hyper = row
        if (param.dtype, grad.dtype, m_codes.dtype, v_codes.dtype, m_scales.dtype, v_scales.dtype) not in ROW_DTYPES:
            raise ValueError(
                "the C kernel updates an fp32 or bf16 weight and gradient with int8 codes of m, uint8 codes of v and "
                f"fp32 scales, not a {param.dtype} weight, a {grad.dtype} gradient, codes {m_codes.dtype} and "
                f"{v_codes.dtype}, scales {m_scales.dtype} and {v_scales.dtype}"
            )
        values = min(param.numel(), grad.numel(), m_codes.numel(), v_codes.numel())
        if not 0 <= count * BLOCK <= values or min(m_scales.numel(), v_scales.numel()) < count or len(hyper) != HYPER:
            raise ValueError(f"the C kernel needs {count} whole blocks ({count * BLOCK} values) and seven numbers")
        if not all(t.is_contiguous() and t.device.type == "cpu" for t in row[:6]):
            raise ValueError("the C kernel updates contiguous CPU tensors")
    update_checked_blocks(work, threads)


def update_checked_blocks(work: list[tuple], threads: int | None = None) -> None:
    """update_whole_blocks without the checks, for tensors known to pass them (AdamW8bit's own: a Python check per
    tensor costs about as much as a thousand values of the loop)."""
    addresses, dtypes, blocks, numbers = array("Q"), array("i"), array("q"), array("f")
    for param, grad, m_codes, m_scales, v_codes, v_scales, count, hyper in work:
        addresses.extend(t.data_ptr() for t in (param, grad, m_codes, m_scales, v_codes, v_scales))
        dtypes.extend((DTYPES[param.dtype], DTYPES[grad.dtype]))
        blocks.append(count)
        numbers.extend(hyper)
    if work:
        buffers = (a.buffer_info()[0] for a in (addresses, dtypes, blocks, numbers))
        kernel_library().update_tensors(len(work), *buffers, threads or torch.get_num_threads())
