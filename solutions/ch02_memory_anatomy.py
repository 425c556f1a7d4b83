"""Chapter 2 exercises: where the memory of a training step goes, predicted from the config.

Each function is one exercise; its docstring states the task. Read minigpt/model.py next to them: every
number comes from the shapes of the model's tensors. The grader compares with minigpt.memory.
"""

from __future__ import annotations

from minigpt.model import ModelConfig


def count_parameters(cfg: ModelConfig) -> int:
    """Exercise 2.1: the number of parameters of GPT(cfg), from the config alone (build no model).

    Per block: qkv (C x 3C) and proj (C x C); the SwiGLU MLP's gate and up (C x H) and down (H x C), with
    H = cfg.mlp_hidden; two RMSNorm gains (C each). Outside the blocks: the token embedding (V x C), the
    final norm (C), and lm_head, which is the SAME matrix as the embedding (tied): count it once.
    No layer has a bias, and RoPE adds no parameters (its cos and sin tables are buffers), so n_head, ctx,
    dropout and the other fields of cfg do not change the count.

    Returns: int, the number of parameters, as GPT(cfg).num_params() counts them.
    In place: nothing.
    Raises: nothing of its own.
    """
    # BEGIN SOLUTION 2.1: blocks (4C^2 + 3CH + 2C each) + embedding V*C (lm_head is tied to it) + final norm C
    C, H = cfg.n_embd, cfg.mlp_hidden
    attention = 3 * C * C + C * C  # qkv, proj
    mlp = 3 * C * H  # gate, up, down
    norms = 2 * C
    return cfg.vocab_size * C + cfg.n_layer * (attention + mlp + norms) + C
    # END SOLUTION


# Bytes per parameter with AdamW, for each training regime (the chapter's table).
REGIMES = ("fp32", "bf16", "fp16", "bf16-pure", "bf16-pure+master")


def static_bytes(n_params: int, regime: str) -> int:
    """Exercise 2.2: bytes of weights + gradients + AdamW state (m and v) for `n_params` parameters.

    regime is one of REGIMES, in any case ("BF16-Pure" is "bf16-pure"):
      fp32              everything in fp32
      bf16 / fp16       autocast: the weights stay fp32 (the 16-bit copies made for each matmul are
                        temporary), so the gradients and AdamW's moments are fp32 too
      bf16-pure         weights, gradients and moments all stored in bf16
      bf16-pure+master  bf16 weights, plus an fp32 master copy that AdamW updates; fp32 grads and moments
    Raise ValueError for any other regime.

    Returns: int, the bytes: bytes per parameter of the regime times n_params (0 for no parameters).
    In place: nothing.
    Raises: ValueError if regime is not one of REGIMES (whatever its case).
    Raises: ValueError if n_params is negative.
    """
    # BEGIN SOLUTION 2.2: bytes per parameter = weights + master copy + grads + Adam m and v; autocast keeps fp32
    per_param = {
        "fp32": 4 + 4 + 8,
        "bf16": 4 + 4 + 8,  # autocast: fp32 weights, grads and moments
        "fp16": 4 + 4 + 8,
        "bf16-pure": 2 + 2 + 4,
        "bf16-pure+master": 2 + 4 + 4 + 8,  # bf16 weights + fp32 master + fp32 grads + fp32 m, v
    }
    name, regime = regime, regime.lower()
    if regime not in per_param:
        raise ValueError(f"unknown regime {name!r}; choose one of {', '.join(per_param)}")
    if n_params < 0:
        raise ValueError(f"n_params must be 0 or more, got {n_params}")
    return per_param[regime] * n_params
    # END SOLUTION


def activation_bytes(cfg: ModelConfig, batch: int, ctx: int) -> int:
    """Exercise 2.3: bytes autograd keeps for backward in one fp32 training step (no dropout, no checkpointing).

    Count, per token, every tensor the forward saves (chapter 2's activation table), with C = n_embd,
    H = mlp_hidden, V = vocab_size, fp32 = 4 bytes:
      in each block: attn_norm's fp32 input, 1/rms (one value per token) and x/rms; the qkv input; the qkv
        output (3C); q and k after RoPE (2C); attention's output (C) and logsumexp (one per head); proj's
        input (C); the same three for mlp_norm; gate/up's input (C); gate, up, SiLU(gate) and
        SiLU(gate) * up (H each);
      outside the blocks: the token ids (int64), final_norm's input, 1/rms and x/rms, lm_head's input,
        the fp32 log-softmax over the vocabulary (V per token!), the targets (int64), and one fp32
        normalizer for the whole batch (not per token).
    `ctx` is the length of the sequences in this step, at most cfg.ctx (the longest the model accepts).
    The count is exact: every term above counts, the one-value-per-token ones and the normalizer's 4 bytes
    too (chapter 2's formula B T [L (52C + 16H + 8 + 4h) + 12C + 4V + 20] leaves out only those 4 bytes).

    Returns: int, the bytes of every saved tensor of the step, for batch sequences of ctx tokens.
    In place: nothing.
    Raises: ValueError if batch or ctx is less than 1, or if ctx is larger than cfg.ctx.
    Raises: ValueError if cfg.dropout is not 0 (dropout saves masks this table does not count).
    """
    # BEGIN SOLUTION 2.3: sum the saved tensors per token (per block: 52C + 16H + 8 + 4*heads) times batch*ctx
    if batch < 1 or ctx < 1:
        raise ValueError(f"batch and ctx must be at least 1, got batch={batch}, ctx={ctx}")
    if ctx > cfg.ctx:
        raise ValueError(f"ctx={ctx} is longer than the model accepts (cfg.ctx={cfg.ctx})")
    if cfg.dropout != 0:
        raise ValueError(f"this count is for a step without dropout; cfg.dropout={cfg.dropout}")
    C, H, V, heads, f32 = cfg.n_embd, cfg.mlp_hidden, cfg.vocab_size, cfg.n_head, 4
    attention = [C, 1, C, C, 3 * C, 2 * C, C, heads, C]  # attn_norm x, 1/rms, x/rms, qkv in/out, q k, out, lse, proj in
    mlp = [C, 1, C, C, H, H, H, H]  # mlp_norm x, 1/rms, x/rms, gate/up input, gate, up, silu, product
    per_block = f32 * (sum(attention) + sum(mlp))
    outside = 8 + f32 * (C + 1 + C + C + V) + 8  # ids, final_norm x, 1/rms, x/rms, lm_head in, log-softmax, targets
    return batch * ctx * (cfg.n_layer * per_block + outside) + f32
    # END SOLUTION
