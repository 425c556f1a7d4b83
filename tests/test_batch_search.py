import functools

import pytest
import torch

from minigpt import memory
from minigpt.batch_search import find_max_batch_size
from minigpt.model import PRESETS

# find_max_batch_size on the CPU: against a budget, with measured memory. "tiny" at ctx 16 takes milliseconds.
TINY, CTX = PRESETS["tiny"], 16


@pytest.fixture
def one_thread():
    """measure() on a model this small is Python overhead: one thread is several times faster than two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@functools.cache  # measure() is deterministic on the CPU; each call runs two real steps
def measured(batch: int) -> int:
    return memory.measure(TINY, batch, CTX).peak  # the step's real high-water mark


def test_find_max_batch_size_returns_the_largest_batch_within_the_budget(one_thread):
    # Halfway between the peaks of batch 6 and 7 (~2 MB apart): far from both, so byte-level noise in the
    # measurement (thread-dependent scratch buffers) cannot move the answer.
    budget = (measured(6) + measured(7)) // 2
    trace = []
    best = find_max_batch_size(TINY, CTX, budget_bytes=budget, high=8, trace=trace)
    assert best == 6
    assert measured(best) <= budget < measured(best + 1)  # it fits, and the next size up does not
    assert [b for b, _, _ in trace] == [1, 5, 7, 6]  # binary search: 1 + log2(8) tries, not 8
    assert all(fits == (p <= budget) for _, fits, p in trace)


def test_find_max_batch_size_returns_0_when_the_smallest_batch_does_not_fit(one_thread):
    static = memory.estimate(TINY, 1, CTX).static  # weights + grads + AdamW: any step needs more
    trace = []
    assert find_max_batch_size(TINY, CTX, budget_bytes=static, high=8, trace=trace) == 0
    assert len(trace) == 1 and trace[0][2] > static  # one try, measured above the budget


def test_find_max_batch_size_on_cpu_needs_a_budget():
    with pytest.raises(ValueError, match="budget_bytes"):
        find_max_batch_size(TINY, CTX)
    with pytest.raises(ValueError, match="low <= high"):
        find_max_batch_size(TINY, CTX, budget_bytes=10**9, low=4, high=2)


def test_out_of_memory_counts_as_does_not_fit_and_other_errors_propagate(monkeypatch):
    """The CUDA path without a GPU: a step that raises torch.OutOfMemoryError is a batch that does not fit."""
    fake = memory.MemoryBreakdown(1, 1, 1, 1, 1, 1, device_peak=100)

    def measure(cfg, batch, ctx, **kwargs):
        if batch > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return fake

    monkeypatch.setattr(memory, "measure", measure)
    trace = []
    assert find_max_batch_size(TINY, CTX, budget_bytes=10**9, high=64, trace=trace) == 5
    assert all(fits == (b <= 5) and (peak is None) == (b > 5) for b, fits, peak in trace)

    def broken(cfg, batch, ctx, **kwargs):
        raise RuntimeError("shape mismatch")  # a bug, not a lack of memory: it must surface

    monkeypatch.setattr(memory, "measure", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        find_max_batch_size(TINY, CTX, budget_bytes=10**9)
