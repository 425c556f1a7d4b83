"""Chapter 5 exercises: gradient accumulation, normalized by tokens, and the effective-batch arithmetic.

Each function is one exercise; its docstring states the task.
"""

from __future__ import annotations

import time

import torch

from minigpt import memory
from minigpt.data import TokenData
from minigpt.model import IGNORE_INDEX, get_config
from minigpt.train import TrainConfig, train


def accumulate_gradients(model: torch.nn.Module, micro_batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Exercise 5.1: accumulate the gradients of one optimizer step over micro-batches, as one big batch would.

    Targets equal to IGNORE_INDEX (-100, padding) do not count. The big batch's loss is the mean over
    ALL counted targets of the window, so: count the targets of every micro-batch first (n_tokens), then
    for each micro-batch take the SUMMED loss (model(x, y, reduction="sum")[1]), divide it by n_tokens,
    and backward. Dividing each micro-batch's mean by the number of micro-batches is the same only when
    every micro-batch counts as many targets; with padding it over-weights the short ones. A micro-batch
    whose targets are all IGNORE_INDEX adds nothing (its summed loss is 0).
    Call backward on each micro-batch before the next one's forward: backward frees that micro-batch's graph,
    so memory holds the activations of one micro-batch at a time. Summing the losses and calling backward
    once gives the same gradients, but keeps every micro-batch's activations alive until the end.

    Returns: a float, the window's mean loss per counted target (what one big batch's loss would be).
    In place: adds the window's gradients into the .grad of each parameter that requires grad; gradients
        already there are kept and added to, not zeroed. The weights and the micro-batches are left as given
        (no optimizer step).
    Raises: ValueError if micro_batches is empty or every target in it is IGNORE_INDEX (nothing to learn from).
    """
    # BEGIN SOLUTION 5.1: count the window's targets (y != IGNORE_INDEX) first; backward each summed loss / that count
    if not micro_batches:
        raise ValueError("micro_batches is empty: a window needs at least one micro-batch")
    n_tokens = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro_batches)
    if n_tokens == 0:
        raise ValueError("every target of this window is IGNORE_INDEX: nothing to learn from")
    total = 0.0
    for x, y in micro_batches:
        _, summed = model(x, y, reduction="sum")
        (summed / n_tokens).backward()
        total += summed.item()
    return total / n_tokens
    # END SOLUTION


def effective_batch(micro_batch: int, accum: int, world_size: int = 1) -> int:
    """Exercise 5.2: sequences per optimizer step, for a micro-batch, accumulation steps and processes (GPUs).

    Returns: an int, micro_batch x accum x world_size.
    In place: nothing.
    Raises: ValueError if micro_batch, accum or world_size is below 1 (a run has at least one of each).
    """
    # BEGIN SOLUTION 5.2: each of world_size processes runs accum micro-batches of micro_batch sequences
    if micro_batch < 1 or accum < 1 or world_size < 1:
        raise ValueError(f"sizes must be at least 1, got {micro_batch=}, {accum=}, {world_size=}")
    return micro_batch * accum * world_size
    # END SOLUTION


def accum_for(target_batch: int, micro_batch: int, world_size: int = 1) -> int:
    """Exercise 5.2: accumulation steps that make `target_batch` sequences per step from this micro-batch.

    Returns: an int, target_batch / (micro_batch x world_size).
    In place: nothing.
    Raises: ValueError if target_batch, micro_batch or world_size is below 1 (a run has at least one process).
    Raises: ValueError if target_batch is not a multiple of micro_batch x world_size (say which numbers do not
        divide): a rounded accum would silently train on another batch size.
    """
    # BEGIN SOLUTION 5.2: target_batch / (micro_batch * world_size), which must be a whole number
    per_round = micro_batch * world_size
    if target_batch < 1 or micro_batch < 1 or world_size < 1:
        raise ValueError(f"sizes must be at least 1, got {target_batch=}, {micro_batch=}, {world_size=}")
    if target_batch % per_round:
        raise ValueError(f"target batch {target_batch} is not a multiple of micro_batch x world_size = {per_round}")
    return target_batch // per_round
    # END SOLUTION


def compare_accumulation(
    effective: int = 16,
    accums: tuple[int, ...] = (1, 4, 16),
    preset: str = "tiny",
    ctx: int = 64,
    steps: int = 10,
    device: str = "cpu",
    data: TokenData | None = None,
) -> list[dict]:
    """Exercise 5.3: the same effective batch with accum 1, 4, 16; compare time, memory, loss.

    For each accum: micro_batch = effective // accum; train with minigpt.train.train(TrainConfig(
    preset=..., batch=micro_batch, accum=accum, ctx=..., steps=..., device=..., seed=0, progress=False,
    verbose=False, sample_tokens=0), data), timed with time.perf_counter(). Return one dict per accum:
      accum, micro_batch, seconds (the whole run), final_loss (result.losses[-1]),
      predicted_peak_bytes (minigpt.memory.estimate(model config, micro_batch, ctx, device=device).peak)
      and measured_peak_bytes (result.summary()["peak_memory_bytes"]; None on a CPU).
    Train on `data` (None: train() reads the course's corpus). Defaults are sized for a CPU; on a GPU, try
    effective=128.

    Returns: a list of dicts, one per accum in the order given, each with the keys accum, micro_batch,
        seconds, final_loss, predicted_peak_bytes and measured_peak_bytes.
    In place: nothing.
    Raises: ValueError if effective is below 1, accums is empty, or an accum is below 1 or does not divide
        effective (all checked before any training: a rounded micro-batch would train on another batch).
    """
    # BEGIN SOLUTION 5.3: micro_batch = effective // accum; one timed train() per accum; estimate() for the memory
    if effective < 1 or not accums:
        raise ValueError(f"need an effective batch of at least 1 and at least one accum, got {effective=}, {accums=}")
    for accum in accums:
        if accum < 1 or effective % accum:
            raise ValueError(f"accum {accum} must be at least 1 and divide the effective batch {effective}")
    rows = []
    for accum in accums:
        micro_batch = effective // accum
        cfg = TrainConfig(
            preset=preset,
            batch=micro_batch,
            accum=accum,
            ctx=ctx,
            steps=steps,
            device=device,
            seed=0,
            progress=False,
            verbose=False,
            sample_tokens=0,
            eval_batches=2,
        )
        start = time.perf_counter()
        result = train(cfg, data)
        rows.append(
            {
                "accum": accum,
                "micro_batch": micro_batch,
                "seconds": time.perf_counter() - start,
                "final_loss": result.losses[-1],
                "predicted_peak_bytes": memory.estimate(get_config(preset), micro_batch, ctx, device=device).peak,
                "measured_peak_bytes": result.summary()["peak_memory_bytes"],
            }
        )
    return rows
    # END SOLUTION
