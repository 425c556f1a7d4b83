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
    (scaler.step, which skips the step if a gradient is inf/NaN), update the scale (scaler.update()), and
    zero the gradients with optimizer.zero_grad(), which sets them to None. Check max_norm first, so that
    a call with a bad one changes nothing.

    Returns: dict {"loss": float, the loss the model computed (not the scaled one), "grad_norm": float, the
        norm of the true (unscaled) gradients before clipping (inf or nan on a skipped step), "scale": float,
        the scale used for this step (scaler.get_scale() before scaler.update()), "skipped": bool, whether the
        scaler skipped the optimizer step (it then lowers the scale; a scale that grows was a step taken)}.
    In place: the model's weights take one optimizer step on the clipped gradients (none when skipped), the
        optimizer's state advances with them, the gradients are left as None, and the scaler's scale and
        growth tracker move on (scaler.update()).
    Raises: ValueError if max_norm is not positive.
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
    Check the settings first, whichever way the step went: GradScaler refuses the same ones.

    Returns: tuple (the new scale, a float; the new growth tracker, an int).
    In place: nothing.
    Raises: ValueError if growth_interval is below 1.
    Raises: ValueError if growth_factor is not above 1, or backoff_factor is not between 0 and 1 (both excluded).
    Raises: ValueError if growth_tracker is negative or not below growth_interval (the tracker resets when it
        gets there, so it never holds more).
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
    Step the schedule after the optimizer, as PyTorch asks. A scaler made with enabled=False (the same code
    for an fp32 or bf16 run) keeps its scale at 1.0 and never skips.

    Returns: bool, True if the step was skipped (the scale went down), False if the optimizer stepped.
    In place: the optimizer steps through the scaler (scaler.step unscales the gradients in place, then changes
        the parameters and the optimizer's state unless it skips), the scaler's scale and growth tracker move
        on (scaler.update()), and the scheduler takes one step only when the optimizer did. The gradients are
        not zeroed: that is the caller's job.
    Raises: nothing of its own.
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
    gradients overflow fp16's 65504). Draw every batch with data.get_batch("train", batch, ctx, generator)
    (data=None: the built-in corpus, minigpt.data.load_tokens()) from one generator for the whole run,
    torch.Generator().manual_seed(seed). Each step: the fp16 step of exercise 4.1, clipping to 1.0.
    Check the arguments before anything is built or loaded.

    Returns: list of dicts, one per step: {"step": int, 1, 2, ..., "loss": float, "scale": float, the scale
        used for that step (scaler.get_scale() before scaler.update()), "skipped": bool}.
    In place: nothing (data is only read).
    Raises: ValueError if lr or init_scale is not positive.
    Raises: ValueError if steps, batch or ctx is below 1, or ctx is above the preset's maximum context.
    Raises: ValueError if the preset is unknown.
    """
    raise NotImplementedError(
        "Exercise 4.4: a GradScaler(init_scale=...) training loop; record scaler.get_scale() before each step"
        " - see chapters/04_fp16_gradscaler.ipynb"
    )
