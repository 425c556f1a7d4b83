"""Chapter 8 exercises: what each process holds when the training state is sharded, which slice it owns,
and averaging gradients across processes by hand.

Each function is one exercise; its docstring states the task.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

# Which of the three training states each mode splits across the processes. ZeRO stage 2 is not a mode of
# `minigpt train`, but DeepSpeed has it and FSDP's SHARD_GRAD_OP strategy is close to it.
SHARDED_STATES = {
    "none": (),  # data parallelism (DDP): every process holds everything
    "zero1": ("optimizer",),  # ZeRO stage 1
    "zero2": ("optimizer", "gradients"),  # ZeRO stage 2
    "fsdp": ("optimizer", "gradients", "weights"),  # ZeRO stage 3
}


def per_rank_state_bytes(n_params: int, bytes_per_param: dict[str, float], shard: str, world: int) -> dict[str, int]:
    """Exercise 8.1: the bytes of weights, gradients and optimizer state that ONE process holds.

    bytes_per_param gives the bytes of each state per parameter, e.g. {"weights": 4, "gradients": 4,
    "optimizer": 8} for fp32 weights with AdamW (a value may be fractional: 0.5 for 4-bit weights); other
    keys in it are not states and are left out. SHARDED_STATES says which states `shard` splits across
    the `world` processes. A split state is cut into `world` equal flat shards, padded at the end so that
    every process holds the same number of elements: ceil(n_params / world) parameters' worth, on EVERY
    rank (the last one holds padding). A state that is not split is whole on every process.

    Returns: a dict {"weights": int, "gradients": int, "optimizer": int}: the parameters' worth this
        process holds of each state times that state's bytes per parameter, rounded to the nearest whole
        byte with round() (a half goes to the even neighbour: 2.5 -> 2), never truncated.
    In place: nothing.
    Raises: ValueError if shard is not a mode of SHARDED_STATES.
    Raises: ValueError if world < 1 or n_params < 0.
    Raises: KeyError if bytes_per_param lacks one of "weights", "gradients" and "optimizer".
    """
    # BEGIN SOLUTION 8.1: a split state holds ceil(n_params / world) parameters' worth; the others all of them
    if shard not in SHARDED_STATES:
        raise ValueError(f"unknown shard mode {shard!r}; choose one of: {', '.join(SHARDED_STATES)}")
    if world < 1:
        raise ValueError(f"world must be at least 1 process, got {world}")
    if n_params < 0:
        raise ValueError(f"n_params must be 0 or more, got {n_params}")
    missing = [state for state in ("weights", "gradients", "optimizer") if state not in bytes_per_param]
    if missing:
        raise KeyError(f"bytes_per_param has no bytes for {', '.join(missing)}")
    per_shard = math.ceil(n_params / world)  # rounded up: the padded shard every rank holds
    return {
        state: round((per_shard if state in SHARDED_STATES[shard] else n_params) * bytes_per_param[state])
        for state in ("weights", "gradients", "optimizer")
    }
    # END SOLUTION


def flat_shard_range(numel: int, rank: int, world: int) -> tuple[int, int, int]:
    """Exercise 8.2: the slice [start, end) of a flat tensor of `numel` elements that `rank` owns, and its padding.

    The tensor is split into `world` shards of the same size, shard_size = ceil(numel / world), in rank
    order: rank r owns the elements r * shard_size up to (r + 1) * shard_size, clipped to the tensor. The
    shards past the end are filled up with padding so that every rank holds shard_size elements (the
    collectives need equal sizes). Every element belongs to exactly one rank; a rank past the end of the
    tensor owns the empty slice [numel, numel) and only padding.

    Returns: a tuple of three ints (start, end, padding) with 0 <= start <= end <= numel and
        (end - start) + padding == shard_size.
    In place: nothing.
    Raises: ValueError if world < 1.
    Raises: ValueError if rank is not one of 0, 1, ..., world - 1.
    Raises: ValueError if numel < 0.
    """
    # BEGIN SOLUTION 8.2: shard_size = ceil(numel / world); clip both ends to numel; padding fills up to shard_size
    if world < 1:
        raise ValueError(f"the tensor is split over world >= 1 processes, got world={world}")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of the {world} processes 0 .. {world - 1}")
    if numel < 0:
        raise ValueError(f"numel must be 0 or more, got {numel}")
    shard_size = math.ceil(numel / world)
    start = min(rank * shard_size, numel)
    end = min(start + shard_size, numel)
    return start, end, shard_size - (end - start)
    # END SOLUTION


def average_gradients(model: torch.nn.Module) -> None:
    """Exercise 8.3: after backward on every process, make each gradient the mean over the processes.

    This is what DistributedDataParallel does for you (while backward runs, bucket by bucket). Each
    process computed the gradients of its own slice of the batch; replace every p.grad, in place, by the
    average of that gradient over all dist.get_world_size() processes, with torch.distributed.all_reduce
    (it sums by default and writes the result into the tensor it is given: then divide by the number of
    processes). Keep to the sum: gloo, the CPU backend, does not have ReduceOp.AVG in every version of
    torch. Skip parameters without a gradient.

    Returns: None.
    In place: every p.grad that is not None becomes the mean of that gradient over the processes, in the
        same tensor (whatever holds it sees the average); the parameters, and gradients that are None,
        stay as they are.
    Raises: nothing of its own.
    """
    # BEGIN SOLUTION 8.3: all_reduce (a sum, in place) each p.grad, then divide it by dist.get_world_size()
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # in place: every rank now holds the sum
            p.grad /= world
    # END SOLUTION


# ----------------------------------------------------------------------------------------------------------
# Not an exercise: the notebook's experiment, here so that other processes can import it.


def data_parallel_by_hand(steps: int = 3, batch: int = 8) -> list[float]:
    """A few training steps of data parallelism built from average_gradients; the loss of each step.

    Started in N processes by minigpt.distributed.spawn_on_cpu, every rank builds the same model, takes its
    1/N of each batch, averages the gradients with average_gradients and steps AdamW. In one process (no
    process group) it trains on the whole batch: the losses should be the same.
    """
    from minigpt.distributed import setup, teardown
    from minigpt.model import GPT, ModelConfig

    rank, world = setup()  # joins the process group spawn_on_cpu describes; (0, 1) in a single process
    try:
        cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)
        model = GPT(cfg, seed=0)  # the same initial weights on every rank
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(0)  # the same batches on every rank
        tokens = torch.randint(0, cfg.vocab_size, (steps, batch, cfg.ctx + 1), generator=generator)
        mine = slice(rank * batch // world, (rank + 1) * batch // world)  # this rank's slice of every batch
        losses = []
        for step in range(steps):
            x, y = tokens[step, mine, :-1], tokens[step, mine, 1:]
            _, loss = model(x, y)
            loss.backward()
            if world > 1:
                average_gradients(model)
                loss = loss.detach().clone()
                dist.all_reduce(loss)  # the whole batch's loss: the mean of the ranks' equal-sized halves
                loss /= world
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        return losses
    finally:
        teardown()
