# Chapter 4 exercises, generated from solutions/ch04_fp16_gradscaler.py by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k 4.1      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
"""Chapter 4 exercises: fp16 training with a GradScaler, and the scaler's rule written by hand.

Each function is one exercise; its docstring states the task.
"""

from __future__ import annotations

import torch

from minigpt.data import TokenData, load_tokens
from minigpt.model import GPT, get_config


def scaled_fp16_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    x: torch.Tensor,
    y: torch.Tensor,
    max_norm: float = 1.0,
) -> dict:
    """Exercise 4.1: one fp16 training step with loss scaling; return what happened.

    Forward (`_, loss = model(x, y)`) under torch.autocast(device_type=x.device.type, dtype=torch.float16).
    fp16 gradients below 2**-24 flush to zero, so backpropagate the SCALED loss (scaler.scale(loss)).
    Then unscale the gradients (scaler.unscale_(optimizer)) BEFORE clipping their norm to max_norm:
    clipping scaled gradients clips numbers 65536 times too big. Step through the scaler
    (scaler.step, which skips the step if a gradient is inf/NaN), update the scale, zero the gradients.
    Return {"loss": float, "grad_norm": the norm of the true (unscaled) gradients before clipping,
            "scale": the scale used for this step, "skipped": whether the scaler skipped the step}.
    """
    raise NotImplementedError(
        "Exercise 4.1: scaler.scale(loss).backward(); scaler.unscale_ BEFORE clipping; scaler.step; scaler.update"
        " - see chapters/04_fp16_gradscaler.ipynb"
    )


def update_scale(
    scale: float,
    growth_tracker: int,
    found_inf: bool,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> tuple[float, int]:
    """Exercise 4.2: GradScaler's dynamic scale update, by hand; return (new scale, new growth tracker).

    growth_tracker counts the clean steps in a row. After a step:
      - inf/NaN found: multiply the scale by backoff_factor, and reset the tracker to 0;
      - otherwise: one more clean step; when the tracker reaches growth_interval, multiply the scale by
        growth_factor and reset the tracker to 0.
    So with the defaults the scale halves at every overflow and doubles after 2000 clean steps in a row.
    """
    raise NotImplementedError(
        "Exercise 4.2: inf -> scale * backoff, tracker 0; else tracker + 1, and at growth_interval grow and reset"
        " - see chapters/04_fp16_gradscaler.ipynb"
    )


def step_unless_skipped(
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
) -> bool:
    """Exercise 4.3: step the optimizer through the scaler, and the learning-rate schedule only if it stepped.

    The gradients are already computed (scaled). scaler.step(optimizer) skips the update when it finds
    inf/NaN gradients, and scaler.update() then lowers the scale: compare the scale before and after to
    know. A skipped step did not train, so the schedule must not move either (else warmup ends early).
    Return True if the step was skipped.
    """
    raise NotImplementedError(
        "Exercise 4.3: a skipped step lowers the scale; only advance the scheduler when it did not"
        " - see chapters/04_fp16_gradscaler.ipynb"
    )


def fp16_overflow_experiment(
    lr: float = 3e-3,
    steps: int = 20,
    init_scale: float = 2.0**24,
    preset: str = "tiny",
    batch: int = 2,
    ctx: int = 32,
    device: str = "cpu",
    data: TokenData | None = None,
    seed: int = 0,
) -> list[dict]:
    """Exercise 4.4: fp16 training at a high lr; watch the scaler react (scaler.get_scale()).

    Build GPT(get_config(preset), seed=seed) on `device`, AdamW(lr=lr), and
    torch.amp.GradScaler(device, init_scale=init_scale) (a large initial scale makes the first scaled
    gradients overflow fp16's 65504). Draw batches with data.get_batch("train", batch, ctx, generator)
    (data=None: the built-in corpus, minigpt.data.load_tokens()) from torch.Generator().manual_seed(seed).
    Each step: the fp16 step of exercise 4.1 (clip to 1.0). Return one dict per step:
      {"step": 1, 2, ..., "loss": float, "scale": the scale used for that step, "skipped": bool}.
    """
    raise NotImplementedError(
        "Exercise 4.4: a GradScaler(init_scale=...) training loop; record scaler.get_scale() before each step"
        " - see chapters/04_fp16_gradscaler.ipynb"
    )
