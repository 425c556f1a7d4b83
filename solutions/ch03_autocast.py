"""Chapter 3 exercises: mixed precision with torch.autocast, and why some things stay fp32.

Each function is one exercise; its docstring states the task.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minigpt import memory
from minigpt.data import TokenData
from minigpt.model import get_config
from minigpt.timing import clock
from minigpt.train import TrainConfig, train


def autocast_train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    dtype: torch.dtype = torch.bfloat16,
    max_norm: float = 1.0,
) -> torch.Tensor:
    """Exercise 3.1: one training step with the forward pass in `dtype` under torch.autocast; return the loss.

    Run the model's forward (logits = model(x)[0]) inside torch.autocast(device_type=x.device.type,
    dtype=dtype), so its matmuls run in 16 bits. Compute the cross-entropy loss in fp32: upcast the
    logits with .float() first (a 16-bit loss rounds away the small differences training follows).
    Then backward, clip the gradient norm to max_norm, step, and zero the gradients with
    optimizer.zero_grad(), which sets them to None. The weights stay fp32 throughout: do not convert
    the model. Check the arguments first, so that a call with a bad one changes nothing.

    Returns: torch.Tensor, the batch's loss before the step, as an fp32 scalar (0-dim) tensor, detached.
    In place: the model's weights take one optimizer step on the clipped gradients, the optimizer's state
        advances, and the gradients are left as None.
    Raises: ValueError if dtype is not torch.bfloat16 or torch.float16.
    Raises: ValueError if max_norm is not positive.
    """
    # BEGIN SOLUTION 3.1: forward under torch.autocast, loss from logits.float(), then backward/clip/step/zero_grad
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16 (autocast's 16-bit types), got {dtype}")
    if not max_norm > 0:
        raise ValueError(f"max_norm must be positive, got {max_norm}")
    with torch.autocast(device_type=x.device.type, dtype=dtype):
        logits, _ = model(x)
    loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
    # END SOLUTION


def compare_precisions(
    preset: str = "tiny",
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16"),
    steps: int = 20,
    batch: int = 8,
    ctx: int = 64,
    device: str = "cpu",
    data: TokenData | None = None,
) -> list[dict]:
    """Exercise 3.2: the same training run in each precision; compare time, memory and loss.

    For each precision, train with minigpt.train.train(TrainConfig(preset=..., precision=..., steps=...,
    batch=..., ctx=..., device=..., seed=0, progress=False, verbose=False, sample_tokens=0), data) and
    time it with minigpt.timing.clock(device), read before and after the run: this process's CPU time on a
    CPU, so that other programs on a shared machine do not count, and on a GPU the wall clock once the GPU
    has finished its queued work (section 5 of the chapter; a bare time.perf_counter() measures the machine's
    load as much as the run). Return one dict per precision, in order, with the keys
      precision             the precision name, as given (a str)
      seconds               the run's time by that clock (a float)
      final_loss            the last step's training loss (result.losses[-1], a float)
      predicted_peak_bytes  minigpt.memory.estimate(model config, batch, ctx, precision, device=device).peak
      measured_peak_bytes   result.summary()["peak_memory_bytes"] (None on a CPU: nothing to read)
      skipped_steps         steps the GradScaler skipped (result.skipped_steps: fp16 only; 0 otherwise)
    Defaults are sized for a CPU; on a GPU try preset="10m", steps=1000, device="cuda".

    Returns: list of dicts, one per precision in the order given, each with the six keys above.
    In place: nothing.
    Raises: ValueError if a precision or the preset is unknown (TrainConfig checks, before that run trains).
    Raises: ValueError if steps, batch or ctx is below 1, or ctx is above the preset's maximum (TrainConfig
        checks these too).
    """
    # BEGIN SOLUTION 3.2: one TrainConfig per precision, train(), time it, and read the result's summary
    rows = []
    for precision in precisions:
        cfg = TrainConfig(
            preset=preset,
            precision=precision,
            steps=steps,
            batch=batch,
            ctx=ctx,
            device=device,
            seed=0,
            progress=False,
            verbose=False,
            sample_tokens=0,
            eval_batches=2,
        )
        start = clock(device)
        result = train(cfg, data)
        seconds = clock(device) - start
        predicted = memory.estimate(get_config(preset), batch, ctx, precision, device=device)
        rows.append(
            {
                "precision": precision,
                "seconds": seconds,
                "final_loss": result.losses[-1],
                "predicted_peak_bytes": predicted.peak,
                "measured_peak_bytes": result.summary()["peak_memory_bytes"],
                "skipped_steps": result.skipped_steps,
            }
        )
    return rows
    # END SOLUTION


def lost_update_fraction(weights: torch.Tensor, update: float, dtype: torch.dtype) -> float:
    """Exercise 3.3: the fraction of weights an update would not change.

    Store the weights in `dtype`, add `update` to every element, store the sums in `dtype`, and return
    the fraction of elements that came out equal to what they were. An AdamW step moves each weight by
    about lr, so update=lr tells how much of a model a step still trains when its weights live in `dtype`.
    Let PyTorch do the rounding (to the nearest value, ties to the even one): a rule of your own for "half
    the gap" misses the ties, and that the gap below a power of two is half the gap above it.

    Returns: float, the fraction of all the elements (0.0 to 1.0), whatever the tensor's shape.
    In place: nothing: the caller's weights stay as they are (weights.to(dtype) is the very same tensor
        when the dtype already matches, so never add to it in place).
    Raises: ValueError if weights has no elements.
    Raises: ValueError if dtype is not a floating-point dtype.
    """
    # BEGIN SOLUTION 3.3: round the weights into the dtype, add the update in that dtype, count the unchanged
    if weights.numel() == 0:
        raise ValueError("weights has no elements: there is no fraction of nothing")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    stored = weights.detach().to(dtype)
    return ((stored + update) == stored).float().mean().item()
    # END SOLUTION
