"""The first wrong-answer set: mistakes learners make, each written into a copy of solutions/ by
tests/grading_runs.answers_with, and the test that must catch it (tests/test_grading.py)."""

from grading_runs import Mistake

TRADEOFF_TIMED_LOOP = "        for _ in range(steps):\n"
MISTAKES = {
    # --- 1.1 decode_float
    "bits of a negative number without the unsigned mask": Mistake(
        "1.1",
        "decode_float",
        "test_decode_float_matches_the_bits",
        (".item() & ((1 << width) - 1)", ".item()"),
    ),
    "exponent width fixed at fp32's 8 bits": Mistake(
        "1.1",
        "decode_float",
        "test_decode_float_matches_the_bits",
        ("exponent_bits = width - 1 - mantissa_bits", "exponent_bits = 8"),
    ),
    "mantissa width counts the implicit bit": Mistake(
        "1.1",
        "decode_float",
        "test_decode_float_matches_the_bits",
        (
            "mantissa_bits = round(-math.log2(torch.finfo(dtype).eps))",
            "mantissa_bits = round(-math.log2(torch.finfo(dtype).eps)) + 1",
        ),
    ),
    # --- 1.2 value_from_bits
    "subnormals scaled by 2**(0 - bias)": Mistake(
        "1.2",
        "value_from_bits",
        "test_value_from_bits_inverts_the_decoding",
        ("fraction * 2.0 ** (1 - bias)", "fraction * 2.0 ** (0 - bias)"),
    ),
    "subnormals given the implicit leading 1": Mistake(
        "1.2",
        "value_from_bits",
        "test_value_from_bits_inverts_the_decoding",
        ("return (-1) ** s * fraction * 2.0 ** (1 - bias)", "return (-1) ** s * (1 + fraction) * 2.0 ** (1 - bias)"),
    ),
    "bias without the - 1": Mistake(
        "1.2",
        "value_from_bits",
        "test_value_from_bits_inverts_the_decoding",
        ("bias, fraction = 2 ** (len(exponent) - 1) - 1,", "bias, fraction = 2 ** (len(exponent) - 1),"),
    ),
    "infinity without its sign": Mistake(
        "1.2",
        "value_from_bits",
        "test_value_from_bits_inverts_the_decoding",
        ("else (-1) ** s * math.inf", "else math.inf"),
    ),
    # --- 1.3 update_is_lost
    "compared in fp64, never rounded": Mistake(
        "1.3",
        "update_is_lost",
        "test_update_is_lost_rounds_in_the_format",
        """
        def update_is_lost(w, update, dtype):
            return w + update == w
        """,
    ),
    "sum kept in fp32, not rounded into the format": Mistake(
        "1.3",
        "update_is_lost",
        "test_update_is_lost_rounds_in_the_format",
        ("total = (w_stored.double() + update).to(dtype)", "total = (w_stored.float() + update)"),
    ),
    "eps * |w| as the threshold": Mistake(
        "1.3",
        "update_is_lost",
        "test_update_is_lost_rounds_in_the_format",
        """
        def update_is_lost(w, update, dtype):
            return abs(update) < torch.finfo(dtype).eps * abs(w)  # the gap is eps * 2**exponent, not eps * w
        """,
    ),
    # --- 1.4 smallest_update_that_survives
    "the whole gap, not half": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "test_smallest_update_is_half_the_gap",
        ("- w_stored.double()).item() / 2", "- w_stored.double()).item()"),
    ),
    "eps * |w| / 2": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "test_smallest_update_is_half_the_gap",
        """
        def smallest_update_that_survives(w, dtype):
            return torch.finfo(dtype).eps * abs(w) / 2
        """,
    ),
    "the gap below w, not above": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "test_smallest_update_is_half_the_gap",
        (
            "torch.tensor([math.inf], dtype=dtype))\n    return (above.double() - w_stored.double())",
            "torch.tensor([-math.inf], dtype=dtype))\n    return (w_stored.double() - above.double())",
        ),
    ),
    "threshold returned as a one-element tensor": Mistake(
        "1.4",
        "smallest_update_that_survives",
        "test_smallest_update_is_half_the_gap",
        ("- w_stored.double()).item() / 2", "- w_stored.double()) / 2"),
    ),
    # --- 2.1 count_parameters
    "lm_head counted as well as the embedding": Mistake(
        "2.1",
        "count_parameters",
        "test_count_parameters_matches_the_model",
        ("return cfg.vocab_size * C + cfg.n_layer", "return 2 * cfg.vocab_size * C + cfg.n_layer"),
    ),
    "a GELU MLP's two matrices": Mistake(
        "2.1", "count_parameters", "test_count_parameters_matches_the_model", ("mlp = 3 * C * H", "mlp = 2 * C * H")
    ),
    "final norm left out": Mistake(
        "2.1",
        "count_parameters",
        "test_count_parameters_matches_the_model",
        ("(attention + mlp + norms) + C\n", "(attention + mlp + norms)\n"),
    ),
    "block norms left out": Mistake(
        "2.1", "count_parameters", "test_count_parameters_matches_the_model", ("norms = 2 * C\n", "norms = 0\n")
    ),
    # --- 2.2 static_bytes
    "autocast counted with 16-bit weights and grads": Mistake(
        "2.2", "static_bytes", "test_static_bytes_by_regime", ('"bf16": 4 + 4 + 8,', '"bf16": 2 + 2 + 8,')
    ),
    "master copy left out": Mistake(
        "2.2",
        "static_bytes",
        "test_static_bytes_by_regime",
        ('"bf16-pure+master": 2 + 4 + 4 + 8,', '"bf16-pure+master": 2 + 4 + 8,'),
    ),
    "one Adam moment": Mistake(
        "2.2", "static_bytes", "test_static_bytes_by_regime", ('"fp32": 4 + 4 + 8,', '"fp32": 4 + 4 + 4,')
    ),
    "an unknown regime costs 0 bytes": Mistake(
        "2.2",
        "static_bytes",
        "test_static_bytes_rejects_an_unknown_regime",
        (
            "    if regime not in per_param:\n        raise ValueError",
            "    if regime not in per_param:\n        return 0\n        raise ValueError",
        ),
    ),
    # --- 2.3 activation_bytes
    "q and k after RoPE counted as one C-wide tensor": Mistake(
        "2.3",
        "activation_bytes",
        "test_activation_bytes_match_the_activation_table",
        ("3 * C, 2 * C, C, heads, C]", "3 * C, C, C, heads, C]"),
    ),
    "the log-softmax left out": Mistake(
        "2.3",
        "activation_bytes",
        "test_activation_bytes_match_the_activation_table",
        ("f32 * (C + 1 + C + C + V) + 8", "f32 * (C + 1 + C + C) + 8"),
    ),
    "two H-wide tensors instead of four": Mistake(
        "2.3",
        "activation_bytes",
        "test_activation_bytes_match_the_activation_table",
        ("mlp = [C, 1, C, C, H, H, H, H]", "mlp = [C, 1, C, C, H, H]"),
    ),
    "2 bytes per value": Mistake(
        "2.3",
        "activation_bytes",
        "test_activation_bytes_match_the_activation_table",
        ("cfg.vocab_size, cfg.n_head, 4\n", "cfg.vocab_size, cfg.n_head, 2\n"),
    ),
    "per sequence, not per token": Mistake(
        "2.3",
        "activation_bytes",
        "test_activation_bytes_match_the_activation_table",
        ("return batch * ctx * (cfg.n_layer", "return batch * (cfg.n_layer"),
    ),
    # --- 3.1 autocast_train_step
    "loss computed in bf16": Mistake(
        "3.1",
        "autocast_train_step",
        "test_forward_in_16_bits_loss_in_fp32",
        ("F.cross_entropy(logits.float().view(", "F.cross_entropy(logits.view("),
    ),
    "no gradient clipping": Mistake(
        "3.1",
        "autocast_train_step",
        "test_weights_stay_fp32_and_take_a_step",
        (
            "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
            "    loss.backward()\n",
        ),
    ),
    "clipping before backward": Mistake(
        "3.1",
        "autocast_train_step",
        "test_weights_stay_fp32_and_take_a_step",
        (
            "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    loss.backward()\n",
        ),
    ),
    "forward outside autocast": Mistake(
        "3.1",
        "autocast_train_step",
        "test_forward_in_16_bits_loss_in_fp32",
        (
            (
                "    with torch.autocast(device_type=x.device.type, dtype=dtype):\n"
                "        logits, _ = model(x)\n"
                "    loss = F"
            ),
            "    logits, _ = model(x)\n    loss = F",
        ),
    ),
    "model converted to bf16": Mistake(
        "3.1",
        "autocast_train_step",
        "test_weights_stay_fp32_and_take_a_step",
        (
            (
                "    with torch.autocast(device_type=x.device.type, dtype=dtype):\n"
                "        logits, _ = model(x)\n"
                "    loss = F"
            ),
            (
                "    model.to(dtype)\n"
                "    with torch.autocast(device_type=x.device.type, dtype=dtype):\n"
                "        logits, _ = model(x)\n"
                "    loss = F"
            ),
        ),
    ),
    # --- 3.2 compare_precisions
    "first loss reported as the final one": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        (
            '"final_loss": result.losses[-1],\n                "predicted_peak_bytes": predicted.peak',
            '"final_loss": result.losses[0],\n                "predicted_peak_bytes": predicted.peak',
        ),
    ),
    "skipped steps hard-coded to 0": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        ('"skipped_steps": result.skipped_steps,', '"skipped_steps": 0,'),
    ),
    "peak predicted for fp32 whatever the precision": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        (
            "predicted = memory.estimate(get_config(preset), batch, ctx, precision,",
            'predicted = memory.estimate(get_config(preset), batch, ctx, "fp32",',
        ),
    ),
    "clock started after the run": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        (
            "        start = clock(device)\n        result = train(cfg, data)\n        seconds",
            "        result = train(cfg, data)\n        start = clock(device)\n        seconds",
        ),
    ),
    "one clock for all the runs": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        [
            ("    rows = []\n    for precision", "    rows = []\n    start = clock(device)  # once\n    for precision"),
            (
                "        start = clock(device)\n        result = train(cfg, data)\n",
                "        result = train(cfg, data)\n",
            ),
        ],
    ),
    "peak predicted at the preset's ctx": Mistake(
        "3.2",
        "compare_precisions",
        "test_compare_precisions_table",
        (
            "predicted = memory.estimate(get_config(preset), batch, ctx, precision,",
            "predicted = memory.estimate(get_config(preset), batch, get_config(preset).ctx, precision,",
        ),
    ),
    # --- 3.3 lost_update_fraction
    "compared in fp64, weights never rounded": Mistake(
        "3.3",
        "lost_update_fraction",
        "test_lost_update_fraction",
        ("stored = weights.detach().to(dtype)\n", "stored = weights.detach().double()\n"),
    ),
    "sums kept in fp32": Mistake(
        "3.3",
        "lost_update_fraction",
        "test_lost_update_fraction",
        ("return ((stored + update) == stored)", "return ((stored.float() + update) == stored.float())"),
    ),
    "a count, not a fraction": Mistake(
        "3.3",
        "lost_update_fraction",
        "test_lost_update_fraction",
        ("== stored).float().mean().item()", "== stored).float().sum().item()"),
    ),
    "the caller's weights updated in place (fp32's .to() is the same tensor)": Mistake(
        "3.3",
        "lost_update_fraction",
        "test_lost_update_fraction",
        (
            "    return ((stored + update) == stored).float().mean().item()\n",
            (
                "    before = stored.clone()\n"
                "    stored += update  # for fp32, .to(dtype) returned the caller's own tensor\n"
                "    return (stored == before).float().mean().item()\n"
            ),
        ),
    ),
    "fraction returned as a 0-dim tensor": Mistake(
        "3.3",
        "lost_update_fraction",
        "test_lost_update_fraction",
        ("== stored).float().mean().item()", "== stored).float().mean()"),
    ),
    # --- 4.1 scaled_fp16_step
    "clipping before unscale_": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_clips_the_unscaled_gradients",
        ("    scaler.unscale_(optimizer)  # true gradients from here on: clip those\n", ""),
    ),
    "fp16 without loss scaling": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_small_gradients_survive_fp16",
        """
        def scaled_fp16_step(model, optimizer, scaler, x, y, max_norm=1.0):
            with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                _, loss = model(x, y)
            loss.backward()  # no loss scaling: small fp16 gradients flush to zero
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return {"loss": loss.item(), "grad_norm": grad_norm.item(), "scale": 1.0, "skipped": False}
        """,
    ),
    "no gradient clipping (fp16)": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_clips_the_unscaled_gradients",
        (
            "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
            "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float('inf'))",
        ),
    ),
    "scale read after the update": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_an_overflow_skips_the_step",
        (
            "    scaler.update()  # halves the scale after a skip\n",
            "    scaler.update()  # halves the scale after a skip\n    scale = scaler.get_scale()\n",
        ),
    ),
    "scaler.update() forgotten": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_an_overflow_skips_the_step",
        ("    scaler.update()  # halves the scale after a skip\n", ""),
    ),
    "a grown scale read as a skipped step": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_an_overflow_skips_the_step",
        ('"skipped": scaler.get_scale() < scale}\n', '"skipped": scaler.get_scale() != scale}\n'),
    ),
    "gradients left after the step": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_clips_the_unscaled_gradients",
        (
            "    scaler.update()  # halves the scale after a skip\n    optimizer.zero_grad(set_to_none=True)\n",
            "    scaler.update()  # halves the scale after a skip\n",
        ),
    ),
    "loss returned as a tensor": Mistake(
        "4.1",
        "scaled_fp16_step",
        "test_clips_the_unscaled_gradients",
        ('return {"loss": loss.item(), "grad_norm"', 'return {"loss": loss.detach(), "grad_norm"'),
    ),
    # --- 4.2 update_scale
    "tracker not reset after an overflow": Mistake(
        "4.2",
        "update_scale",
        "test_update_scale_matches_gradscaler",
        ("return scale * backoff_factor, 0", "return scale * backoff_factor, growth_tracker"),
    ),
    "grows one step late": Mistake(
        "4.2",
        "update_scale",
        "test_update_scale_matches_gradscaler",
        ("if growth_tracker == growth_interval:", "if growth_tracker > growth_interval:"),
    ),
    "tracker not reset after growing": Mistake(
        "4.2",
        "update_scale",
        "test_update_scale_matches_gradscaler",
        ("return scale * growth_factor, 0", "return scale * growth_factor, growth_tracker"),
    ),
    "interval checked before counting the step": Mistake(
        "4.2",
        "update_scale",
        "test_update_scale_matches_gradscaler",
        (
            (
                "    growth_tracker += 1\n"
                "    if growth_tracker == growth_interval:\n"
                "        return scale * growth_factor, 0\n"
            ),
            (
                "    if growth_tracker == growth_interval:\n"
                "        return scale * growth_factor, 0\n"
                "    growth_tracker += 1\n"
            ),
        ),
    ),
    # --- 4.3 step_unless_skipped
    "scheduler steps on skipped steps": Mistake(
        "4.3",
        "step_unless_skipped",
        "test_schedule_does_not_move_on_a_skipped_step",
        ("    if not skipped:\n        scheduler.step()\n", "    scheduler.step()\n"),
    ),
    "skip read before scaler.update()": Mistake(
        "4.3",
        "step_unless_skipped",
        "test_schedule_does_not_move_on_a_skipped_step",
        (
            "    scaler.update()\n    skipped = scaler.get_scale() < scale\n",
            "    skipped = scaler.get_scale() < scale\n    scaler.update()\n",
        ),
    ),
    "scaler.update() forgotten (4.3)": Mistake(
        "4.3",
        "step_unless_skipped",
        "test_schedule_does_not_move_on_a_skipped_step",
        ("    scaler.step(optimizer)\n    scaler.update()\n    skipped", "    scaler.step(optimizer)\n    skipped"),
    ),
    "a grown scale read as a skipped step (4.3)": Mistake(
        "4.3",
        "step_unless_skipped",
        "test_schedule_does_not_move_on_a_skipped_step",
        ("    skipped = scaler.get_scale() < scale\n", "    skipped = scaler.get_scale() != scale\n"),
    ),
    # --- 4.4 fp16_overflow_experiment
    "no clipping in the loop": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        ("        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n", ""),
    ),
    "clips the scaled gradients in the loop": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        (
            "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        scaler.unscale_(optimizer)\n",
        ),
    ),
    "scale recorded after the update": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        (
            'rows.append({"step": step, "loss": loss.item(), "scale": scale,',
            'rows.append({"step": step, "loss": loss.item(), "scale": scaler.get_scale(),',
        ),
    ),
    "optimizer stepped around the scaler": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        (
            "        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad",
            "        optimizer.step()\n        scaler.update()\n        optimizer.zero_grad",
        ),
    ),
    "steps numbered from 0": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        ("for step in range(1, steps + 1):", "for step in range(steps):"),
    ),
    "batches at the preset's ctx, not the one given": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        (
            'x, y = data.get_batch("train", batch, ctx, generator)',
            'x, y = data.get_batch("train", batch, get_config(preset).ctx, generator)',
        ),
    ),
    "gradients never zeroed in the loop": Mistake(
        "4.4",
        "fp16_overflow_experiment",
        "test_overflow_experiment_shows_the_scaler_backing_off",
        ("        optimizer.zero_grad(set_to_none=True)\n        rows.append(", "        rows.append("),
    ),
    # --- 5.1 accumulate_gradients
    "no division by the window's tokens": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_equal_micro_batches_match_one_big_batch",
        ("(summed / n_tokens).backward()", "summed.backward()"),
    ),
    "mean of micro-batch means with padding": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_padded_micro_batches_are_normalized_by_tokens",
        """
        def accumulate_gradients(model, micro_batches):
            total = 0.0
            for x, y in micro_batches:
                _, loss = model(x, y)  # the mean over THIS micro-batch's targets
                (loss / len(micro_batches)).backward()  # right without padding, wrong with it
                total += loss.item() / len(micro_batches)
            return total
        """,
    ),
    "padding counted as targets": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_padded_micro_batches_are_normalized_by_tokens",
        (
            "n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)",
            "n_tokens = sum(y.numel() for _, y in micro_batches)",
        ),
    ),
    "gradients zeroed in the loop": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_equal_micro_batches_match_one_big_batch",
        (
            '        _, summed = model(x, y, reduction="sum")\n',
            '        model.zero_grad()\n        _, summed = model(x, y, reduction="sum")\n',
        ),
    ),
    "the summed loss returned, not the mean": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_equal_micro_batches_match_one_big_batch",
        ("    return total / n_tokens\n", "    return total\n"),
    ),
    "the window's earlier gradients zeroed": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_equal_micro_batches_match_one_big_batch",
        (
            "    total = 0.0\n    for x, y in micro_batches:\n",
            "    model.zero_grad()  # a clean start\n    total = 0.0\n    for x, y in micro_batches:\n",
        ),
    ),
    "loss returned as a 0-dim tensor": Mistake(
        "5.1",
        "accumulate_gradients",
        "test_equal_micro_batches_match_one_big_batch",
        ("        total += summed.item()\n", "        total += summed.detach()\n"),
    ),
    # --- 5.2 effective_batch, accum_for
    "effective batch without world_size": Mistake(
        "5.2",
        "effective_batch",
        "test_effective_batch",
        ("return micro_batch * accum * world_size", "return micro_batch * accum"),
    ),
    "accum rounded down instead of raising": Mistake(
        "5.2",
        "accum_for",
        "test_accum_for",
        (
            "    if target_batch % per_round:\n        raise",
            "    if target_batch % per_round:\n        return max(1, target_batch // per_round)\n        raise",
        ),
    ),
    "accum without world_size": Mistake(
        "5.2", "accum_for", "test_accum_for", ("per_round = micro_batch * world_size", "per_round = micro_batch")
    ),
    "only the micro-batch must divide": Mistake(
        "5.2", "accum_for", "test_accum_for", ("if target_batch % per_round:", "if target_batch % micro_batch:")
    ),
    "no error for a world_size below 1": Mistake(
        "5.2",
        "accum_for",
        "test_accum_for",
        (
            "    if target_batch < 1 or micro_batch < 1 or world_size < 1:\n        raise ValueError(",
            "    if target_batch < 1 or micro_batch < 1:\n        raise ValueError(",
        ),
    ),
    # --- 5.3 compare_accumulation
    "first loss reported (5.3)": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        (
            '"final_loss": result.losses[-1],\n                "predicted_peak_bytes": memory',
            '"final_loss": result.losses[0],\n                "predicted_peak_bytes": memory',
        ),
    ),
    "whole effective batch per micro-batch": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        (
            "            batch=micro_batch,\n            accum=accum,",
            "            batch=effective,\n            accum=accum,",
        ),
    ),
    "peak predicted for the effective batch": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        (
            "memory.estimate(get_config(preset), micro_batch, ctx, device=device)",
            "memory.estimate(get_config(preset), effective, ctx, device=device)",
        ),
    ),
    "clock started after the run (5.3)": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        (
            "        start = time.perf_counter()\n        result = train(cfg, data)\n        rows",
            "        result = train(cfg, data)\n        start = time.perf_counter()\n        rows",
        ),
    ),
    "one clock for all the runs (5.3)": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        [
            (
                "    rows = []\n    for accum in accums:",
                "    rows = []\n    start = time.perf_counter()  # once\n    for accum in accums:",
            ),
            (
                "        start = time.perf_counter()\n        result = train(cfg, data)\n",
                "        result = train(cfg, data)\n",
            ),
        ],
    ),
    "ctx of the preset (5.3)": Mistake(
        "5.3",
        "compare_accumulation",
        "test_compare_accumulation",
        ("            ctx=ctx,\n", "            ctx=get_config(preset).ctx,\n"),
    ),
    # --- 6.1 checkpointed_forward
    "recomputation with other dropout masks": Mistake(
        "6.1",
        "checkpointed_forward",
        "test_dropout_masks_are_the_same_when_recomputed",
        (
            "x = checkpoint(block, x, cos, sin, use_reentrant=False)",
            "x = checkpoint(block, x, cos, sin, use_reentrant=False, preserve_rng_state=False)",
        ),
    ),
    "one checkpoint around the whole stack": Mistake(
        "6.1",
        "checkpointed_forward",
        "test_checkpointed_forward_keeps_only_block_inputs",
        """
        def checkpointed_forward(blocks, x, cos, sin):
            def run_all(x):
                for block in blocks:
                    x = block(x, cos, sin)
                return x

            return checkpoint(run_all, x, use_reentrant=False)
        """,
    ),
    "reentrant checkpointing": Mistake(
        "6.1",
        "checkpointed_forward",
        "test_checkpointed_forward_gives_the_same_gradients",
        (
            "x = checkpoint(block, x, cos, sin, use_reentrant=False)",
            "x = checkpoint(block, x, cos, sin, use_reentrant=True)",
        ),
    ),
    "checkpoint's output dropped": Mistake(
        "6.1",
        "checkpointed_forward",
        "test_checkpointed_forward_gives_the_same_gradients",
        (
            "x = checkpoint(block, x, cos, sin, use_reentrant=False)",
            "checkpoint(block, x, cos, sin, use_reentrant=False)",
        ),
    ),
    # --- 6.2 sqrt_segments
    "L // n blocks per segment, the rest dropped": Mistake(
        "6.2",
        "sqrt_segments",
        "test_sqrt_segments",
        (
            "bounds = [round(i * n_layer / n_seg) for i in range(n_seg + 1)]",
            "bounds = [i * (n_layer // n_seg) for i in range(n_seg + 1)]",
        ),
    ),
    "floor(sqrt(L)) segments": Mistake(
        "6.2",
        "sqrt_segments",
        "test_sqrt_segments",
        ("n_seg = max(1, round(math.sqrt(n_layer)))", "n_seg = max(1, int(math.sqrt(n_layer)))"),
    ),
    "the remainder all in the last segment": Mistake(
        "6.2",
        "sqrt_segments",
        "test_sqrt_segments",
        (
            "bounds = [round(i * n_layer / n_seg) for i in range(n_seg + 1)]",
            "bounds = [i * (n_layer // n_seg) for i in range(n_seg)] + [n_layer]",
        ),
    ),
    "no error for zero layers": Mistake(
        "6.2",
        "sqrt_segments",
        "test_sqrt_segments",
        ("    if n_layer < 1:\n        raise ValueError", "    if n_layer < 0:\n        raise ValueError"),
    ),
    # --- 6.3 sqrt_checkpointed_forward
    "one checkpoint per block, not per segment": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "test_sqrt_checkpointing_keeps_only_segment_inputs",
        (
            "x = checkpoint(run_segment, segment, x, use_reentrant=False)",
            (
                "for i in segment:  # each block on its own\n"
                "            x = checkpoint(blocks[i], x, cos, sin, use_reentrant=False)"
            ),
        ),
    ),
    "L // n blocks per segment, the rest never run": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "test_sqrt_checkpointing_gives_the_same_gradients",
        (
            "    for segment in package_sqrt_segments(len(blocks)):\n",
            (
                "    n_seg = round(math.sqrt(len(blocks)))\n"
                "    size = len(blocks) // n_seg\n"
                "    for segment in [range(i * size, (i + 1) * size) for i in range(n_seg)]:\n"
            ),
        ),
    ),
    "one checkpoint around all the segments": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "test_sqrt_checkpointing_keeps_only_segment_inputs",
        (
            (
                "    for segment in package_sqrt_segments(len(blocks)):\n"
                "        x = checkpoint(run_segment, segment, x, use_reentrant=False)\n"
            ),
            "    x = checkpoint(run_segment, range(len(blocks)), x, use_reentrant=False)\n",
        ),
    ),
    "the segment read late by a lambda": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "test_sqrt_checkpointing_gives_the_same_gradients",
        (
            "x = checkpoint(run_segment, segment, x, use_reentrant=False)",
            "x = checkpoint(lambda x: run_segment(segment, x), x, use_reentrant=False)",
        ),
    ),
    "reentrant segments": Mistake(
        "6.3",
        "sqrt_checkpointed_forward",
        "test_sqrt_checkpointing_gives_the_same_gradients",
        (
            "x = checkpoint(run_segment, segment, x, use_reentrant=False)",
            "x = checkpoint(run_segment, segment, x, use_reentrant=True)",
        ),
    ),
    # --- 6.4 checkpointing_tradeoff
    "no warm-up step": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        (
            (
                "        loss.backward()  # this was the warm-up step\n"
                "        optimizer.step()\n"
                "        optimizer.zero_grad(set_to_none=True)\n"
            ),
            "        del loss  # counted; no warm-up step\n",
        ),
    ),
    "total time, not divided by the steps": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        (
            '"seconds_per_step": (time.perf_counter() - start) / steps,',
            '"seconds_per_step": time.perf_counter() - start,',
        ),
    ),
    "weights counted as activations": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        ("            if storage.data_ptr() not in weights:\n", "            if True:\n"),
    ),
    "ratios inverted": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        (
            'row["activations_ratio"] = row["activation_bytes"] / rows[0]["activation_bytes"]',
            'row["activations_ratio"] = rows[0]["activation_bytes"] / row["activation_bytes"]',
        ),
    ),
    "no zero_grad in the timed loop": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        (
            "            optimizer.step()\n            optimizer.zero_grad(set_to_none=True)\n",
            "            optimizer.step()\n",
        ),
    ),
    "batch at the preset's ctx (6.4)": Mistake(
        "6.4",
        "checkpointing_tradeoff",
        "test_checkpointing_tradeoff_table",
        ("(batch, ctx + 1), generator=gen)", "(batch, cfg.ctx + 1), generator=gen)"),
    ),
    # --- 7.1 find_max_batch_size
    "binary search off by one": Mistake(
        "7.1",
        "find_max_batch_size",
        "test_binary_search_finds_the_largest_batch",
        """
        def find_max_batch_size(fits, low=1, high=256):
            lo, hi = low, high
            while lo < hi:  # finds the first batch that does NOT fit
                mid = (lo + hi) // 2
                if fits(mid):
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        """,
    ),
    "low never checked": Mistake(
        "7.1",
        "find_max_batch_size",
        "test_nothing_fits_returns_zero",
        ("    if not fits(low):\n        return 0\n", ""),
    ),
    "linear search down from high": Mistake(
        "7.1",
        "find_max_batch_size",
        "test_binary_search_finds_the_largest_batch",
        """
        def find_max_batch_size(fits, low=1, high=256):
            for batch in range(high, low - 1, -1):
                if fits(batch):
                    return batch
            return 0
        """,
    ),
    "doubling past high": Mistake(
        "7.1",
        "find_max_batch_size",
        "test_binary_search_finds_the_largest_batch",
        (
            "    lo, hi = low, high\n    while lo < hi:\n        mid = (lo + hi + 1)",
            (
                "    good = low\n"
                "    while fits(good * 2):  # double until it fails\n"
                "        good *= 2\n"
                "    lo, hi = good, min(2 * good - 1, high)\n"
                "    while lo < hi:\n"
                "        mid = (lo + hi + 1)"
            ),
        ),
    ),
    # --- 7.2 plan_micro_batch
    "a peak equal to the budget rejected": Mistake(
        "7.2",
        "plan_micro_batch",
        "test_planner_edge_cases",
        ("if predict_peak(m, mode) <= budget_bytes]", "if predict_peak(m, mode) < budget_bytes]"),
    ),
    "the modes' order ignored": Mistake(
        "7.2",
        "plan_micro_batch",
        "test_planner_edge_cases",
        ("    for mode in modes:\n        fitting", '    for mode in ("none", "selective", "full"):\n        fitting'),
    ),
    "nothing fits: the last mode": Mistake(
        "7.2",
        "plan_micro_batch",
        "test_planner_edge_cases",
        ("    mode = min(peaks, key=peaks.get)\n", "    mode = modes[-1]\n"),
    ),
    "micro-batches that do not divide": Mistake(
        "7.2",
        "plan_micro_batch",
        "test_planner_rules",
        (
            "divisors = [m for m in range(1, effective_batch + 1) if effective_batch % m == 0]",
            "divisors = list(range(1, effective_batch + 1))",
        ),
    ),
    # --- 7.3 step_fits
    "every error read as out of memory": Mistake(
        "7.3",
        "step_fits",
        "test_other_errors_are_not_swallowed",
        """
        def step_fits(run_step):
            try:
                run_step()
            except Exception:  # a shape bug now reads as "does not fit"
                return False
            return True
        """,
    ),
    "only torch.OutOfMemoryError caught": Mistake(
        "7.3",
        "step_fits",
        "test_out_of_memory_means_does_not_fit",
        (
            'if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():',
            "if not isinstance(error, torch.OutOfMemoryError):",
        ),
    ),
    "every RuntimeError read as out of memory": Mistake(
        "7.3",
        "step_fits",
        "test_other_errors_are_not_swallowed",
        (
            'if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():',
            "if False:",
        ),
    ),
    "True never returned": Mistake(
        "7.3",
        "step_fits",
        "test_out_of_memory_means_does_not_fit",
        ("    return not out_of_memory\n", "    if out_of_memory:\n        return False\n"),
    ),
    "nothing freed after out of memory": Mistake(
        "7.3",
        "step_fits",
        "test_out_of_memory_means_does_not_fit",
        (
            "    if out_of_memory:\n        gc.collect()\n        if torch.cuda.is_available():\n"
            "            torch.cuda.empty_cache()\n",
            "",
        ),
    ),
    "gc.collect() inside the except block": Mistake(
        "7.3",
        "step_fits",
        "test_out_of_memory_means_does_not_fit",
        """
        def step_fits(run_step):
            try:
                run_step()
            except RuntimeError as error:
                if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():
                    raise
                gc.collect()  # too early: the error's traceback still holds the failed step's tensors
                return False
            return True
        """,
    ),
    # --- 8.1 per_rank_state_bytes
    "sharded state not divided by world": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "test_per_rank_bytes_of_each_mode",
        ("    per_shard = math.ceil(n_params / world)", "    per_shard = n_params"),
    ),
    "shard rounded down": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "test_per_rank_bytes_round_the_shard_up",
        ("    per_shard = math.ceil(n_params / world)", "    per_shard = n_params // world"),
    ),
    "zero1 shards the gradients too": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "test_per_rank_bytes_of_each_mode",
        ('    "zero1": ("optimizer",),', '    "zero1": ("optimizer", "gradients"),'),
    ),
    "fsdp keeps the weights whole": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "test_per_rank_bytes_of_each_mode",
        ('    "fsdp": ("optimizer", "gradients", "weights"),', '    "fsdp": ("optimizer", "gradients"),'),
    ),
    "no error for a world below 1": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "test_per_rank_bytes_round_the_shard_up",
        ('    if world < 1:\n        raise ValueError(f"world must be at least 1 process, got {world}")\n', ""),
    ),
    # --- 8.2 flat_shard_range
    "shard size rounded down": Mistake(
        "8.2",
        "flat_shard_range",
        "test_shards_cover_the_tensor_once",
        ("    shard_size = math.ceil(numel / world)\n    start", "    shard_size = numel // world\n    start"),
    ),
    "end not clipped to the tensor": Mistake(
        "8.2",
        "flat_shard_range",
        "test_shards_cover_the_tensor_once",
        ("    end = min(start + shard_size, numel)", "    end = start + shard_size"),
    ),
    "start not clipped to the tensor": Mistake(
        "8.2",
        "flat_shard_range",
        "test_shards_cover_the_tensor_once",
        ("    start = min(rank * shard_size, numel)", "    start = rank * shard_size"),
    ),
    "padding forgotten": Mistake(
        "8.2",
        "flat_shard_range",
        "test_shards_cover_the_tensor_once",
        ("    return start, end, shard_size - (end - start)", "    return start, end, 0"),
    ),
    # --- 8.3 average_gradients
    "summed instead of averaged": Mistake(
        "8.3",
        "average_gradients",
        "test_averaged_gradients_equal_one_process_on_the_whole_batch",
        ("            p.grad /= world\n", ""),
    ),
    "all-reduce of a copy": Mistake(
        "8.3",
        "average_gradients",
        "test_averaged_gradients_equal_one_process_on_the_whole_batch",
        (
            "            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)",
            "            dist.all_reduce(p.grad.clone(), op=dist.ReduceOp.SUM)",
        ),
    ),
    "rank 0's gradient broadcast": Mistake(
        "8.3",
        "average_gradients",
        "test_averaged_gradients_equal_one_process_on_the_whole_batch",
        """
        def average_gradients(model):
            for p in model.parameters():
                if p.grad is not None:
                    dist.broadcast(p.grad, src=0)  # every rank gets rank 0's gradient, not the mean
        """,
    ),
    "only rank 0 joins the all-reduce": Mistake(
        "8.3",
        "average_gradients",
        "test_averaged_gradients_equal_one_process_on_the_whole_batch",
        """
        def average_gradients(model):
            if dist.get_rank() == 0:  # the other rank never joins: a collective needs every rank
                for p in model.parameters():
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
                        p.grad /= dist.get_world_size()
        """,
    ),
    "world size hard-coded to 2": Mistake(
        "8.3",
        "average_gradients",
        "test_averaged_gradients_equal_one_process_on_the_whole_batch",
        ("    world = dist.get_world_size()\n", "    world = 2  # two processes\n"),
    ),
    "gradients replaced, not averaged in place": Mistake(
        "8.3",
        "average_gradients",
        "test_every_rank_ends_with_the_same_gradients",
        ("            p.grad /= world\n", "            p.grad = p.grad / world\n"),
    ),
    # --- 9.1 quantize_blockwise, dequantize_blockwise
    "one absmax scale for the whole tensor": Mistake(
        "9.1",
        "quantize_blockwise",
        "test_codes_and_scales_match_the_formula",
        ("    scales = blocks.abs().amax(dim=1)\n", "    scales = blocks.abs().amax().expand(n_blocks).clone()\n"),
    ),
    "the sign dropped": Mistake(
        "9.1",
        "quantize_blockwise",
        "test_codes_and_scales_match_the_formula",
        (
            "codes = torch.round(127 * ratio ** (1 / power)) * blocks.sign()",
            "codes = torch.round(127 * ratio ** (1 / power))",
        ),
    ),
    "codes truncated, not rounded": Mistake(
        "9.1",
        "quantize_blockwise",
        "test_codes_and_scales_match_the_formula",
        ("codes = torch.round(127 * ratio ** (1 / power))", "codes = torch.trunc(127 * ratio ** (1 / power))"),
    ),
    "dequantize forgets the power": Mistake(
        "9.1",
        "dequantize_blockwise",
        "test_dequantize_inverts_within_half_a_step",
        ("x = q.sign() * (q.abs() / 127) ** power * per_value", "x = q.sign() * (q.abs() / 127) * per_value"),
    ),
    # --- 9.2 chunked_cross_entropy
    "chunks without the recompute": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "test_no_tensor_holds_all_the_logits",
        (
            "total = total + checkpoint(piece_loss, h, weight, t, use_reentrant=False)",
            "total = total + piece_loss(h, weight, t)",
        ),
    ),
    "the mean of the chunks' means": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "test_chunked_loss_and_gradients_equal_the_whole_loss",
        [
            ('F.cross_entropy(h @ w.t(), t, reduction="sum")', "F.cross_entropy(h @ w.t(), t)"),
            ("    return total / targets.numel()\n", "    return total / chunks\n"),
        ],
    ),
    "the summed loss, not the mean": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "test_chunked_loss_and_gradients_equal_the_whole_loss",
        ("    return total / targets.numel()\n", "    return total\n"),
    ),
    "the whole logits made, then split": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "test_no_tensor_holds_all_the_logits",
        """
        def chunked_cross_entropy(hidden, weight, targets, chunks):
            logits = hidden @ weight.t()  # all N x V at once, then cut into chunks
            pieces = zip(logits.tensor_split(chunks), targets.tensor_split(chunks))
            total = sum(F.cross_entropy(lc, tc, reduction="sum") for lc, tc in pieces)
            return total / targets.numel()
        """,
    ),
    # --- 9.3 state_bytes
    "the tied embedding counted twice": Mistake(
        "9.3",
        "state_bytes",
        "test_state_bytes_match_the_real_optimizers",
        (
            "    sizes = [p.numel() for p in model.parameters()]\n",
            "    sizes = [p.numel() for m in model.modules() for p in m.parameters(recurse=False)]\n",
        ),
    ),
    "8-bit moments without their block scales": Mistake(
        "9.3",
        "state_bytes",
        "test_state_bytes_match_the_real_optimizers",
        ("2 * (n + 4 * -(-n // 256))", "2 * n"),
    ),
    "every tensor in 8 bits, the norm gains too": Mistake(
        "9.3",
        "state_bytes",
        "test_state_bytes_match_the_real_optimizers",
        ("8 * n if n < 4096 else 2 * (n + 4 * -(-n // 256))", "2 * (n + 4 * -(-n // 256))"),
    ),
    "the step in backward keeps no gradient": Mistake(
        "9.3",
        "state_bytes",
        "test_the_step_in_backward_keeps_one_gradient",
        (
            "    gradients = 4 * (max(sizes) if in_backward else sum(sizes))\n",
            "    gradients = 0 if in_backward else 4 * sum(sizes)\n",
        ),
    ),
    # --- 10.1 lora_forward
    "the adapter scaled by alpha, not alpha / r": Mistake(
        "10.1",
        "lora_forward",
        "test_lora_forward_matches_the_formula",
        ("((x @ lora_A.T) * (alpha / rank))", "((x @ lora_A.T) * alpha)"),
    ),
    "the rank read from B's first dimension (out)": Mistake(
        "10.1",
        "lora_forward",
        "test_lora_forward_matches_the_formula",
        (
            "    rank = lora_A.shape[0]\n    return x @ weight.T + ",
            "    rank = lora_B.shape[0]\n    return x @ weight.T + ",
        ),
    ),
    "the adapter added unscaled": Mistake(
        "10.1",
        "lora_forward",
        "test_lora_forward_matches_the_formula",
        ("((x @ lora_A.T) * (alpha / rank)) @ lora_B.T", "(x @ lora_A.T) @ lora_B.T"),
    ),
    # --- 10.2 merge_lora
    "merged in place into the shared base": Mistake(
        "10.2",
        "merge_lora",
        "test_merged_weight_computes_the_adapted_layer",
        """
        def merge_lora(weight, lora_A, lora_B, alpha):
            weight += (alpha / lora_A.shape[0]) * (lora_B @ lora_A)  # the base changed for every adapter
            return weight
        """,
    ),
    "A and B multiplied the other way round": Mistake(
        "10.2",
        "merge_lora",
        "test_merged_weight_computes_the_adapted_layer",
        ("(lora_B @ lora_A)", "(lora_A.T @ lora_B.T)"),
    ),
    "merged without the alpha / r scale": Mistake(
        "10.2",
        "merge_lora",
        "test_merged_weight_computes_the_adapted_layer",
        ("return weight + (alpha / rank) * (lora_B @ lora_A)", "return weight + lora_B @ lora_A"),
    ),
    # --- 10.3 nf4_quantize
    "one scale for the whole tensor": Mistake(
        "10.3",
        "nf4_quantize",
        "test_nf4_quantize_picks_the_nearest_code_per_block",
        ("    scales = blocks.abs().amax(dim=1)\n", "    scales = blocks.abs().amax().expand(blocks.shape[0])\n"),
    ),
    "blocks taken down the columns": Mistake(
        "10.3",
        "nf4_quantize",
        "test_nf4_quantize_picks_the_nearest_code_per_block",
        (
            "blocks = weight.detach().float().reshape(-1, block)",
            "blocks = weight.detach().float().T.reshape(-1, block)",
        ),
    ),
    "an evenly spaced 4-bit code instead of NF4's values": Mistake(
        "10.3",
        "nf4_quantize",
        "test_nf4_quantize_picks_the_nearest_code_per_block",
        (
            "codes = (normed[..., None] - NF4_CODE).abs().argmin(dim=-1).to(torch.uint8)",
            "codes = torch.round((normed + 1) * 7.5).to(torch.uint8)",
        ),
    ),
    "an all-zero block divided by zero": Mistake(
        "10.3",
        "nf4_quantize",
        "test_nf4_quantize_picks_the_nearest_code_per_block",
        ("    scales = torch.where(scales > 0, scales, torch.ones_like(scales))\n", ""),
    ),
    # --- 10.4 nf4_dequantize
    "the scales tiled, not repeated per block": Mistake(
        "10.4",
        "nf4_dequantize",
        "test_nf4_dequantize_round_trip",
        """
        def nf4_dequantize(codes, scales, block=64):
            values = NF4_CODE[codes.long()].flatten() * scales.repeat(block)  # block 0's scale on value 1
            return values.reshape(codes.shape)
        """,
    ),
    "the codes taken as the values": Mistake(
        "10.4",
        "nf4_dequantize",
        "test_nf4_dequantize_round_trip",
        ("values = NF4_CODE[codes.long()].reshape(-1, block)", "values = codes.float().reshape(-1, block)"),
    ),
    "divided by the scale, as quantizing does": Mistake(
        "10.4",
        "nf4_dequantize",
        "test_nf4_dequantize_round_trip",
        ("* scales[:, None]", "/ scales[:, None]"),
    ),
}
