"""Grades chapter 7: binary-search find_max_batch_size, a small planner, and catching out-of-memory.

The predicates and predictors here are plain functions, so the answers are the same on every machine.
"""

import copy
import functools
import gc
import math
import weakref
from dataclasses import dataclass

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


@dataclass(frozen=True)
class LinearPeak:
    """A fake predictor: static bytes + bytes per sequence, by checkpointing mode (a dataclass: it pickles, and
    its fields name it in a contract case's key)."""

    static: int
    per_sample: dict[str, int]

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


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract).
# Everything here is whole numbers and plain Python: the outcomes are exact on every machine (no tolerance).

from minigpt.grading.contract import Case  # noqa: E402

RETURNS_7_1 = (
    "Returns: an int: the largest batch in [low, high] that fits (high when every batch fits), or 0 when "
    "`low` does not fit."
)
RAISES_7_1 = "Raises: ValueError if low < 1 or high < low."
NOTHING_IN_PLACE = "In place: nothing."


class SearchBroke(AssertionError):
    """A try of the search that breaks the exercise's rules (outside [low, high], not a whole number, too many)."""


@dataclass(frozen=True)
class UpTo:
    """A monotone fits(): every batch up to `threshold` fits."""

    threshold: int

    def __call__(self, batch: int) -> bool:
        return batch <= self.threshold


@dataclass(frozen=True)
class OneOf:
    """A fits() that is not monotone: exactly the batches in `fitting` fit (a flaky step)."""

    fitting: tuple[int, ...]

    def __call__(self, batch: int) -> bool:
        return batch in self.fitting


def _search_checked(function, fits, *args, **kwargs):
    """find_max_batch_size(fits, ...) with each try checked: a whole number in [low, high], and no more tries than a
    binary search makes (ceil(log2(high - low + 1)) and the check of `low`, and one to spare). A try that breaks a
    rule ends the call with SearchBroke, so the case fails saying what was tried (and a search that never ends,
    ends)."""
    bounds = {"low": 1, "high": 256, **dict(zip(("low", "high"), args)), **kwargs}
    low, high = bounds["low"], bounds["high"]
    budget = math.ceil(math.log2(max(high - low + 1, 1))) + 2
    tried = []

    def watched(batch):
        tried.append(batch)
        if type(batch) is not int:
            raise SearchBroke(f"fits({batch!r}): try whole batches (int) only; tried {tried}")
        if not low <= batch <= high:
            raise SearchBroke(f"fits({batch}) is outside [low, high] = [{low}, {high}]; tried {tried}")
        if len(tried) > budget:
            raise SearchBroke(
                f"more than {budget} tries for {high - low + 1} batches: a binary search needs at most {budget} "
                f"(each try can be a whole training step); tried {tried}"
            )
        return fits(batch)

    return function(watched, *args, **kwargs)


def _search_ends_on_an_edge(function, fits, *args, **kwargs) -> dict:
    """For a fits() that is not monotone: whether the search ended on an edge it saw, as the docstring promises (a
    batch that fits whose next one does not, or `high`; 0 when `low` does not fit). Which edge depends on where
    the search looked, so only that is compared, not the batch."""
    found = _search_checked(function, fits, *args, **kwargs)
    bounds = {"low": 1, "high": 256, **dict(zip(("low", "high"), args)), **kwargs}
    low, high = bounds["low"], bounds["high"]
    if not fits(low):
        on_edge = found == 0
    else:
        on_edge = low <= found <= high and fits(found) and (found == high or not fits(found + 1))
    return {"an int": type(found) is int, "a batch that fits whose next one does not (or high)": on_edge}


def _search_each(function, each_fits: tuple, *args, **kwargs) -> dict:
    """_search_checked for each fits() of a tuple (thresholds on one range, in one call of the worker): {"fits up
    to N": the batch found}."""
    return {f"fits up to {fits.threshold}": _search_checked(function, fits, *args, **kwargs) for fits in each_fits}


