"""minigpt.heap: glibc's heap controls, and their no-op where the C library is not glibc."""

import ctypes.util
import platform

import pytest

from minigpt import heap


def test_without_glibc_both_calls_do_nothing_and_say_so(monkeypatch):
    heap._glibc.cache_clear()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "no-such-libc.so.0")
    try:
        assert heap.tame_heap() is False and heap.release_free_memory() is False
    finally:
        heap._glibc.cache_clear()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_on_glibc_the_threshold_is_set_and_trimming_runs():
    heap._glibc.cache_clear()
    assert heap.tame_heap() is True  # mallopt returns 1 on success
    blocks = [bytearray(64 * 1024) for _ in range(200)]  # 12.5 MiB of heap blocks under the threshold
    del blocks[::2]  # holes inside the heap: what malloc_trim can hand back
    assert isinstance(heap.release_free_memory(), bool)


def test_a_threshold_from_the_environment_is_left_alone(monkeypatch):
    # `minigpt plan --budget` prints MALLOC_MMAP_THRESHOLD_=65536 before its command, and its predicted RSS
    # assumes that threshold: train() must not replace it with its own
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.tame_heap() is False
