"""minigpt.budget: budgets read from text with their unit, --budget auto, and the runtime's own memory."""

import pytest
import torch

from minigpt.budget import (
    AUTO_HEADROOM,
    auto_budget,
    available_bytes,
    parse_budget,
    rss_bytes_of,
    runtime_baseline_bytes,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8GiB", 8 * 2**30), ("8GB", 8 * 10**9), ("8000MiB", 8000 * 2**20), ("1.5 GiB", 3 * 2**29), ("512mib", 2**29)],
)
def test_budget_units_are_read_as_written(text, expected):
    n_bytes, how = parse_budget(text)
    assert n_bytes == expected
    assert f"{expected:,} bytes" in how  # the plan says which unit it read
    assert ("powers of 2" in how) == ("i" in text.lower())


@pytest.mark.parametrize(
    ("text", "says"),
    [("8", "no unit"), ("eight GiB", "not a size"), ("8 parsecs", "unknown unit"), ("0GiB", "zero"), ("", "not a")],
)
def test_a_budget_that_does_not_parse_gets_one_line(text, says):
    with pytest.raises(ValueError, match=says) as err:
        parse_budget(text)
    assert "\n" not in str(err.value)


def test_auto_budget_keeps_the_stated_headroom_of_what_is_free():
    budget, how = auto_budget(torch.device("cpu"))
    free = available_bytes(torch.device("cpu"))
    # free memory moves between the two reads (other processes): allow 5% of it either way
    assert abs(budget - free * (1 - AUTO_HEADROOM)) < 0.05 * free
    assert f"{AUTO_HEADROOM:.0%} headroom" in how


def test_auto_budget_on_cuda_counts_the_allocators_cached_blocks_as_free(monkeypatch):
    """cudaMemGetInfo's free leaves out what PyTorch's allocator reserved and no tensor uses: this process can
    reuse it, so --budget auto in a notebook that trained before still sees it (checked here without a GPU)."""
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 6 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * gib)
    assert available_bytes(torch.device("cuda")) == 14 * gib  # 10 free on the GPU + 4 cached and unused
    budget, how = auto_budget(torch.device("cuda"))
    assert budget == int(14 * gib * (1 - AUTO_HEADROOM)) and "free GPU memory" in how


def test_peak_rss_of_a_child_sees_what_it_allocates():
    # a 200 MiB tensor, touched so its pages are resident, must show in the child's peak RSS
    base = rss_bytes_of("import torch")
    with_tensor = rss_bytes_of("import torch\nx = torch.ones(200 * 2**20, dtype=torch.uint8)")
    assert 195 * 2**20 < with_tensor["now"] - base["now"] < 215 * 2**20  # 200 MiB, give or take a few pages
    assert with_tensor["peak"] >= with_tensor["now"]


def test_runtime_baseline_counts_the_interpreter_and_torch():
    baseline = runtime_baseline_bytes()
    assert 50 * 2**20 < baseline < 2 * 2**30  # torch's libraries alone are tens of MiB resident
