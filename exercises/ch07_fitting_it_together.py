# Chapter 7 exercises, generated from solutions/ch07_fitting_it_together.py by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k 7.1      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
"""Chapter 7 exercises: find the largest batch that fits, and plan a run for a memory budget.

Each function is one exercise; its docstring states the task.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch


def find_max_batch_size(fits: Callable[[int], bool], low: int = 1, high: int = 256) -> int:
    """Exercise 7.1: the largest batch in [low, high] for which fits(batch) is True, by binary search.

    fits is monotone (if a batch fits, every smaller one does), and each call may be a real training
    step, so call it about log2(high - low) times, with whole numbers only, never outside [low, high].
    Check `low` first: when even `low` does not fit, return 0 without trying anything else. Careful with
    the middle: with lo known to fit, mid = (lo + hi) // 2 can equal lo, and a loop that sets lo = mid
    then never ends; round up instead. Should fits not be monotone after all (a step that fails now and
    then), the search still ends on an edge it saw: a batch that fits whose next batch does not (or that
    is `high`).

    Returns: an int: the largest batch in [low, high] that fits (high when every batch fits), or 0 when
        `low` does not fit.
    In place: nothing.
    Raises: ValueError if low < 1 or high < low.
    """
    raise NotImplementedError(
        "Exercise 7.1: lo always fits, everything above hi fails; halve [lo, hi] until lo == hi"
        " - see chapters/07_fitting_it_together.ipynb"
    )


def plan_micro_batch(
    effective_batch: int,
    budget_bytes: int,
    predict_peak: Callable[[int, str], int],
    modes: tuple[str, ...] = ("none", "selective", "full"),
) -> dict:
    """Exercise 7.2: a small planner: micro-batch, accumulation and checkpointing for a memory budget.

    predict_peak(micro_batch, mode) is the predicted peak bytes of one step (e.g. minigpt.memory.estimate
    (...).peak). `modes` are checkpointing modes from cheapest to most memory-saving. Rules:
      - the micro-batch must divide effective_batch (accum = effective_batch // micro_batch exactly);
      - take the first mode in `modes` in which some micro-batch fits (checkpointing only when needed),
        and in it the largest micro-batch whose predicted peak <= budget_bytes;
      - if nothing fits: micro_batch 1 in the mode with the smallest predicted peak (the first such mode
        in `modes` when several tie), and fits=False.

    Returns: a dict {"micro_batch": int, "accum": int, "checkpointing": the mode chosen (one of modes),
        "predicted_peak_bytes": predict_peak(micro_batch, that mode), "fits": bool}, with
        micro_batch * accum == effective_batch.
    In place: nothing.
    Raises: ValueError if effective_batch < 1.
    Raises: ValueError if modes is empty.
    """
    raise NotImplementedError(
        "Exercise 7.2: divisors of effective_batch; first mode with a fitting divisor; its largest one"
        " - see chapters/07_fitting_it_together.ipynb"
    )


def step_fits(run_step: Callable[[], object]) -> bool:
    """Exercise 7.3: run one training step; True if it ran, False if it ran out of memory.

    Running out of memory is an answer ("this batch does not fit"), not a crash: catch it. CUDA raises
    torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), which means out of memory whatever its message;
    MPS and older versions raise a RuntimeError whose message contains "out of memory" (in any mix of
    upper and lower case). Any other error is a bug in the step: let that very error propagate. Call
    run_step exactly once. After an out-of-memory error, free what the failed step held before the next
    try: leave the except block (its traceback keeps the step's tensors alive), then gc.collect() and, on
    a GPU, torch.cuda.empty_cache().

    Returns: a bool: True if run_step() returned (whatever it returned), False if it ran out of memory.
    In place: nothing.
    Raises: nothing of its own (an error of the step that is not out of memory goes through unchanged).
    """
    raise NotImplementedError(
        'Exercise 7.3: catch only out-of-memory (torch.OutOfMemoryError, or "out of memory" in the message)'
        " - see chapters/07_fitting_it_together.ipynb"
    )
