"""Wrong answers to chapter 5's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 5.1 accumulate_gradients
    "5.1: the losses summed, one backward at the end": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        """
        def accumulate_gradients(model, micro_batches):
            n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)
            if not micro_batches or n_tokens == 0:
                raise ValueError("nothing to learn from")
            total = 0.0
            for x, y in micro_batches:
                _, summed = model(x, y, reduction="sum")
                total = total + summed  # every micro-batch's graph stays alive until the backward below
            (total / n_tokens).backward()
            return total.item() / n_tokens
        """,
    ),
    "5.1: each graph kept until the next micro-batch's (retain_graph)": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        [
            ("(summed / n_tokens).backward()", "(summed / n_tokens).backward(retain_graph=True)"),
            ("        total += summed.item()\n", "        total += summed.item()\n        losses.append(summed)\n"),
            (
                "    total = 0.0\n    for x, y in micro_batches:\n",
                "    total, losses = 0.0, []\n    for x, y in micro_batches:\n",
            ),
        ],
    ),
    "5.1: summed losses backward, the gradients divided at the end (held ones too)": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        [
            ("(summed / n_tokens).backward()", "summed.backward()"),
            (
                "    return total / n_tokens\n",
                "    for p in model.parameters():\n"
                "        if p.grad is not None:\n"
                "            p.grad /= n_tokens\n"
                "    return total / n_tokens\n",
            ),
        ],
    ),
    "5.1: retain_graph=True (each graph alive until the next forward is done)": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        ("(summed / n_tokens).backward()", "(summed / n_tokens).backward(retain_graph=True)"),
    ),
    "5.1: an all-padding window divides by zero": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        (
            '    if n_tokens == 0:\n        raise ValueError("every target of this window is IGNORE_INDEX',
            '    if False:\n        raise ValueError("every target of this window is IGNORE_INDEX',
        ),
    ),
    "5.1: an empty window returns 0.0": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        (
            '        raise ValueError("micro_batches is empty: a window needs at least one micro-batch")',
            "        return 0.0",
        ),
    ),
    "5.1: each micro-batch's mean times its count (0 / 0 for an all-padding one)": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        [
            ('        _, summed = model(x, y, reduction="sum")\n', "        _, mean = model(x, y)\n"),
            (
                "        (summed / n_tokens).backward()\n        total += summed.item()\n",
                "        count = int((y != IGNORE_INDEX).sum())\n"
                "        (mean * count / n_tokens).backward()\n"
                "        total += mean.item() * count\n",
            ),
        ],
    ),
    "5.1: the gradients set to None first": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        (
            "    total = 0.0\n    for x, y in micro_batches:\n",
            "    for p in model.parameters():\n        p.grad = None  # a clean window\n"
            "    total = 0.0\n    for x, y in micro_batches:\n",
        ),
    ),
    "5.1: the last micro-batch's loss returned": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        ("    return total / n_tokens\n", "    return summed.item() / max(1, int((y != IGNORE_INDEX).sum()))\n"),
    ),
    "5.1: the loss averaged over every target, padding too": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        ("    return total / n_tokens\n", "    return total / sum(y.numel() for _, y in micro_batches)\n"),
    ),
    "5.1: token id 0 taken for padding": Mistake(
        "5.1",
        "accumulate_gradients",
        "",
        (
            "n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)",
            "n_tokens = sum(int((y > 0).sum()) for _, y in micro_batches)",
        ),
    ),
    # --- 5.2 effective_batch, accum_for
    "5.2: effective_batch without a check of its sizes": Mistake(
        "5.2",
        "effective_batch",
        "",
        ("    if micro_batch < 1 or accum < 1 or world_size < 1:\n        raise", "    if False:\n        raise"),
    ),
    "5.2: effective_batch checks the product only": Mistake(
        "5.2",
        "effective_batch",
        "",
        ("    if micro_batch < 1 or accum < 1 or world_size < 1:\n", "    if micro_batch * accum * world_size < 1:\n"),
    ),
    "5.2: accum_for returns a float": Mistake(
        "5.2", "accum_for", "", ("    return target_batch // per_round\n", "    return target_batch / per_round\n")
    ),
    "5.2: accum_for lets a target of 0 through": Mistake(
        "5.2",
        "accum_for",
        "",
        (
            "    if target_batch < 1 or micro_batch < 1 or world_size < 1:\n",
            "    if micro_batch < 1 or world_size < 1:\n",
        ),
    ),
    "5.2: accum_for checks the product of the sizes only": Mistake(
        "5.2",
        "accum_for",
        "",
        (
            "    if target_batch < 1 or micro_batch < 1 or world_size < 1:\n",
            "    if target_batch < 1 or per_round < 1:\n",
        ),
    ),
    "5.2: accum_for checks each factor divides, not their product": Mistake(
        "5.2",
        "accum_for",
        "",
        ("    if target_batch % per_round:\n", "    if target_batch % micro_batch or target_batch % world_size:\n"),
    ),
    # --- 5.3 compare_accumulation
    "5.3: the data passed in ignored": Mistake(
        "5.3", "compare_accumulation", "", ("        result = train(cfg, data)\n", "        result = train(cfg)\n")
    ),
    "5.3: the preset passed in ignored": Mistake(
        "5.3", "compare_accumulation", "", ("            preset=preset,\n", '            preset="tiny",\n')
    ),
    "5.3: a micro-batch rounded down when the accum does not divide": Mistake(
        "5.3",
        "compare_accumulation",
        "",
        ("        if accum < 1 or effective % accum:\n", "        if accum < 1:\n"),
    ),
    "5.3: the accums run in sorted order": Mistake(
        "5.3",
        "compare_accumulation",
        "",
        ("    rows = []\n    for accum in accums:", "    rows = []\n    for accum in sorted(accums):"),
    ),
    "5.3: an empty accums returns no rows": Mistake(
        "5.3",
        "compare_accumulation",
        "",
        ("    if effective < 1 or not accums:\n", "    if effective < 1:\n"),
    ),
}
