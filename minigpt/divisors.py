"""The micro-batch sizes a planner may choose: divisors of a batch, found in time that does not grow with it.

A micro-batch must divide the batch (so that accum is a whole number) and fit in memory. Trying every
number up to the batch takes as long as the batch is large (a billion sequences: half a minute); a size
that does not fit is never chosen, so only the sizes up to the largest that fits need trying. That bound
comes from memory, not from the batch: doubling, then halving the gap, finds it in a few dozen tries.
"""

from __future__ import annotations

from collections.abc import Callable

SCAN_ABOVE = 1_000_000  # how far past the largest fitting size to look for the next divisor


def largest_fitting(fits: Callable[[int], bool], most: int) -> int:
    """The largest n in 1..most with fits(n) (0 if even 1 does not fit), for fits that is true up to some n only."""
    if most < 1 or not fits(1):
        return 0
    good, bad = 1, None  # fits(good) holds; fits(bad) does not (None: not found yet)
    while bad is None:  # doubling: 1, 2, 4, ... until one does not fit or the batch is reached
        step = min(2 * good, most)
        if step == good:
            return good
        good, bad = (step, None) if fits(step) else (good, step)
    while bad - good > 1:  # halving the gap between the last size that fits and the first that does not
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def micro_batch_candidates(batch: int, fits: Callable[[int], bool]) -> list[int]:
    """Divisors of `batch`, ascending: every one up to the largest size that fits, and one divisor above it.

    The one above (the next divisor, or `batch` itself when that is more than SCAN_ABOVE away) lets a planner
    say what the next size up would need. `fits(n)` must be true for small n and false from some n on.
    """
    if batch < 1:
        raise ValueError(f"the batch must be at least 1 sequence, got {batch}")
    limit = largest_fitting(fits, batch)
    found = [m for m in range(1, limit + 1) if batch % m == 0]
    above = next((m for m in range(limit + 1, min(batch, limit + SCAN_ABOVE) + 1) if batch % m == 0), batch)
    return found if limit == batch else [*found, above]
