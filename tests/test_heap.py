"""minigpt.heap: glibc's mmap threshold fixed, and a no-op where the C library is not glibc."""

import ctypes.util
import platform

import pytest

from minigpt import heap


def test_without_glibc_taming_does_nothing_and_says_so(monkeypatch):
    heap._glibc.cache_clear()
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "no-such-libc.so.0")
    try:
        assert heap.tame_heap() is False
    finally:
        heap._glibc.cache_clear()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_on_glibc_the_threshold_is_set(monkeypatch):
    heap._glibc.cache_clear()
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert heap.tame_heap() is True  # mallopt returns 1 on success


def test_a_threshold_from_the_environment_is_left_alone(monkeypatch):
    # `minigpt plan --budget` prints MALLOC_MMAP_THRESHOLD_=65536 before its command, and its predicted RSS
    # assumes that threshold: train() must not replace it with its own
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.tame_heap() is False
