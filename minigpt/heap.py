"""The C heap under the CPU tensors: keep a run's resident memory flat in --accum (glibc only).

On the CPU, PyTorch gets tensor memory from the C library's malloc. glibc's malloc serves blocks under the
"mmap threshold" from one big heap, and larger ones from pages of their own, handed back to the OS on free.
A block freed inside the heap stays there for the next malloc: the OS gets memory back only from the heap's
top, and live blocks scattered among the freed ones pin the pages around them. Worse, the threshold moves:
once a large mmapped block is freed, glibc raises the threshold to its size (up to 32 MiB), so from then on
the activations of every micro-batch land in the heap, and the holes they leave fill unevenly. Many
micro-batches in a row then make the resident memory (RSS) creep up though no tensor outlives its
micro-batch: `benchmarks/bench_accum_rss.py` measured +9-12% from --accum 1 to 256 on 10m (2 x 128 tokens).

`tame_heap()`, once when a run starts, fixes the threshold. A run that accumulates micro-batches gets
glibc's own starting value, 128 KiB: every activation-sized block gets pages of its own and gives them back
when freed, and the heap keeps only small things. Measured on 10m, 2 x 128 tokens
(benchmarks/bench_accum_rss.py, RESULTS.md): accum 16, 64 and 256 within 0.2% of each other and 2.2% under
accum 1's run at 4 MiB, the creep gone (with 4 MiB for all of them: +7% at accum 256). The price
is a page fault per new page of those blocks, on every micro-batch, and it grows with the activations: on a
10m step of 8 x 256 tokens it is a large part of the step. So a run of one micro-batch per step, which has
no micro-batches to creep over, gets 4 MiB: fixed, so it stops moving, and large enough that the heap
serves its activations.
A no-op where libc is not glibc (macOS, Windows, musl: their allocators keep their own rules).
MALLOC_MMAP_THRESHOLD_ in the environment does the same, but glibc reads it only when the process starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's starting value, which it would otherwise raise as the run goes
HEAP_THRESHOLD_BYTES = 4 * 2**20  # one micro-batch a step: the heap serves blocks up to 4 MiB, without page faults


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has mallopt), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("mallopt", "gnu_get_libc_version")):
        return None
    return libc


def tame_heap(accumulating: bool = True) -> bool:
    """Fix glibc's mmap threshold (it stops moving): 128 KiB where a step accumulates micro-batches, else 4 MiB.

    False where there is no glibc.

    A threshold set in the environment (MALLOC_MMAP_THRESHOLD_, as `minigpt plan --budget` prints it) is the
    caller's choice, and the plan's prediction assumes it: it is left alone (False)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return set_mmap_threshold(MMAP_THRESHOLD_BYTES if accumulating else HEAP_THRESHOLD_BYTES)


def set_mmap_threshold(mmap_threshold: int) -> bool:
    """mallopt(M_MMAP_THRESHOLD): blocks of at least this many bytes get pages of their own; False without glibc."""
    libc = _glibc()
    return bool(libc and libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold))
