"""The C heap under the CPU tensors: keep a long run's resident memory from creeping up (glibc only).

On the CPU, PyTorch gets tensor memory from the C library's malloc. glibc's malloc serves small and
medium blocks from one big heap that grows upward, and large blocks (over the "mmap threshold") from
pages of their own, handed back to the OS on free. When a block inside the heap is freed, glibc keeps
it for the next malloc instead of returning it: the OS only gets memory back from the heap's very top,
and a few live blocks scattered among the freed ones pin the pages around them. Worse, the threshold
moves: once a large mmapped block is freed, glibc raises the threshold to its size (up to 32 MiB), so
from then on the 8 MiB logits of every micro-batch land in the heap too, and the holes they leave fill
unevenly. A long run, many micro-batches of forward and backward, makes the process's resident memory
(RSS) grow by tens of MiB though no tensor outlives its micro-batch; `benchmarks/bench_accum_rss.py`
measured +9-12% from --accum 1 to 256, and as much from 256 optimizer steps without accumulation.

`tame_heap()` (once, when a run starts) fixes the mmap threshold, so large blocks keep their own pages
and go back to the OS when freed; `release_free_memory()` (malloc_trim(0)) asks glibc to hand back the
free pages anywhere in the heap, not only at its top (forward_backward calls it every few micro-batches on
the CPU). Together, measured: accum 256 within 4% of accum 1 (+9-12% before), for ~2% step time. Both are
no-ops where libc has no such functions (macOS, Windows, musl). Setting MALLOC_MMAP_THRESHOLD_ in the
environment does the same as tame_heap, but glibc reads it only when the process starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
# Above the 1 MiB blocks a 10m micro-batch allocates many times (MLP hidden states), which mmapped cost
# ~15% step time in page faults; below its 8 MiB logits, the blocks that fragment the heap most.
MMAP_THRESHOLD_BYTES = 4 * 2**20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has mallopt and malloc_trim), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("mallopt", "malloc_trim", "gnu_get_libc_version")):
        return None
    return libc


def tame_heap(mmap_threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `mmap_threshold` bytes (it stops moving); False where there is no glibc.

    A threshold set in the environment (MALLOC_MMAP_THRESHOLD_, as `minigpt plan --budget` prints it) is the
    caller's choice, and the plan's prediction assumes it: it is left alone (False)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return set_mmap_threshold(mmap_threshold)


def set_mmap_threshold(mmap_threshold: int) -> bool:
    """mallopt(M_MMAP_THRESHOLD): blocks of at least this many bytes get pages of their own; False without glibc."""
    libc = _glibc()
    return bool(libc and libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold))


def release_free_memory() -> bool:
    """malloc_trim(0): give the heap's free pages back to the OS. True if any were; False without glibc."""
    libc = _glibc()
    return bool(libc and libc.malloc_trim(0))
