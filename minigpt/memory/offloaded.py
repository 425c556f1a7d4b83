"""Term: which saved tensors --offload-activations moves off the device, and what backward reads back.

minigpt.offload moves a saved tensor's storage when it is floating-point, at least OFFLOAD_MIN_BYTES, not a
parameter, and saved through the outer hooks (checkpointing saves its regions' inputs through them and keeps
the rest itself). activation_table marks each row with `offloaded`: the device keeps the other rows.
"""

from __future__ import annotations

from minigpt.offload import OFFLOAD_MIN_BYTES

# Rows made of several equal storages (the split needs each storage's size): row name prefix -> how many
_PIECES = {
    "q and k after RoPE": 2,
    "RoPE cos/sin cast to 16 bits": 4,
    "gate and up input: mlp_norm's output, cast twice": 2,
    "attention (math path): q, k, v as fp32 copies": 3,
    "attention (math path): q and k": 2,
}


def _pieces(name: str) -> int:
    return next((n for prefix, n in _PIECES.items() if name.startswith(prefix)), 1)


def _floating(name: str, device: str) -> bool:
    """Token ids, targets and CUDA's RNG seed are integers; CUDA's dropout masks are bools: those stay."""
    return not ("int64" in name or "RNG seed" in name or (device == "cuda" and "mask" in name))


def is_offloaded(name: str, per_token: int, fixed: int, tokens: int, mode: str, device: str) -> bool:
    """Whether minigpt.offload moves this activation_table row's tensors off the device."""
    if mode == "selective" and "kept by checkpoint" not in name and not name.startswith(_OUTSIDE):
        return False  # selective checkpointing's cache of matmul outputs: its own dict, no hook sees it
    storage = (per_token * tokens + fixed) // _pieces(name)
    return _floating(name, device) and storage >= OFFLOAD_MIN_BYTES


# The rows outside the blocks (activations._outside_rows and loss_head.loss_head_rows), saved outside any
# checkpointed region, so through the offloading hooks in every mode
_OUTSIDE = ("token ids", "embedding dropout", "final_norm", "lm_head input", "log-s", "targets", "loss normalizer")


def head_reloads(rows: list[dict]) -> int:
    """Offloaded bytes of the loss head that are on the device at its worst moments, forward and backward.

    Cross-entropy's log-softmax: made in the forward (it is written out and freed only after the loss), read
    back in the backward for the moment of its two (N, V) gradients. The chunked loss: its 16-bit hidden
    states and log-sum-exps, kept while its forward runs and read back at once for its backward.
    """
    chunked = any(r["tensor"].startswith("log-sum-exp") for r in rows)
    names = ("log-s", "lm_head input") if chunked else ("log-s",)
    return sum(r["bytes"] for r in rows if r["offloaded"] and r["tensor"].startswith(names))


def region_reload(rows: list[dict]) -> int:
    """Offloaded bytes backward reads back for one checkpointed region (or one block without checkpointing).

    "full" and "sqrt": the region's input, which lives while the region is recomputed and run backward: exact.
    "none" and "selective": the block's offloaded tensors, an upper bound (autograd reads them node by node,
    a few at once; the measured moment is lower by up to a block's activations).
    """
    return sum(r["bytes"] // r["count"] for r in rows if r["offloaded"] and r["part"] != "outside the blocks")


def lever_lines(plain, levers, loss_chunks: int, offload_activations: bool) -> list[str]:
    """`minigpt memory`'s lines for --loss-chunks and --offload-activations: each lever as the terms it changes.

    `plain` and `levers` are estimate()'s breakdowns without and with them (MemoryBreakdown, in bytes).
    """
    mib = lambda n: f"{n / 2**20:,.1f}"  # noqa: E731
    lines = []
    if loss_chunks > 1:
        lines.append(f"--loss-chunks {loss_chunks}: logits {mib(plain.logits)} -> {mib(levers.logits)} MiB predicted")
    if offload_activations:
        lines.append(
            f"--offload-activations: activations {mib(plain.activations)} -> {mib(levers.activations)} MiB on the "
            f"device, {mib(levers.offloaded)} MiB in host memory (CUDA) or temp files (CPU)"
        )
    if lines:
        lines.append(f"peak {mib(plain.peak)} -> {mib(levers.peak)} MiB predicted, against the step without them")
    return lines
