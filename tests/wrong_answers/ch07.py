"""Wrong answers to chapter 7's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 7.1 find_max_batch_size
    "7.1: nothing fits returns low - 1, not 0": Mistake(
        "7.1",
        "find_max_batch_size",
        "",
        ("    if not fits(low):\n        return 0\n", "    if not fits(low):\n        return low - 1\n"),
    ),
    "7.1: low == high returned without trying it": Mistake(
        "7.1",
        "find_max_batch_size",
        "",
        (
            "    if not fits(low):\n        return 0\n",
            "    if low == high:\n        return low\n    if not fits(low):\n        return 0\n",
        ),
    ),
    "7.1: the search stops with two batches left": Mistake(
        "7.1",
        "find_max_batch_size",
        "",
        ("    while lo < hi:\n", "    while lo + 1 < hi:\n"),
    ),
    "7.1: high itself never tried": Mistake(
        "7.1", "find_max_batch_size", "", ("    lo, hi = low, high\n", "    lo, hi = low, high - 1\n")
    ),
    "7.1: the search starts at 1, whatever low is": Mistake(
        "7.1", "find_max_batch_size", "", ("    lo, hi = low, high\n", "    lo, hi = 1, high\n")
    ),
    "7.1: no check of low and high": Mistake(
        "7.1",
        "find_max_batch_size",
        "",
        ("    if low < 1 or high < low:\n        raise ValueError(", "    if False:\n        raise ValueError("),
    ),
    "7.1: every batch from high down tried once the range is small": Mistake(
        "7.1",
        "find_max_batch_size",
        "",
        [
            ("    while lo < hi:\n", "    while hi - lo > 8:\n"),
            (
                "            hi = mid - 1\n    return lo\n",
                "            hi = mid - 1\n    for batch in range(hi, lo, -1):  # a few left: try them all\n"
                "        if fits(batch):\n            return batch\n    return lo\n",
            ),
        ],
    ),
    # --- 7.2 plan_micro_batch
    "7.2: accum as a float": Mistake(
        "7.2", "plan_micro_batch", "", ('"accum": effective_batch // micro,', '"accum": effective_batch / micro,')
    ),
    "7.2: the peak of the first mode reported": Mistake(
        "7.2",
        "plan_micro_batch",
        "",
        (
            '"predicted_peak_bytes": predict_peak(micro, mode),',
            '"predicted_peak_bytes": predict_peak(micro, modes[0]),',
        ),
    ),
    "7.2: a tie for the smallest peak goes to the last mode": Mistake(
        "7.2",
        "plan_micro_batch",
        "",
        (
            "    mode = min(peaks, key=peaks.get)\n",
            "    mode = modes[0]\n    for m in modes:\n        if peaks[m] <= peaks[mode]:\n            mode = m\n",
        ),
    ),
    "7.2: no check of effective_batch": Mistake(
        "7.2",
        "plan_micro_batch",
        "",
        ("    if effective_batch < 1:\n        raise ValueError(", "    if False:\n        raise ValueError("),
    ),
    "7.2: only powers of two tried as micro-batches": Mistake(
        "7.2",
        "plan_micro_batch",
        "",
        (
            "divisors = [m for m in range(1, effective_batch + 1) if effective_batch % m == 0]",
            "divisors = [2**k for k in range(effective_batch.bit_length()) if effective_batch % 2**k == 0]",
        ),
    ),
    "7.2: the largest micro-batch of any mode": Mistake(
        "7.2",
        "plan_micro_batch",
        "",
        """
        def plan_micro_batch(effective_batch, budget_bytes, predict_peak, modes=("none", "selective", "full")):
            if effective_batch < 1:
                raise ValueError("effective_batch must be at least 1")
            if not modes:
                raise ValueError("no modes")
            for micro in range(effective_batch, 0, -1):
                if effective_batch % micro:
                    continue
                for mode in modes:
                    if predict_peak(micro, mode) <= budget_bytes:
                        peak = predict_peak(micro, mode)
                        return {"micro_batch": micro, "accum": effective_batch // micro, "checkpointing": mode,
                                "predicted_peak_bytes": peak, "fits": True}
            mode = min(modes, key=lambda m: predict_peak(1, m))
            return {"micro_batch": 1, "accum": effective_batch, "checkpointing": mode,
                    "predicted_peak_bytes": predict_peak(1, mode), "fits": False}
        """,
    ),
    # --- 7.3 step_fits
    "7.3: 'out of memory' matched case-sensitively": Mistake(
        "7.3", "step_fits", "", ('"out of memory" not in str(error).lower()', '"out of memory" not in str(error)')
    ),
    "7.3: only the message read, not the error's kind": Mistake(
        "7.3",
        "step_fits",
        "",
        (
            'not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower()',
            '"out of memory" not in str(error).lower()',
        ),
    ),
    "7.3: True only when the step returns something": Mistake(
        "7.3",
        "step_fits",
        "",
        [
            ("        run_step()\n    except RuntimeError", "        ran = run_step()\n    except RuntimeError"),
            ("    return not out_of_memory\n", "    return not out_of_memory and ran is not None\n"),
        ],
    ),
    "7.3: the step tried a second time after freeing": Mistake(
        "7.3",
        "step_fits",
        "",
        """
        def step_fits(run_step):
            for attempt in range(2):  # out of memory: free, then try once more before giving up
                out_of_memory = False
                try:
                    run_step()
                except RuntimeError as error:
                    if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():
                        raise
                    out_of_memory = True
                if not out_of_memory:
                    return True
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            return False
        """,
    ),
    "7.3: another error wrapped in a new one": Mistake(
        "7.3",
        "step_fits",
        "",
        ("            raise\n", '            raise RuntimeError(f"the step failed: {error}") from error\n'),
    ),
    "7.3: any error that mentions memory read as out of memory": Mistake(
        "7.3", "step_fits", "", ('"out of memory" not in str(error).lower()', '"memory" not in str(error).lower()')
    ),
}
