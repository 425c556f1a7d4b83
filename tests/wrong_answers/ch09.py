"""Wrong answers to chapter 9's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 9.1 quantize_blockwise, dequantize_blockwise
    "9.1: a last partial block takes the previous block's scale": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        """
        def quantize_blockwise(x, block, power=1):
            if block < 1 or power < 1:
                raise ValueError("block and power must be at least 1")
            flat = x.detach().reshape(-1).float()
            n = flat.numel()
            whole = max(1, n // block)  # the tail joins the last whole block's scale
            scales = torch.stack([flat[i * block : (i + 1) * block].abs().max() for i in range(whole)])
            per_value = scales.repeat_interleave(block)
            per_value = torch.cat([per_value, per_value[-1:].expand(max(0, n - per_value.numel()))])[:n]
            ratio = flat.abs() / per_value.clamp_min(torch.finfo(torch.float32).tiny)
            codes = torch.round(127 * ratio ** (1 / power)) * flat.sign()
            return codes.to(torch.int8), scales
        """,
    ),
    "9.1: an all-zero block gets scale 1": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        (
            "    scales = blocks.abs().amax(dim=1)\n",
            "    scales = blocks.abs().amax(dim=1)\n    scales[scales == 0] = 1\n",
        ),
    ),
    "9.1: the scale clamped at 1e-12 (a block of tiny values all codes 0)": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        ("scales.clamp_min(torch.finfo(torch.float32).tiny)", "scales.clamp_min(1e-12)"),
    ),
    "9.1: halves rounded up, not to even (floor(v + 0.5))": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        (
            "codes = torch.round(127 * ratio ** (1 / power)) * blocks.sign()",
            "codes = torch.floor(127 * ratio ** (1 / power) * blocks.sign() + 0.5)",
        ),
    ),
    "9.1: the power applied, not its root": Mistake(
        "9.1", "quantize_blockwise", "", ("round(127 * ratio ** (1 / power))", "round(127 * ratio**power)")
    ),
    "9.1: codes kept as floats": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        ("return codes.reshape(-1)[:n].to(torch.int8), scales", "return codes.reshape(-1)[:n], scales"),
    ),
    "9.1: the scale is the largest value, not the largest |value|": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        ("    scales = blocks.abs().amax(dim=1)\n", "    scales = blocks.amax(dim=1).abs()\n"),
    ),
    "9.1: x divided by its scales in place": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        """
        def quantize_blockwise(x, block, power=1):
            if block < 1 or power < 1:
                raise ValueError("block and power must be at least 1")
            n = x.numel()
            n_blocks = -(-n // block)
            flat = x.detach().view(-1)
            scales = torch.stack([flat[i * block : (i + 1) * block].abs().max() for i in range(n_blocks)])
            for i in range(n_blocks):  # normalize each block where it is
                if scales[i] > 0:
                    flat[i * block : (i + 1) * block] /= scales[i]
            codes = torch.round(127 * flat.abs() ** (1 / power)) * flat.sign()
            return codes.to(torch.int8), scales
        """,
    ),
    "9.1: power 0 not refused (a ZeroDivisionError)": Mistake(
        "9.1",
        "quantize_blockwise",
        "",
        """
        def quantize_blockwise(x, block, power=1):
            if block < 1:
                raise ValueError(f"block must be at least 1, got {block}")
            flat = x.detach().reshape(-1).float()
            n = flat.numel()
            n_blocks = -(-n // block)
            padded = torch.zeros(n_blocks * block, dtype=torch.float32)
            padded[:n] = flat
            blocks = padded.view(n_blocks, block)
            scales = blocks.abs().amax(dim=1)
            ratio = blocks.abs() / scales.clamp_min(torch.finfo(torch.float32).tiny)[:, None]
            codes = torch.round(127 * ratio ** (1 / power)) * blocks.sign()
            return codes.reshape(-1)[:n].to(torch.int8), scales
        """,
    ),
    "9.1: dequantize ignores the shape": Mistake(
        "9.1",
        "dequantize_blockwise",
        "",
        ("    return x.reshape(shape) if shape is not None else x\n", "    return x\n"),
    ),
    "9.1: dequantize gives the codes' shape by default": Mistake(
        "9.1",
        "dequantize_blockwise",
        "",
        (
            "    return x.reshape(shape) if shape is not None else x\n",
            "    return x.reshape(shape if shape is not None else codes.shape)\n",
        ),
    ),
    "9.1: dequantize divides by 128": Mistake(
        "9.1", "dequantize_blockwise", "", ("(q.abs() / 127) ** power", "(q.abs() / 128) ** power")
    ),
    "9.1: dequantize uses the scales without checking their count": Mistake(
        "9.1",
        "dequantize_blockwise",
        "",
        """
        def dequantize_blockwise(codes, scales, block, power=1, shape=None):
            if block < 1 or power < 1:
                raise ValueError("block and power must be at least 1")
            q = codes.reshape(-1).float()
            per_value = scales.float().repeat_interleave(block)[: q.numel()]
            per_value = torch.cat([per_value, per_value.new_zeros(q.numel() - per_value.numel())])
            x = q.sign() * (q.abs() / 127) ** power * per_value
            return x.reshape(shape) if shape is not None else x
        """,
    ),
    "9.1: dequantize unsqueezes the caller's scales in place": Mistake(
        "9.1",
        "dequantize_blockwise",
        "",
        (
            "    per_value = scales.float().repeat_interleave(block)[: q.numel()]\n",
            "    per_value = scales.unsqueeze_(1).expand(-1, block).reshape(-1)[: q.numel()]\n",
        ),
    ),
    # --- 9.2 chunked_cross_entropy
    "9.2: the chunks argument ignored (4 chunks)": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "zip(hidden.tensor_split(chunks), targets.tensor_split(chunks))",
            "zip(hidden.tensor_split(4), targets.tensor_split(4))",
        ),
    ),
    "9.2: pieces of `chunks` tokens, not `chunks` pieces": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "zip(hidden.tensor_split(chunks), targets.tensor_split(chunks))",
            "zip(hidden.split(chunks), targets.split(chunks))",
        ),
    ),
    "9.2: pieces of N // chunks tokens (one more piece)": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "zip(hidden.tensor_split(chunks), targets.tensor_split(chunks))",
            "zip(hidden.split(max(1, len(targets) // chunks)), targets.split(max(1, len(targets) // chunks)))",
        ),
    ),
    "9.2: the weight's gradient lost (detached)": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "checkpoint(piece_loss, h, weight, t, use_reentrant=False)",
            "checkpoint(piece_loss, h, weight.detach(), t, use_reentrant=False)",
        ),
    ),
    "9.2: the loss summed as a Python number": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "total = total + checkpoint(piece_loss, h, weight, t, use_reentrant=False)",
            "total = total + checkpoint(piece_loss, h, weight, t, use_reentrant=False).item()",
        ),
    ),
    "9.2: chunks 0 not refused": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        ('    if chunks < 1:\n        raise ValueError(f"chunks must be at least 1, got {chunks}")\n', ""),
    ),
    "9.2: divided by the whole chunks' tokens (the remainder left out)": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        ("    return total / targets.numel()\n", "    return total / (targets.numel() // chunks * chunks)\n"),
    ),
    "9.2: half the chunks asked, per-chunk work the same": Mistake(
        "9.2",
        "chunked_cross_entropy",
        "",
        (
            "zip(hidden.tensor_split(chunks), targets.tensor_split(chunks))",
            "zip(hidden.tensor_split(max(1, chunks // 2)), targets.tensor_split(max(1, chunks // 2)))",
        ),
    ),
    # --- 9.3 state_bytes
    "9.3: the first parameter taken as the largest": Mistake(
        "9.3", "state_bytes", "", ("4 * (max(sizes) if in_backward", "4 * (sizes[0] if in_backward")
    ),
    "9.3: the last parameter taken as the largest": Mistake(
        "9.3", "state_bytes", "", ("4 * (max(sizes) if in_backward", "4 * (sizes[-1] if in_backward")
    ),
    "9.3: an unknown optimizer counted as AdamW": Mistake(
        "9.3",
        "state_bytes",
        "",
        (
            '    if optimizer == "adamw":\n        moments = 8 * sum(sizes)\n',
            '    if optimizer not in ("adamw8bit",):\n        moments = 8 * sum(sizes)\n',
        ),
    ),
    "9.3: the optimizer's name matched in any case": Mistake(
        "9.3",
        "state_bytes",
        "",
        (
            "    sizes = [p.numel() for p in model.parameters()]\n",
            "    sizes = [p.numel() for p in model.parameters()]\n    optimizer = optimizer.lower()\n",
        ),
    ),
    "9.3: 4096 values still kept in fp32 (<= for <)": Mistake(
        "9.3", "state_bytes", "", ("8 * n if n < 4096 else", "8 * n if n <= 4096 else")
    ),
    "9.3: the 8-bit blocks counted rounding down": Mistake(
        "9.3", "state_bytes", "", ("2 * (n + 4 * -(-n // 256))", "2 * (n + 4 * (n // 256))")
    ),
    "9.3: buffers counted as parameters": Mistake(
        "9.3",
        "state_bytes",
        "",
        (
            "    sizes = [p.numel() for p in model.parameters()]\n",
            "    sizes = [p.numel() for p in [*model.parameters(), *model.buffers()]]\n",
        ),
    ),
    "9.3: the weights as a float": Mistake(
        "9.3", "state_bytes", "", ('"weights": 4 * sum(sizes)', '"weights": 4.0 * sum(sizes)')
    ),
    "9.3: in_backward also drops the optimizer state of all but the largest": Mistake(
        "9.3",
        "state_bytes",
        "",
        (
            "    gradients = 4 * (max(sizes) if in_backward else sum(sizes))\n",
            "    gradients = 4 * (max(sizes) if in_backward else sum(sizes))\n"
            "    moments = moments * max(sizes) // sum(sizes) if in_backward else moments\n",
        ),
    ),
}
