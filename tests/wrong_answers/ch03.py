"""Wrong answers to chapter 3's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 3.1 autocast_train_step
    "3.1: max_norm ignored (clips to 1.0)": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        ("clip_grad_norm_(model.parameters(), max_norm)", "clip_grad_norm_(model.parameters(), 1.0)"),
    ),
    "3.1: gradients zeroed before backward, left after the step": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        [
            (
                "    with torch.autocast(device_type=x.device.type, dtype=dtype):\n        logits, _ = model(x)\n",
                "    optimizer.zero_grad()\n"
                "    with torch.autocast(device_type=x.device.type, dtype=dtype):\n        logits, _ = model(x)\n",
            ),
            (
                "    optimizer.step()\n    optimizer.zero_grad(set_to_none=True)\n    return loss.detach()",
                "    optimizer.step()\n    return loss.detach()",
            ),
        ],
    ),
    "3.1: gradients set to zeros, not None": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        (
            "    optimizer.zero_grad(set_to_none=True)\n    return loss.detach()",
            "    optimizer.zero_grad(set_to_none=False)\n    return loss.detach()",
        ),
    ),
    "3.1: the loss after the step returned": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        (
            "    optimizer.zero_grad(set_to_none=True)\n    return loss.detach()",
            "    optimizer.zero_grad(set_to_none=True)\n"
            "    with torch.no_grad(), torch.autocast(device_type=x.device.type, dtype=dtype):\n"
            "        logits, _ = model(x)\n"
            "    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))",
        ),
    ),
    "3.1: clipped after the optimizer step": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        (
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n",
            "    optimizer.step()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
        ),
    ),
    "3.1: no check of dtype (fp32 autocast runs silently)": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        ("    if dtype not in (torch.bfloat16, torch.float16):\n", "    if dtype is None:\n"),
    ),
    "3.1: max_norm checked after the step": Mistake(
        "3.1",
        "autocast_train_step",
        "",
        [
            ('    if not max_norm > 0:\n        raise ValueError(f"max_norm must be positive, got {max_norm}")\n', ""),
            (
                "    optimizer.zero_grad(set_to_none=True)\n    return loss.detach()",
                "    optimizer.zero_grad(set_to_none=True)\n"
                '    if not max_norm > 0:\n        raise ValueError(f"max_norm must be positive, got {max_norm}")\n'
                "    return loss.detach()",
            ),
        ],
    ),
    "3.1: loss returned as a Python float": Mistake(
        "3.1", "autocast_train_step", "", ("    return loss.detach()\n", "    return loss.item()\n")
    ),
    # --- 3.2 compare_precisions
    "3.2: the precisions run in sorted order": Mistake(
        "3.2",
        "compare_precisions",
        "",
        ("    for precision in precisions:", "    for precision in sorted(precisions):"),
    ),
    "3.2: the data passed in ignored": Mistake(
        "3.2", "compare_precisions", "", ("result = train(cfg, data)", "result = train(cfg)")
    ),
    "3.2: every run trains the tiny preset": Mistake(
        "3.2", "compare_precisions", "", ("            preset=preset,\n", '            preset="tiny",\n')
    ),
    "3.2: the final validation loss reported": Mistake(
        "3.2",
        "compare_precisions",
        "",
        ('"final_loss": result.losses[-1],', '"final_loss": result.summary()["final_val_loss"],'),
    ),
    "3.2: the precisions in the usual order, not the order given": Mistake(
        "3.2",
        "compare_precisions",
        "",
        (
            "    for precision in precisions:\n",
            '    for precision in [p for p in ("fp32", "bf16", "fp16", "bf16-pure") if p in precisions]:\n',
        ),
    ),
    "3.2: the peak predicted for a GPU": Mistake(
        "3.2",
        "compare_precisions",
        "",
        (
            "memory.estimate(get_config(preset), batch, ctx, precision, device=device)",
            "memory.estimate(get_config(preset), batch, ctx, precision)",
        ),
    ),
    "3.2: the runs train at the preset's ctx": Mistake(
        "3.2",
        "compare_precisions",
        "",
        ("            ctx=ctx,\n            device=device,\n", "            device=device,\n"),
    ),
    "3.2: the mean loss of the run reported": Mistake(
        "3.2",
        "compare_precisions",
        "",
        ('"final_loss": result.losses[-1],', '"final_loss": sum(result.losses) / len(result.losses),'),
    ),
    # --- 3.3 lost_update_fraction
    "3.3: compared with the caller's weights, not the stored ones": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        ("return ((stored + update) == stored).float()", "return ((stored + update) == weights).float()"),
    ),
    "3.3: a half-gap rule with the gap above": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        """
        def lost_update_fraction(weights, update, dtype):
            if weights.numel() == 0:
                raise ValueError("weights has no elements")
            if not dtype.is_floating_point:
                raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
            stored = weights.detach().to(dtype)
            gap = torch.nextafter(stored, torch.full_like(stored, float("inf"))) - stored
            return (abs(update) < gap.float() / 2).float().mean().item()
        """,
    ),
    "3.3: ties counted as lost": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        """
        def lost_update_fraction(weights, update, dtype):
            if weights.numel() == 0:
                raise ValueError("weights has no elements")
            if not dtype.is_floating_point:
                raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
            stored = weights.detach().to(dtype)
            toward = torch.full_like(stored, float("inf") if update > 0 else float("-inf"))
            gap = (torch.nextafter(stored, toward) - stored).double().abs()
            return (abs(update) <= gap / 2).float().mean().item()
        """,
    ),
    "3.3: the fraction taken over the first dimension": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        (
            "return ((stored + update) == stored).float().mean().item()",
            "return ((stored + update) == stored).float().sum().item() / len(stored)",
        ),
    ),
    "3.3: empty weights give nan": Mistake(
        "3.3", "lost_update_fraction", "", ("    if weights.numel() == 0:\n", "    if weights is None:\n")
    ),
    "3.3: an integer dtype accepted": Mistake(
        "3.3", "lost_update_fraction", "", ("    if not dtype.is_floating_point:\n", "    if dtype is None:\n")
    ),
    "3.3: the update added before the weights are rounded": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        [
            ("stored = weights.detach().to(dtype)", "summed = (weights.detach() + update).to(dtype)"),
            ("return ((stored + update) == stored)", "return (summed == weights.detach().to(dtype))"),
        ],
    ),
    "3.3: always rounded to bf16": Mistake(
        "3.3",
        "lost_update_fraction",
        "",
        ("stored = weights.detach().to(dtype)", "stored = weights.detach().to(torch.bfloat16)"),
    ),
}