def _cases_7_1() -> list[Case]:
    def up_to(*thresholds: int) -> tuple[UpTo, ...]:
        return tuple(UpTo(t) for t in thresholds)

    # Monotone fits: thresholds below `low`, at both ends and in the middle of ranges with low above 1, low == high,
    # a range of 2, and the defaults (1, 256); test_binary_search_finds_the_largest_batch tries more of them. The
    # batch is exact; the tries are checked by _search_checked.
    cases = [
        Case(
            "find_max_batch_size", (up_to(9)[0], 3, 17), drive=_search_checked, promise=(RETURNS_7_1, NOTHING_IN_PLACE)
        ),
        Case("find_max_batch_size", (up_to(0, 2, 3, 4, 16, 17, 60), 3), {"high": 17}, drive=_search_each),
        Case("find_max_batch_size", (up_to(4, 5, 9), 5, 5), drive=_search_each),
        Case("find_max_batch_size", (up_to(0, 1), 1, 1), drive=_search_each),
        Case("find_max_batch_size", (up_to(1, 2, 3, 4), 2, 3), drive=_search_each),
        Case("find_max_batch_size", (up_to(6, 7, 150, 299),), {"low": 7, "high": 300}, drive=_search_each),
        Case("find_max_batch_size", (up_to(0, 200, 999),), drive=_search_each),  # the defaults of low and high
    ]
    # fits that is not monotone: a fitting island above a gap, a gap below `high`, `low` alone failing.
    for low, high, fitting in (
        (2, 40, (2, 3, 4, 5, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 33)),
        (1, 64, (*range(1, 11), *range(40, 65))),
        (4, 20, (5, 6, 7, 20)),
        (6, 9, (6, 8, 9)),
    ):
        fits = OneOf(fitting)
        cases.append(Case("find_max_batch_size", (fits,), {"low": low, "high": high}, drive=_search_ends_on_an_edge))
    everything = up_to(10**6)[0]
    for low, high in ((0, 10), (5, 4)):
        cases.append(Case("find_max_batch_size", (everything, low, high), drive=_search_checked, promise=RAISES_7_1))
    return cases


@dataclass(frozen=True)
class ModePeak:
    """A fake predictor with static bytes of its own per mode (recomputation buffers, say): ties and a cheapest
    mode that is neither the first nor the last are possible."""

    static: dict[str, int]
    per_sample: dict[str, int]

    def __call__(self, micro_batch: int, mode: str) -> int:
        return self.static[mode] + self.per_sample[mode] * micro_batch


def _unchanged_plain_args(function, *args, **kwargs):
    """function(*args, **kwargs), and a check that it left its plain arguments (dicts, lists) as they were: the
    contract sees a change to a tensor, not to a dict."""
    before = copy.deepcopy((args, kwargs))
    result = function(*args, **kwargs)
    if (args, kwargs) != before:
        raise AssertionError(f"the call changed its arguments: {before} became {(args, kwargs)}; leave them as given")
    return result


def _cases_7_2() -> list[Case]:
    linear = LinearPeak(1000, {"none": 100, "selective": 40, "full": 10})
    gib, mib = 2**30, 2**20
    big = LinearPeak(3 * gib, {"none": 700 * mib, "selective": 260 * mib, "full": 90 * mib})
    returns = (
        'Returns: a dict {"micro_batch": int, "accum": int, "checkpointing": the mode chosen (one of modes), '
        '"predicted_peak_bytes": predict_peak(micro_batch, that mode), "fits": bool}, with micro_batch * accum == '
        "effective_batch."
    )
    cases = [
        Case("plan_micro_batch", (12, 1550, linear), promise=(returns, NOTHING_IN_PLACE)),  # 5 fits, 4 divides
        Case("plan_micro_batch", (12, 1400, linear)),  # 4 needs exactly the budget: <= fits
        Case("plan_micro_batch", (12, 1399, linear)),  # one byte less: 3
        Case("plan_micro_batch", (16, 1090, linear)),  # none fails at 1; selective fits 2
        Case("plan_micro_batch", (7, 10_000, linear)),  # a prime: 7 itself
        Case("plan_micro_batch", (7, 1060, linear)),  # a prime: 1, with selective
        Case("plan_micro_batch", (1, 900, linear)),  # nothing fits, effective batch 1
        Case("plan_micro_batch", (16, 1005, linear)),  # nothing fits: full, the smallest at 1
        Case("plan_micro_batch", (36, 10 * gib, big)),  # realistic sizes: none fits 10, 9 divides 36
        Case("plan_micro_batch", (36, 5 * gib, big)),  # none fits 2 (3 GiB + 1.4 GiB)
        Case("plan_micro_batch", (64, 3 * gib + 50 * mib, big)),  # none and selective fail at 1; full fits nothing
        Case("plan_micro_batch", (12, 10_000, linear), {"modes": ("full", "none")}),  # the order given: full first
        Case("plan_micro_batch", (24, 1200, linear), {"modes": ("selective",)}),  # one mode: 5 fits, 4 divides
        Case("plan_micro_batch", (6, 1005, linear), {"modes": ("selective", "full", "none")}),  # nothing fits
        Case("plan_micro_batch", (30, 2000, linear), {"modes": ("none", "full")}),  # none fits 10: 10
    ]
    # Nothing fits and the cheapest mode at micro-batch 1 is in the middle, or shared by two modes (the first in
    # `modes` wins a tie); the middle mode fits when the budget allows.
    middle = ModePeak({"none": 1000, "selective": 900, "full": 960}, {"none": 100, "selective": 60, "full": 10})
    steep = ModePeak({"none": 1200, "selective": 1000, "full": 1000}, {"none": 100, "selective": 40, "full": 10})
    tied = ModePeak({"none": 1100, "selective": 1000, "full": 1030}, {"none": 100, "selective": 40, "full": 10})
    cases += [
        Case("plan_micro_batch", (8, 950, middle)),  # at 1: 1100, 960, 970: selective, fits=False
        Case("plan_micro_batch", (8, 1020, middle)),  # selective fits 2 (1020); full would fit 6 but comes later
        Case("plan_micro_batch", (18, 1290, steep)),  # none fails at 1; selective fits 7, not a divisor of 18: 6
        Case("plan_micro_batch", (10, 1039, tied)),  # at 1: 1200, 1040, 1040: selective, the first of the tie
        Case("plan_micro_batch", (10, 1039, tied), {"modes": ("full", "selective", "none")}),  # now full
        Case("plan_micro_batch", (10, 1040, tied), {"modes": ("none", "full", "selective")}),  # full fits 1
    ]
    cases = [Case(c.function, c.args, c.kwargs, drive=_unchanged_plain_args, promise=c.promise) for c in cases]
    for batch in (0, -4):
        cases.append(
            Case("plan_micro_batch", (batch, 10_000, linear), promise="Raises: ValueError if effective_batch < 1.")
        )
    cases.append(
        Case("plan_micro_batch", (12, 10_000, linear), {"modes": ()}, promise="Raises: ValueError if modes is empty.")
    )
    return cases


