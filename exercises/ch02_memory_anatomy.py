# Chapter 2 exercises, generated from solutions/ch02_memory_anatomy.py by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k 2.1      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
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
    raise NotImplementedError(
        "Exercise 2.1: blocks (4C^2 + 3CH + 2C each) + embedding V*C (lm_head is tied to it) + final norm C"
        " - see chapters/02_memory_anatomy.ipynb"
    )


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
    raise NotImplementedError(
        "Exercise 2.2: bytes per parameter = weights + master copy + grads + Adam m and v; autocast keeps fp32"
        " - see chapters/02_memory_anatomy.ipynb"
    )


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
    raise NotImplementedError(
        "Exercise 2.3: sum the saved tensors per token (per block: 52C + 16H + 8 + 4*heads) times batch*ctx"
        " - see chapters/02_memory_anatomy.ipynb"
    )
