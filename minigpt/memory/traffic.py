"""What sharding costs in communication: the bytes each process sends per optimizer step under --shard.

The collectives are counted as ring algorithms send them (Patarasuk and Yuan, 2009): over N processes, an
all-gather or a reduce-scatter of a buffer of S bytes sends (N-1)/N x S from every process, an all-reduce
twice that (a reduce-scatter, then an all-gather), and N broadcasts of 1/N of the weights each what one
all-gather sends. Two forms: `bytes_sent_per_rank`, the formula for P parameters (what a plan for 7B uses),
and `fsdp_bytes_sent`, FSDP2's collectives one by one for the course's model, which is what
minigpt.distributed.measure_rank_step counts on real processes.
"""

from __future__ import annotations

import torch

from minigpt.memory.static_state import parameter_shapes
from minigpt.model import ModelConfig
from minigpt.parallel import RING_FACTOR, check_shard_mode, fsdp_dtypes, ring_sent  # noqa: F401 - re-exported
from minigpt.precision import normalize_precision

# What each --shard mode runs per optimizer step, as PyTorch implements it: DDP all-reduces the gradients;
# zero1 (DDP + ZeroRedundancyOptimizer) also broadcasts each owner's updated weights; FSDP gathers every
# weight for the forward and again for the backward, and reduce-scatters the gradients.
COLLECTIVES = {
    "none": {"all-reduce": 1},
    "zero1": {"all-reduce": 1, "broadcast": 1},
    "fsdp": {"all-gather": 2, "reduce-scatter": 1},
}
GRADIENT_OPS = ("all-reduce", "reduce-scatter")  # what moves gradients; the others move weights


def element_bytes(precision: str, shard: str) -> dict[str, int]:
    """Bytes per element each collective moves: gradients, and the weights as they are gathered or broadcast.

    Autocast keeps fp32 weights and gradients, so DDP and zero1 move fp32; FSDP with bf16 gathers in bf16 and
    reduces in fp32 (minigpt.parallel.fsdp_dtypes). bf16-pure moves bf16 both ways.
    """
    p = normalize_precision(precision)
    own = 2 if p == "bf16-pure" else 4
    gather, reduce = fsdp_dtypes(p) if shard == "fsdp" else (None, None)
    size = lambda dtype: own if dtype is None else torch.empty(0, dtype=dtype).element_size()  # noqa: E731
    return {"all-gather": size(gather), "broadcast": own, "all-reduce": own, "reduce-scatter": size(reduce)}


def bytes_sent_per_rank(n_params: float, shard: str, world: int, precision: str) -> dict[str, float]:
    """Bytes one process sends per optimizer step, by collective, for P parameters (no accumulation).

    The formula: every collective over all P parameters, as many times as COLLECTIVES says.
    """
    check_shard_mode(shard)
    width = element_bytes(precision, shard)
    return {op: n * ring_sent(op, n_params * width[op], world) for op, n in COLLECTIVES[shard].items()}


def _padded_numel(shapes: list[tuple[int, ...]], world: int) -> int:
    """Elements of FSDP2's gather buffer for these parameters: each cut in N chunks of ceil(rows / N) rows."""
    total = 0
    for shape in shapes:
        row = 1
        for d in shape[1:]:
            row *= d
        total += -(-shape[0] // world) * row * world
    return total


def fsdp_units(cfg: ModelConfig) -> dict[str, list[tuple[int, ...]]]:
    """The parameters each fully_shard call gathers together: the root (embedding, final norm) and each block."""
    shapes = parameter_shapes(cfg)
    per_block = (len(shapes) - 2) // cfg.n_layer
    units = {"root": [shapes[0], shapes[-1]]}
    for i in range(cfg.n_layer):
        units[f"block {i}"] = shapes[1 + i * per_block : 1 + (i + 1) * per_block]
    return units


def fsdp_bytes_sent(cfg: ModelConfig, precision: str, world: int, accum: int = 1) -> dict[str, float]:
    """Bytes one process sends per optimizer step under --shard fsdp, FSDP2's collectives one by one.

    Every micro-batch gathers each block twice (forward, and again for its backward, since the block was
    freed after its forward) and the root once: the root's weights stay gathered from its forward to the end
    of its backward. The gradients are reduce-scattered once per optimizer step, after the last micro-batch
    (the others accumulate unsharded, minigpt.parallel.no_gradient_sync). Buffers are padded to N equal
    shards. The gradient norm's one-number all-reduce is left out.
    """
    width = element_bytes(precision, "fsdp")
    units = {name: _padded_numel(shapes, world) for name, shapes in fsdp_units(cfg).items()}
    gathers = sum(n * (1 if name == "root" else 2) for name, n in units.items()) * accum
    return {
        "all-gather": ring_sent("all-gather", gathers * width["all-gather"], world),
        "reduce-scatter": ring_sent("reduce-scatter", sum(units.values()) * width["reduce-scatter"], world),
    }