@dataclass
class Step:
    """A training step for step_fits: it counts its calls, and either returns `returns` or raises `error`(message)
    (kept in .raised, so that a drive can tell the step's own error from another)."""

    error: type[BaseException] | None = None
    message: str = ""
    returns: object = None

    def __post_init__(self) -> None:
        self.calls, self.raised = 0, None

    def __call__(self):
        self.calls += 1
        if self.error is None:
            return self.returns
        self.raised = self.error(self.message)
        raise self.raised


def _step_once(function, step: Step):
    """step_fits(step), checking that it ran the step exactly once, and that an error coming out of it is the
    step's own (not a new one, not a wrapper)."""
    try:
        fits = function(step)
    except Exception as error:
        if error is not step.raised:
            raise AssertionError(
                f"step_fits raised {type(error).__name__}({error}), not the step's own "
                f"{type(step.raised).__name__ if step.raised is not None else 'error'}: let the step's error through "
                f"as it is (a bare `raise`)"
            ) from None
        raise
    finally:
        if step.calls != 1:
            raise AssertionError(f"step_fits ran the step {step.calls} times: run it once, each try is a real step")
    return fits


def _cases_7_3() -> list[Case]:
    returns = "Returns: a bool: True if run_step() returned (whatever it returned), False if it ran out of memory."
    raises = "Raises: nothing of its own (an error of the step that is not out of memory goes through unchanged)."
    # The plain CUDA and MPS messages are test_out_of_memory_means_does_not_fit's: here, the other ways to see it.
    oom = Step(torch.OutOfMemoryError, "Tried to allocate 2.00 GiB (GPU 0; 14.75 GiB total capacity)")  # no phrase
    cases = [
        Case(
            "step_fits", (Step(returns=torch.zeros(3)),), drive=_step_once, promise=(returns, NOTHING_IN_PLACE, raises)
        ),
        Case("step_fits", (oom,), drive=_step_once, promise=(returns, NOTHING_IN_PLACE, raises)),
    ]
    steps = [
        Step(returns=None),
        Step(returns=False),  # the step's value is not the answer: it ran, so it fits
        Step(returns=0),
        Step(RuntimeError, "Out Of Memory: could not allocate 3.00 GB on the device"),  # any letter case
        # Errors that are bugs, not "does not fit": through, as they are
        Step(RuntimeError, "mat1 and mat2 shapes cannot be multiplied (4x32 and 64x32)"),
        Step(RuntimeError, "CUDA error: an illegal memory access was encountered"),  # memory, but not out of it
        Step(ValueError, "ctx=300 is longer than the model's ctx=256"),
        Step(TypeError, "forward() got an unexpected keyword argument 'labels'"),
    ]
    return cases + [Case("step_fits", (step,), drive=_step_once) for step in steps]


CONTRACTS = {"7.1": _cases_7_1, "7.2": _cases_7_2, "7.3": _cases_7_3}


@pytest.mark.exercise("7.1", points=1)
def test_7_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["7.1"]())


@pytest.mark.exercise("7.2", points=1)
def test_7_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["7.2"]())


@pytest.mark.exercise("7.3", points=1)
def test_7_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["7.3"]())
