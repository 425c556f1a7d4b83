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
@pytest.mark.parametrize("accumulating, threshold", [(True, 128 * 1024), (False, 4 * 2**20)])
def test_on_glibc_the_threshold_is_set(monkeypatch, accumulating, threshold):
    heap._glibc.cache_clear()
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    asked = []
    monkeypatch.setattr(heap, "set_mmap_threshold", lambda n: asked.append(n) or True)
    assert heap.tame_heap(accumulating) is True
    assert asked == [threshold]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_mallopt_takes_the_threshold(monkeypatch):
    heap._glibc.cache_clear()
    assert heap.set_mmap_threshold(heap.MMAP_THRESHOLD_BYTES) is True  # mallopt returns 1 on success


def test_train_tames_the_heap_for_its_micro_batches(monkeypatch):
    """train() asks for the 128 KiB threshold only when a step accumulates micro-batches."""
    from minigpt import train as train_module
    from minigpt.config import TrainConfig

    asked = []
    monkeypatch.setattr(train_module, "tame_heap", lambda accumulating: asked.append(accumulating))
    for accum in (1, 2):
        cfg = TrainConfig(preset="tiny", batch=1, ctx=16, accum=accum, steps=1, eval_batches=1, sample_tokens=0)
        train_module.train(cfg)
    assert asked == [False, True]


def test_a_threshold_from_the_environment_is_left_alone(monkeypatch):
    # `minigpt plan --budget` prints MALLOC_MMAP_THRESHOLD_=65536 before its command, and its predicted RSS
    # assumes that threshold: train() must not replace it with its own
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert heap.tame_heap() is False
