"""The static terms of a step: weights, gradients and optimizer state, a fixed number of bytes per parameter.

Per process when it is split: ZeRO-1 divides the optimizer state over the processes (whole parameters at a
time), FSDP also the weights and the gradients (row slices of every parameter).
"""

from __future__ import annotations

from minigpt.model import ModelConfig, count_params
from minigpt.parallel import check_shard_mode
from minigpt.precision import normalize_precision, static_bytes_per_param


def static_table() -> list[dict]:
    """Bytes per parameter with AdamW, by training regime (from precision.BYTES_PER_PARAM).

    The last row is the "12 + 2 = 14" framing some courses use for mixed precision: fp32 master weights
    (4) + Adam moments (8) = 12, plus a bf16 compute copy (2) = 14. It forgets the gradients: +4 in
    fp32 (18, our bf16-pure + master row) or +2 in bf16 (16).
    """
    regimes = [
        ("fp32", "fp32", False, "fp32 weights, grads and moments"),
        ("bf16", "bf16", False, "autocast: fp32 weights; bf16 copies made per step (transient, not here)"),
        ("fp16", "fp16", False, "autocast + GradScaler: as bf16 (the scale is one number)"),
        ("bf16-pure", "bf16-pure", False, "everything bf16: small updates get lost"),
        ("bf16-pure + master", "bf16-pure", True, "bf16 weights + fp32 master copy, fp32 grads and moments"),
    ]
    rows = []
    for name, precision, master, note in regimes:
        b = static_bytes_per_param(precision, master_weights=master)
        rows.append({"regime": name, **b, "note": note})
    rows.append(
        {
            "regime": "'12 + 2 = 14' framing",
            "weights": 2,
            "master_weights": 4,
            "grads": 0,
            "optimizer": 8,
            "total": 14,
            "note": "forgets the gradients: +4 fp32 -> 18, or +2 bf16 -> 16",
        }
    )
    return rows


def matrix_params(cfg: ModelConfig) -> int:
    """Parameters of the weight matrices (all but the RMSNorm gains): what autocast casts to 16 bits."""
    return cfg.vocab_size * cfg.n_embd + cfg.n_layer * (4 * cfg.n_embd**2 + 3 * cfg.n_embd * cfg.mlp_hidden)


def static_bytes(cfg: ModelConfig, precision: str, master_weights: bool) -> tuple[int, int, int]:
    b, n = static_bytes_per_param(precision, master_weights), count_params(cfg)
    return n * (b["weights"] + b["master_weights"]), n * b["grads"], n * b["optimizer"]


# ----------------------------------------------------------------------------------------------------------
# Split over processes: ZeRO-1 and FSDP (minigpt.parallel)


def parameter_shapes(cfg: ModelConfig) -> list[tuple[int, ...]]:
    """The shape of every parameter, in the order GPT.parameters() yields them (the tied embedding once).

    Read it next to model.GPT: the embedding, then per block the attention norm's gain, qkv, proj, the MLP
    norm's gain, gate, up, down (nn.Linear weights are (out, in)), then the final norm's gain.
    """
    C, H = cfg.n_embd, cfg.mlp_hidden
    block = [(C,), (3 * C, C), (C, C), (C,), (H, C), (H, C), (C, H)]
    return [(cfg.vocab_size, C), *block * cfg.n_layer, (C,)]


def master_conversion_bytes(cfg: ModelConfig, grad_bytes: int = 2) -> int:
    """Most gradient bytes alive while MasterWeights.grads_to_master turns 16-bit gradients into fp32 ones.

    It goes parameter by parameter, in GPT.parameters()' order: while it makes parameter i's fp32 gradient,
    the 16-bit gradients from i on are still there, beside the fp32 ones made so far. The tied embedding
    comes first and is the largest, so on a small model this beats the fp32 gradients alone.
    """
    sizes = [_numel(s) for s in parameter_shapes(cfg)]
    total, converted, most = sum(sizes), 0, 0
    for n in sizes:
        most = max(most, 4 * (converted + n) + grad_bytes * (total - converted))
        converted += n
    return most


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def zero1_partition(cfg: ModelConfig, world: int) -> list[int]:
    """Parameters whose AdamW state each process keeps under ZeRO-1, as ZeroRedundancyOptimizer assigns them.

    It hands out whole parameters, group by group (train.make_optimizer's decayed matrices, then the gains),
    largest first, each to the process holding the fewest parameters so far. One parameter larger than
    total/N (the tiny preset's embedding) leaves the split uneven: that process keeps more than 1/N.
    """
    shapes = parameter_shapes(cfg)
    groups = [[s for s in shapes if len(s) >= 2], [s for s in shapes if len(s) < 2]]
    held = [0] * world
    for group in groups:
        for n in sorted((_numel(s) for s in group), reverse=True):  # sorted() is stable, like torch's
            held[held.index(min(held))] += n
    return held


def fsdp_shard_params(cfg: ModelConfig, world: int) -> list[int]:
    """Parameters each process holds under FSDP2: every parameter cut along dim 0 into N chunks of ceil(d0/N) rows.

    The last chunks are shorter (or empty) when N does not divide d0. This counts what each process's DTensor
    holds (`.to_local()`); FSDP2 pads every shard's storage to ceil(d0/N) rows, so what a process allocates
    is process 0's count, the largest.
    """
    held = [0] * world
    for shape in parameter_shapes(cfg):
        rows, row_numel = shape[0], _numel(shape[1:])
        chunk = -(-rows // world)  # ceil
        for r in range(world):
            held[r] += max(0, min(chunk, rows - r * chunk)) * row_numel
    return held


def sharded_state_bytes(
    model_cfg: ModelConfig,
    precision: str,
    shard: str,
    world: int,
    master_weights: bool = False,
    rank: int | None = None,
) -> dict[str, int]:
    """Bytes of weights, gradients and optimizer state one process holds, with `shard` over `world` processes.

    Chapter 7's formulas, parameter by parameter: none keeps everything on every process (16P in fp32);
    zero1 divides the optimizer state by N (zero1_partition: whole parameters, so only about 1/N);
    fsdp divides weights, gradients and optimizer state by N (fsdp_shard_params). `rank` None: the process
    that holds the most. The 4-byte step counters are left out, as in MemoryBreakdown.
    """
    check_shard_mode(shard)
    if world < 1:
        raise ValueError(f"the number of processes (--world) must be at least 1, got {world}")
    if rank is not None and not 0 <= rank < world:
        raise ValueError(f"rank must be between 0 and world - 1 = {world - 1}, got {rank}")
    b, total = static_bytes_per_param(normalize_precision(precision), master_weights), count_params(model_cfg)
    everything = [total] * world
    optimizer_params = zero1_partition(model_cfg, world) if shard in ("zero1", "fsdp") else everything
    other_params = fsdp_shard_params(model_cfg, world) if shard == "fsdp" else everything
    if shard == "fsdp":
        optimizer_params = other_params  # FSDP's AdamW steps each process's slices
    per_rank = [
        {
            "weights": other_params[r] * (b["weights"] + b["master_weights"]),
            "gradients": other_params[r] * b["grads"],
            "optimizer": optimizer_params[r] * b["optimizer"],
        }
        for r in range(world)
    ]
    if rank is None:
        return max(per_rank, key=lambda d: sum(d.values()))
    return per_rank[rank]
