"""Wrong answers to chapter 2's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 2.1 count_parameters
    "2.1: the MLP's hidden width as 8C/3 rounded down to 64": Mistake(
        "2.1",
        "count_parameters",
        "",
        ("C, H = cfg.n_embd, cfg.mlp_hidden", "C, H = cfg.n_embd, 64 * (8 * cfg.n_embd // 3 // 64)"),
    ),
    "2.1: the MLP's hidden width as 8C/3, not rounded to 64": Mistake(
        "2.1", "count_parameters", "", ("C, H = cfg.n_embd, cfg.mlp_hidden", "C, H = cfg.n_embd, 8 * cfg.n_embd // 3")
    ),
    "2.1: a learned position embedding (ctx x C) counted": Mistake(
        "2.1",
        "count_parameters",
        "",
        ("(attention + mlp + norms) + C\n", "(attention + mlp + norms) + C + cfg.ctx * C\n"),
    ),
    "2.1: n_head blocks, not n_layer": Mistake(
        "2.1", "count_parameters", "", ("+ cfg.n_layer * (attention", "+ cfg.n_head * (attention")
    ),
    "2.1: the vocabulary padded to a multiple of 64": Mistake(
        "2.1", "count_parameters", "", ("return cfg.vocab_size * C +", "return 64 * -(-cfg.vocab_size // 64) * C +")
    ),
    # --- 2.2 static_bytes
    "2.2: the regime matched case-sensitively": Mistake(
        "2.2", "static_bytes", "", ("name, regime = regime, regime.lower()", "name = regime")
    ),
    "2.2: an unknown regime counted as fp32": Mistake(
        "2.2",
        "static_bytes",
        "",
        (
            "    if regime not in per_param:\n        raise ValueError",
            '    if regime not in per_param:\n        regime = "fp32"\n'
            "    if regime not in per_param:\n        raise ValueError",
        ),
    ),
    "2.2: a negative n_params accepted": Mistake(
        "2.2", "static_bytes", "", ("    if n_params < 0:\n        raise", "    if n_params < -1e18:\n        raise")
    ),
    "2.2: a float count of bytes (per-parameter bytes as floats)": Mistake(
        "2.2", "static_bytes", "", ("return per_param[regime] * n_params", "return float(per_param[regime]) * n_params")
    ),
    "2.2: the regime read from its parts ('bf16+master' accepted)": Mistake(
        "2.2",
        "static_bytes",
        "",
        """
        def static_bytes(n_params, regime):
            regime = regime.lower()
            if n_params < 0:
                raise ValueError("n_params must be 0 or more")
            if regime in ("fp32", "bf16", "fp16"):
                return 16 * n_params
            if regime.startswith("bf16") and "master" in regime:
                return 18 * n_params
            if regime.startswith("bf16") and "pure" in regime:
                return 8 * n_params
            raise ValueError(f"unknown regime {regime!r}")
        """,
    ),
    # --- 2.3 activation_bytes
    "2.3: cfg.ctx used, not the ctx passed": Mistake(
        "2.3", "activation_bytes", "", ("return batch * ctx * (cfg.n_layer", "return batch * cfg.ctx * (cfg.n_layer")
    ),
    "2.3: one logsumexp per token, not per head": Mistake(
        "2.3",
        "activation_bytes",
        "",
        (
            "C, H, V, heads, f32 = cfg.n_embd, cfg.mlp_hidden, cfg.vocab_size, cfg.n_head, 4",
            "C, H, V, heads, f32 = cfg.n_embd, cfg.mlp_hidden, cfg.vocab_size, 1, 4",
        ),
    ),
    "2.3: the loss normalizer counted per token": Mistake(
        "2.3", "activation_bytes", "", ("+ outside) + f32\n", "+ outside + f32)\n")
    ),
    "2.3: int64 ids and targets counted as 4 bytes": Mistake(
        "2.3",
        "activation_bytes",
        "",
        ("outside = 8 + f32 * (C + 1 + C + C + V) + 8", "outside = 4 + f32 * (C + 1 + C + C + V) + 4"),
    ),
    "2.3: a ctx longer than the model's accepted": Mistake(
        "2.3",
        "activation_bytes",
        "",
        ("    if ctx > cfg.ctx:\n        raise", "    if ctx > 10 * cfg.ctx:\n        raise"),
    ),
    "2.3: dropout not refused": Mistake(
        "2.3",
        "activation_bytes",
        "",
        ("    if cfg.dropout != 0:\n        raise", "    if cfg.dropout >= 1:\n        raise"),
    ),
    "2.3: a float count (bytes per value as 4.0)": Mistake(
        "2.3", "activation_bytes", "", ("cfg.vocab_size, cfg.n_head, 4\n", "cfg.vocab_size, cfg.n_head, 4.0\n")
    ),
    "2.3: the 1/rms values left out": Mistake(
        "2.3",
        "activation_bytes",
        "",
        [
            ("attention = [C, 1, C, C,", "attention = [C, 0, C, C,"),
            ("mlp = [C, 1, C, C, H, H, H, H]", "mlp = [C, 0, C, C, H, H, H, H]"),
        ],
    ),
    "2.3: a zero batch gives 4 bytes, not a ValueError": Mistake(
        "2.3", "activation_bytes", "", ("    if batch < 1 or ctx < 1:\n        raise", "    if ctx < 1:\n        raise")
    ),
}
