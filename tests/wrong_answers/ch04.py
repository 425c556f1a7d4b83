"""Wrong answers to chapter 4's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 4.1 scaled_fp16_step
    "4.1: the scaled loss returned as the loss": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        [
            (
                "    scaler.scale(loss).backward()\n    scaler.unscale_(optimizer)  #",
                "    scaled = scaler.scale(loss)\n    scaled.backward()\n    scaler.unscale_(optimizer)  #",
            ),
            ('return {"loss": loss.item(), "grad_norm"', 'return {"loss": scaled.item(), "grad_norm"'),
        ],
    ),
    "4.1: max_norm ignored (clips to 1.0)": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
            "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        ),
    ),
    "4.1: the forward in bf16": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            "    with torch.autocast(device_type=x.device.type, dtype=torch.float16):\n        _, loss = model(x, y)\n"
            "    scale = scaler.get_scale()",
            "    with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):\n        _, loss = model(x, y)\n"
            "    scale = scaler.get_scale()",
        ),
    ),
    "4.1: the optimizer stepped directly": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        ("    scaler.step(optimizer)  # skipped if any gradient is inf or NaN\n", "    optimizer.step()\n"),
    ),
    "4.1: a GradScaler of its own, not the caller's": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            '        raise ValueError(f"max_norm must be positive, got {max_norm}")\n    with torch.autocast(',
            '        raise ValueError(f"max_norm must be positive, got {max_norm}")\n'
            "    scaler = torch.amp.GradScaler(x.device.type)\n    with torch.autocast(",
        ),
    ),
    "4.1: gradients set to zeros, not None": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            "    scaler.update()  # halves the scale after a skip\n    optimizer.zero_grad(set_to_none=True)\n",
            "    scaler.update()  # halves the scale after a skip\n    optimizer.zero_grad(set_to_none=False)\n",
        ),
    ),
    "4.1: the norm after clipping reported": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            "    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
            "    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm()\n",
        ),
    ),
    "4.1: skipped read from the loss": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        ('"skipped": scaler.get_scale() < scale}\n', '"skipped": not torch.isfinite(loss).item()}\n'),
    ),
    "4.1: max_norm not checked": Mistake(
        "4.1",
        "scaled_fp16_step",
        "",
        (
            '    if not max_norm > 0:\n        raise ValueError(f"max_norm must be positive, got {max_norm}")\n'
            "    with torch.autocast(device_type=x.device.type, dtype=torch.float16):\n        _, loss = model(x, y)\n"
            "    scale",
            "    with torch.autocast(device_type=x.device.type, dtype=torch.float16):\n        _, loss = model(x, y)\n"
            "    scale",
        ),
    ),
    # --- 4.2 update_scale
    "4.2: the grown scale made an int (a fraction truncated)": Mistake(
        "4.2", "update_scale", "", ("return scale * growth_factor, 0", "return int(scale * growth_factor), 0")
    ),
    "4.2: backoff_factor assumed 0.5": Mistake(
        "4.2", "update_scale", "", ("return scale * backoff_factor, 0", "return scale * 0.5, 0")
    ),
    "4.2: growth_factor assumed 2": Mistake(
        "4.2", "update_scale", "", ("return scale * growth_factor, 0", "return scale * 2.0, 0")
    ),
    "4.2: no settings checked at all": Mistake(
        "4.2",
        "update_scale",
        "",
        [
            ("    if growth_interval < 1:\n", "    if False:\n"),
            ("    if not growth_factor > 1 or not 0 < backoff_factor < 1:\n", "    if False:\n"),
            ("    if not 0 <= growth_tracker < growth_interval:\n", "    if False:\n"),
        ],
    ),
    "4.2: the factors checked only where they are used": Mistake(
        "4.2",
        "update_scale",
        "",
        (
            "    if not growth_factor > 1 or not 0 < backoff_factor < 1:\n",
            "    if (found_inf and not 0 < backoff_factor < 1) or (not found_inf and not growth_factor > 1):\n",
        ),
    ),
    "4.2: the tracker not checked": Mistake(
        "4.2",
        "update_scale",
        "",
        ("    if not 0 <= growth_tracker < growth_interval:\n", "    if growth_tracker < 0:\n"),
    ),
    "4.2: a backoff of 1 accepted": Mistake(
        "4.2",
        "update_scale",
        "",
        ("not 0 < backoff_factor < 1:", "not 0 < backoff_factor <= 1:"),
    ),
    # --- 4.3 step_unless_skipped
    "4.3: gradients zeroed after the step": Mistake(
        "4.3",
        "step_unless_skipped",
        "",
        (
            "        scheduler.step()\n    return skipped\n",
            "        scheduler.step()\n    optimizer.zero_grad()\n    return skipped\n",
        ),
    ),
    "4.3: the schedule stepped before the optimizer": Mistake(
        "4.3",
        "step_unless_skipped",
        "",
        """
        def step_unless_skipped(optimizer, scheduler, scaler):
            found_inf = any(
                not torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g["params"]
                if p.grad is not None
            )
            if not found_inf:
                scheduler.step()
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            return scaler.get_scale() < scale
        """,
    ),
    "4.3: the optimizer stepped around the scaler": Mistake(
        "4.3",
        "step_unless_skipped",
        "",
        (
            "    scaler.step(optimizer)\n    scaler.update()\n    skipped",
            "    scaler.unscale_(optimizer)\n    optimizer.step()\n    scaler.update()\n    skipped",
        ),
    ),
    "4.3: returns whether it stepped": Mistake(
        "4.3",
        "step_unless_skipped",
        "",
        ("        scheduler.step()\n    return skipped\n", "        scheduler.step()\n    return not skipped\n"),
    ),
    "4.3: a scale that stayed read as a skip": Mistake(
        "4.3",
        "step_unless_skipped",
        "",
        ("    skipped = scaler.get_scale() < scale\n", "    skipped = scaler.get_scale() <= scale\n"),
    ),
    # --- 4.4 fp16_overflow_experiment
    "4.4: the lr passed replaced by the default": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        (
            "optimizer = torch.optim.AdamW(model.parameters(), lr=lr)",
            "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)",
        ),
    ),
    "4.4: a fresh generator every step": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        [
            ("    generator = torch.Generator().manual_seed(seed)\n    rows = []\n", "    rows = []\n"),
            (
                '        x, y = data.get_batch("train", batch, ctx, generator)\n',
                "        generator = torch.Generator().manual_seed(seed)\n"
                '        x, y = data.get_batch("train", batch, ctx, generator)\n',
            ),
        ],
    ),
    "4.4: the model built without the seed": Mistake(
        "4.4", "fp16_overflow_experiment", "", ("model = GPT(cfg, seed=seed).to(device)", "model = GPT(cfg).to(device)")
    ),
    "4.4: the data passed in ignored": Mistake(
        "4.4", "fp16_overflow_experiment", "", ("    data = data or load_tokens()\n", "    data = load_tokens()\n")
    ),
    "4.4: init_scale ignored": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        ("scaler = torch.amp.GradScaler(device, init_scale=init_scale)", "scaler = torch.amp.GradScaler(device)"),
    ),
    "4.4: the tiny preset whatever is asked": Mistake(
        "4.4", "fp16_overflow_experiment", "", ("    cfg = get_config(preset)  #", '    cfg = get_config("tiny")  #')
    ),
    "4.4: lr not checked": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        ("    if not (lr > 0 and init_scale > 0):\n", "    if not init_scale > 0:\n"),
    ),
    "4.4: skipped read from the loss": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        ('"skipped": scaler.get_scale() < scale})', '"skipped": not torch.isfinite(loss).item()})'),
    ),
    "4.4: batch and ctx swapped": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "",
        (
            'x, y = data.get_batch("train", batch, ctx, generator)',
            'x, y = data.get_batch("train", ctx, batch, generator)',
        ),
    ),
}
