"""Wrong answers to chapter 6's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 6.1 checkpointed_forward
    "6.1: a lambda that reads the loop's block late": Mistake(
        "6.1",
        "checkpointed_forward",
        "",
        (
            "x = checkpoint(block, x, cos, sin, use_reentrant=False)",
            "x = checkpoint(lambda x: block(x, cos, sin), x, use_reentrant=False)",
        ),
    ),
    "6.1: the last block run plainly (its backward comes first anyway)": Mistake(
        "6.1",
        "checkpointed_forward",
        "",
        """
        def checkpointed_forward(blocks, x, cos, sin):
            for block in blocks[:-1]:
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            return blocks[-1](x, cos, sin)
        """,
    ),
    "6.1: the input detached first": Mistake(
        "6.1",
        "checkpointed_forward",
        "",
        """
        def checkpointed_forward(blocks, x, cos, sin):
            x = x.detach().requires_grad_()  # checkpoint wants an input that requires grad
            for block in blocks:
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            return x
        """,
    ),
    "6.1: every other block checkpointed": Mistake(
        "6.1",
        "checkpointed_forward",
        "",
        """
        def checkpointed_forward(blocks, x, cos, sin):
            for i, block in enumerate(blocks):
                x = checkpoint(block, x, cos, sin, use_reentrant=False) if i % 2 == 0 else block(x, cos, sin)
            return x
        """,
    ),
    # --- 6.2 sqrt_segments
    "6.2: ceil(sqrt(L)) segments": Mistake(
        "6.2",
        "sqrt_segments",
        "",
        ("n_seg = max(1, round(math.sqrt(n_layer)))", "n_seg = max(1, math.ceil(math.sqrt(n_layer)))"),
    ),
    "6.2: segments of lists, not ranges": Mistake(
        "6.2",
        "sqrt_segments",
        "",
        (
            "return [range(bounds[i], bounds[i + 1]) for i in range(n_seg)]",
            "return [list(range(bounds[i], bounds[i + 1])) for i in range(n_seg)]",
        ),
    ),
    "6.2: only zero refused, n ** 0.5 for the rest": Mistake(
        "6.2",
        "sqrt_segments",
        "",
        [
            ("    if n_layer < 1:\n        raise ValueError", "    if n_layer == 0:\n        raise ValueError"),
            ("n_seg = max(1, round(math.sqrt(n_layer)))", "n_seg = max(1, round(n_layer**0.5))"),
        ],
    ),
    "6.2: ceil(L / n) blocks per segment, the last one short": Mistake(
        "6.2",
        "sqrt_segments",
        "",
        (
            "bounds = [round(i * n_layer / n_seg) for i in range(n_seg + 1)]",
            "bounds = [min(n_layer, i * math.ceil(n_layer / n_seg)) for i in range(n_seg + 1)]",
        ),
    ),
    "6.2: the segments listed last first": Mistake(
        "6.2",
        "sqrt_segments",
        "",
        (
            "return [range(bounds[i], bounds[i + 1]) for i in range(n_seg)]",
            "return [range(bounds[i], bounds[i + 1]) for i in reversed(range(n_seg))]",
        ),
    ),
    # --- 6.3 sqrt_checkpointed_forward
    "6.3: floor(sqrt(L)) segments (math.isqrt)": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "",
        (
            "    for segment in package_sqrt_segments(len(blocks)):\n",
            "    n_seg = max(1, math.isqrt(len(blocks)))\n"
            "    bounds = [round(i * len(blocks) / n_seg) for i in range(n_seg + 1)]\n"
            "    for segment in [range(bounds[i], bounds[i + 1]) for i in range(n_seg)]:\n",
        ),
    ),
    "6.3: the last segment run plainly": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "",
        (
            "    for segment in package_sqrt_segments(len(blocks)):\n"
            "        x = checkpoint(run_segment, segment, x, use_reentrant=False)\n",
            "    *segments, last = package_sqrt_segments(len(blocks))\n"
            "    for segment in segments:\n"
            "        x = checkpoint(run_segment, segment, x, use_reentrant=False)\n"
            "    x = run_segment(last, x)\n",
        ),
    ),
    "6.3: no blocks gives the input back": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "",
        (
            "    for segment in package_sqrt_segments(len(blocks)):\n",
            "    if len(blocks) == 0:\n        return x\n    for segment in package_sqrt_segments(len(blocks)):\n",
        ),
    ),
    "6.3: other dropout masks in the recomputation": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "",
        (
            "x = checkpoint(run_segment, segment, x, use_reentrant=False)",
            "x = checkpoint(run_segment, segment, x, use_reentrant=False, preserve_rng_state=False)",
        ),
    ),
    # --- 6.4 checkpointing_tradeoff
    "6.4: the model built with the default seed": Mistake(
        "6.4", "checkpointing_tradeoff", "", ("model = GPT(cfg, seed=seed).to(device)", "model = GPT(cfg).to(device)")
    ),
    "6.4: the batch drawn from the global generator": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "",
        (
            "tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=gen).to(device)",
            "tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1)).to(device)",
        ),
    ),
    "6.4: a step of 0 divides by zero": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "",
        (
            "    if batch < 1 or steps < 1 or not 1 <= ctx <= max_ctx:\n",
            "    if batch < 1 or not 1 <= ctx <= max_ctx:\n",
        ),
    ),
    "6.4: ratios to the largest row, not the first": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "",
        [
            (
                'row["activations_ratio"] = row["activation_bytes"] / rows[0]["activation_bytes"]',
                'row["activations_ratio"] = row["activation_bytes"] / max(r["activation_bytes"] for r in rows)',
            ),
        ],
    ),
    "6.4: mode names matched in any case": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "",
        [
            (
                "    unknown = [mode for mode in modes if mode not in CHECKPOINTING_MODES]\n",
                "    modes = [mode.lower() for mode in modes]\n"
                "    unknown = [mode for mode in modes if mode not in CHECKPOINTING_MODES]\n",
            ),
        ],
    ),
    "6.4: lr 1e-2": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "",
        ("torch.optim.AdamW(model.parameters(), lr=1e-3)", "torch.optim.AdamW(model.parameters(), lr=1e-2)"),
    ),
}
