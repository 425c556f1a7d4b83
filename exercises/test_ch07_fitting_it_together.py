"""Grades chapter 7: binary-search find_max_batch_size, a small planner, and catching out-of-memory.

The predicates and predictors here are plain functions, so the answers are the same on every machine.
"""

import functools
import gc
import math
import weakref

import pytest
import torch

from minigpt import memory
from minigpt.model import PRESETS
from minigpt.plan import plan

CHAPTER = "ch07_fitting_it_together"
HINTS = {  # the hints of solutions/ch07_fitting_it_together.py, shown under a wrong answer
    "7.1": "lo always fits, everything above hi fails; halve [lo, hi] until lo == hi",
    "7.2": "divisors of effective_batch; first mode with a fitting divisor; its largest one",
    "7.3": 'catch only out-of-memory (torch.OutOfMemoryError, or "out of memory" in the message)',
}


def _search_watched(answers, threshold, low, high):
    """In the worker: the learner's search on `batch <= threshold`; return (result, batches tried)."""
    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= threshold

    return answers.find_max_batch_size(fits, low=low, high=high), tried


def _search(answers, threshold, low, high):
    return answers.run(_search_watched, threshold, low, high)


@pytest.mark.exercise("7.1", points=3)
def test_binary_search_finds_the_largest_batch(answers):
    for low, high in ((1, 256), (1, 1), (4, 9), (3, 1000)):
        for threshold in sorted({low, low + 1, (low + high) // 2, high - 1, high, high + 50, 2 * low + 1}):
            got, tried = _search(answers, threshold, low, high)
            want = min(threshold, high) if threshold >= low else 0
            assert got == want, (
                f"find_max_batch_size(low={low}, high={high}) returned {got} when every batch "
                f"<= {threshold} fits; expected {want}"
            )
            assert all(low <= b <= high for b in tried), f"tried batches outside [{low}, {high}]: {tried}"
            budget = math.ceil(math.log2(high - low + 1)) + 2  # a binary search, plus the check of `low`
            assert len(tried) <= budget, (
                f"{len(tried)} tries for a range of {high - low + 1} batches, a binary search needs at most "
                f"{budget}: each try can be a whole training step"
            )


@pytest.mark.exercise("7.1", points=1)
def test_nothing_fits_returns_zero(answers):
    got, tried = _search(answers, threshold=0, low=1, high=64)
    assert got == 0, f"even batch 1 does not fit: return 0, not {got}"
    assert len(tried) <= 2, "when `low` does not fit there is nothing to search"


class LinearPeak:
    """A fake predictor: static bytes + bytes per sequence, by checkpointing mode."""

    def __init__(self, static: int, per_sample: dict[str, int]) -> None:
        self.static, self.per_sample = static, per_sample

    def __call__(self, micro_batch: int, mode: str) -> int:
        return self.static + self.per_sample[mode] * micro_batch


def _linear(static, per_sample):
    return LinearPeak(static, per_sample)


@pytest.mark.exercise("7.2", points=3)
def test_planner_rules(answers):
    predict = _linear(1000, {"none": 100, "selective": 40, "full": 10})
    p = answers.plan_micro_batch(12, 1550, predict)  # none: 5 would fit, but 5 does not divide 12
    assert (p["micro_batch"], p["accum"], p["checkpointing"], p["fits"]) == (4, 3, "none", True), (
        f"budget 1550 fits up to 5 sequences without checkpointing, but the micro-batch must divide 12: "
        f"expected micro-batch 4, accum 3, no checkpointing; got {p}"
    )
    assert p["predicted_peak_bytes"] == 1400
    p = answers.plan_micro_batch(16, 1090, predict)  # none does not fit even 1; selective fits 2
    assert (p["micro_batch"], p["accum"], p["checkpointing"], p["fits"]) == (2, 8, "selective", True), (
        f"without checkpointing micro-batch 1 needs 1100 > 1090: the cheapest mode that fits is selective, "
        f"with micro-batch 2 (1080); got {p}"
    )
    p = answers.plan_micro_batch(16, 1005, predict)
    assert (p["micro_batch"], p["checkpointing"], p["fits"]) == (1, "full", False), (
        f"nothing fits in 1005 bytes: report micro-batch 1 in the mode that needs least, fits=False; got {p}"
    )
    assert p["accum"] == 16 and p["predicted_peak_bytes"] == 1010, (
        f"nothing fits: expected accum 16 and predicted_peak_bytes 1010 (micro-batch 1 with full); got {p}"
    )


@pytest.mark.exercise("7.2", points=1)
def test_planner_edge_cases(answers):
    predict = _linear(1000, {"none": 100, "selective": 40, "full": 10})
    p = answers.plan_micro_batch(12, 1400, predict)  # micro-batch 4 needs exactly the budget: it fits
    assert (p["micro_batch"], p["checkpointing"], p["predicted_peak_bytes"]) == (4, "none", 1400), (
        f"with a budget of 1400 bytes, micro-batch 4 without checkpointing needs exactly 1400: a peak equal to "
        f"the budget fits (<=); expected micro-batch 4, got {p}"
    )
    # The modes in another order than their memory order: the planner follows the order it is given.
    p = answers.plan_micro_batch(12, 10_000, predict, modes=("full", "none"))
    assert (p["micro_batch"], p["checkpointing"]) == (12, "full"), (
        f"modes=('full', 'none'): the first mode given, full, already fits micro-batch 12; expected "
        f"(12, 'full'), got ({p['micro_batch']}, {p['checkpointing']!r}): take the modes in the order given"
    )
    p = answers.plan_micro_batch(6, 1005, predict, modes=("selective", "full", "none"))
    assert (p["micro_batch"], p["checkpointing"], p["fits"], p["predicted_peak_bytes"]) == (1, "full", False, 1010), (
        f"modes=('selective', 'full', 'none') and nothing fits in 1005 bytes: micro-batch 1 needs 1040, 1010 and "
        f"1100 bytes; expected the smallest, full (1010), with fits=False; got {p}"
    )


def _estimated_peak(batch, mode, preset, ctx, precision, device):
    return memory.estimate(PRESETS[preset], batch, ctx=ctx, precision=precision, device=device, checkpointing=mode).peak


@pytest.mark.exercise("7.2", points=1)
def test_planner_agrees_with_minigpt_plan(answers):
    compared = 0
    for preset, hardware, ctx in (("10m", "t4", 256), ("30m", "t4", 512), ("125m", "a100-80", 1024)):
        reference = plan(preset, hardware, ctx, 128)
        if not (reference.fits and reference.checkpointing == "none"):
            continue  # the package weighs checkpointing modes by time too; compare the plain case only
        peak = functools.partial(
            _estimated_peak, preset=preset, ctx=ctx, precision=reference.precision, device=reference.hardware.kind
        )
        p = answers.plan_micro_batch(128, reference.usable_bytes, peak)
        assert (p["micro_batch"], p["accum"], p["checkpointing"]) == (reference.micro_batch, reference.accum, "none"), (
            f"{preset} on {hardware}: minigpt.plan chose micro-batch {reference.micro_batch} x accum "
            f"{reference.accum}, yours {p['micro_batch']} x {p['accum']} ({p['checkpointing']})"
        )
        compared += 1
    assert compared, "no case to compare with minigpt.plan"


def _step_that_runs():
    return torch.zeros(4).sum()


def _cuda_oom():
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def _mps_oom():
    raise RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB)")


def _freed_watched(answers):
    """In the worker: does step_fits free what an out-of-memory step held? The step keeps 4 MB in its frame, and
    its frame and its error hold each other (as a real step's often do), so only the garbage collector frees
    them, once nothing else refers to the error: after the except block. Automatic collection is off."""
    held = []

    def step():
        activations = torch.empty(2**20)
        held.append(weakref.ref(activations))
        error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        raise error

    gc.collect()
    gc.disable()
    try:
        fits = answers.step_fits(step)
        return {"fits": fits, "freed": held[0]() is None}
    finally:
        gc.enable()


@pytest.mark.exercise("7.3", points=2)
def test_out_of_memory_means_does_not_fit(answers):
    assert answers.step_fits(_step_that_runs) is True, "a step that runs fits"
    assert answers.step_fits(_cuda_oom) is False, "torch.OutOfMemoryError means the batch does not fit: return False"
    assert answers.step_fits(_mps_oom) is False, "a RuntimeError saying 'out of memory' (MPS) means it does not fit"
    seen = answers.run(_freed_watched)
    assert seen["fits"] is False and seen["freed"], (
        "after an out-of-memory error the failed step's tensors are still alive: leave the except block (its "
        "traceback keeps them), then gc.collect(), so that the next, smaller try has the memory"
    )


def _raising_step_watched(answers, error):
    """In the worker: step_fits on a step that raises `error`; what came out of it."""

    def step():
        raise error

    try:
        returned = answers.step_fits(step)
    except Exception as raised:  # noqa: BLE001 - which error, and whether it is the step's own, is the point
        return {"raised": type(raised).__name__, "same": raised is error}
    return {"returned": returned}


@pytest.mark.exercise("7.3", points=2)
def test_other_errors_are_not_swallowed(answers):
    assert answers.step_fits(_step_that_runs) is True, "a step that runs fits"
    for error in (
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x32 and 64x32)"),
        ValueError("ctx=300 is longer than the model's ctx=256"),
    ):
        seen = answers.run(_raising_step_watched, error)
        assert "returned" not in seen, (
            f"step_fits returned {seen.get('returned')!r} for a step that raised {error!r}: a bug is not 'does not "
            f"fit'; catch only out-of-memory errors and re-raise the others, or a search would quietly return 0"
        )
        assert seen["same"], (
            f"step_fits should let the step's own error through, got a {seen['raised']} instead of {error!r}"
        )
