"""Wrong answers to chapter 8's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

_BYTES = "(per_shard if state in SHARDED_STATES[shard] else n_params) * bytes_per_param[state]"

MISTAKES = {
    # --- 8.1 per_rank_state_bytes
    "8.1: fractional bytes truncated": Mistake(
        "8.1", "per_rank_state_bytes", "", (f"round({_BYTES})", f"int({_BYTES})")
    ),
    "8.1: a half byte rounded up": Mistake(
        "8.1", "per_rank_state_bytes", "", (f"round({_BYTES})", f"math.floor({_BYTES} + 0.5)")
    ),
    "8.1: fractional bytes rounded up": Mistake(
        "8.1", "per_rank_state_bytes", "", (f"round({_BYTES})", f"math.ceil({_BYTES})")
    ),
    "8.1: bytes left as the product (a float for float bytes)": Mistake(
        "8.1", "per_rank_state_bytes", "", (f"round({_BYTES})", _BYTES)
    ),
    "8.1: every key of bytes_per_param returned": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "",
        (
            '        for state in ("weights", "gradients", "optimizer")\n    }',
            "        for state in bytes_per_param\n    }",
        ),
    ),
    "8.1: the shard's bytes rounded up instead of its parameters": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "",
        (
            f"state: round({_BYTES})",
            "state: math.ceil(n_params * bytes_per_param[state] / world)\n"
            "        if state in SHARDED_STATES[shard]\n"
            "        else round(n_params * bytes_per_param[state])",
        ),
    ),
    "8.1: no check of n_params": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "",
        ("    if n_params < 0:\n        raise ValueError(", "    if False:\n        raise ValueError("),
    ),
    "8.1: a missing state counted as 0 bytes": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "",
        [
            ("    if missing:\n        raise KeyError(", "    if False:\n        raise KeyError("),
            ("* bytes_per_param[state])", "* bytes_per_param.get(state, 0))"),
        ],
    ),
    "8.1: the caller's dict trimmed to the three states": Mistake(
        "8.1",
        "per_rank_state_bytes",
        "",
        (
            "    per_shard = math.ceil(n_params / world)",
            "    for key in [k for k in bytes_per_param if k not in SHARDED_STATES['fsdp']]:\n"
            "        del bytes_per_param[key]  # only the three states count\n"
            "    per_shard = math.ceil(n_params / world)",
        ),
    ),
    # --- 8.2 flat_shard_range
    "8.2: no check of the rank": Mistake(
        "8.2",
        "flat_shard_range",
        "",
        ("    if not 0 <= rank < world:\n        raise ValueError(", "    if False:\n        raise ValueError("),
    ),
    "8.2: a shard of at least one element": Mistake(
        "8.2",
        "flat_shard_range",
        "",
        (
            "    shard_size = math.ceil(numel / world)\n    start",
            "    shard_size = max(1, math.ceil(numel / world))\n    start",
        ),
    ),
    "8.2: no check of numel": Mistake(
        "8.2",
        "flat_shard_range",
        "",
        [
            (
                '    if numel < 0:\n        raise ValueError(f"numel must be 0',
                '    if False:\n        raise ValueError(f"numel must be 0',
            ),
        ],
    ),
    "8.2: padding only on the last rank": Mistake(
        "8.2",
        "flat_shard_range",
        "",
        (
            "    return start, end, shard_size - (end - start)",
            "    return start, end, shard_size - (end - start) if rank == world - 1 else 0",
        ),
    ),
    "8.2: the shard size as a true division": Mistake(
        "8.2",
        "flat_shard_range",
        "",
        (
            "    shard_size = math.ceil(numel / world)\n    start",
            "    shard_size = numel / world if numel % world == 0 else numel // world + 1\n    start",
        ),
    ),
    # --- 8.3 average_gradients
    "8.3: ReduceOp.AVG, which gloo lacks in older torch": Mistake(
        "8.3",
        "average_gradients",
        "",
        [
            ("dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)", "dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)"),
            ("            p.grad /= world\n", ""),
        ],
    ),
    "8.3: a zero gradient given to parameters without one": Mistake(
        "8.3",
        "average_gradients",
        "",
        """
        def average_gradients(model):
            world = dist.get_world_size()
            for p in model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)  # every rank then reduces the same list of tensors
                dist.all_reduce(p.grad)
                p.grad /= world
        """,
    ),
    "8.3: the weights averaged, not the gradients": Mistake(
        "8.3",
        "average_gradients",
        "",
        [
            ("dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)", "dist.all_reduce(p.data, op=dist.ReduceOp.SUM)"),
            ("            p.grad /= world\n", "            p.data /= world\n"),
        ],
    ),
    "8.3: reduced to rank 0 only": Mistake(
        "8.3",
        "average_gradients",
        "",
        ("dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)", "dist.reduce(p.grad, dst=0, op=dist.ReduceOp.SUM)"),
    ),
    "8.3: divided by the rank's number plus one": Mistake(
        "8.3",
        "average_gradients",
        "",
        ("    world = dist.get_world_size()\n", "    world = dist.get_rank() + 1\n"),
    ),
}
