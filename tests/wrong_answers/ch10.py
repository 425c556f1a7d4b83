"""Wrong answers to chapter 10's exercises, written against their whole contracts (any test of the exercise may
catch one)."""

from grading_runs import Mistake

MISTAKES = {
    # --- 10.1 lora_forward
    "10.1: the scale computed as alpha // r": Mistake(
        "10.1", "lora_forward", "", ("((x @ lora_A.T) * (alpha / rank))", "((x @ lora_A.T) * (alpha // rank))")
    ),
    "10.1: the scale truncated to an int": Mistake(
        "10.1", "lora_forward", "", ("((x @ lora_A.T) * (alpha / rank))", "((x @ lora_A.T) * int(alpha / rank))")
    ),
    "10.1: the merged weight formed on every call": Mistake(
        "10.1",
        "lora_forward",
        "",
        (
            "    return x @ weight.T + ((x @ lora_A.T) * (alpha / rank)) @ lora_B.T\n",
            "    return x @ (weight + (alpha / rank) * (lora_B @ lora_A)).T\n",
        ),
    ),
    "10.1: the rank read from A's second dimension": Mistake(
        "10.1",
        "lora_forward",
        "",
        ("    rank = lora_A.shape[0]\n    return x @ weight.T", "    rank = lora_A.shape[1]\n    return x @ weight.T"),
    ),
    "10.1: A scaled in place": Mistake(
        "10.1",
        "lora_forward",
        "",
        (
            "    return x @ weight.T + ((x @ lora_A.T) * (alpha / rank)) @ lora_B.T\n",
            "    with torch.no_grad():\n        lora_A.mul_(alpha / rank)\n"
            "    return x @ weight.T + (x @ lora_A.T) @ lora_B.T\n",
        ),
    ),
    "10.1: the adapter cut off from backward": Mistake(
        "10.1",
        "lora_forward",
        "",
        (
            "    return x @ weight.T + ((x @ lora_A.T) * (alpha / rank)) @ lora_B.T\n",
            "    with torch.no_grad():\n        delta = ((x @ lora_A.T) * (alpha / rank)) @ lora_B.T\n"
            "    return x @ weight.T + delta\n",
        ),
    ),
    "10.1: rank 0 not refused (a ZeroDivisionError)": Mistake(
        "10.1",
        "lora_forward",
        "",
        """
        def lora_forward(x, weight, lora_A, lora_B, alpha):
            if lora_A.shape[1] != weight.shape[1] or lora_B.shape != (weight.shape[0], lora_A.shape[0]):
                raise ValueError("the adapter does not fit the weight")
            return x @ weight.T + ((x @ lora_A.T) * (alpha / lora_A.shape[0])) @ lora_B.T
        """,
    ),
    # --- 10.2 merge_lora
    "10.2: merged into a view of the weight": Mistake(
        "10.2",
        "merge_lora",
        "",
        (
            "    return weight + (alpha / rank) * (lora_B @ lora_A)\n",
            "    merged = weight.view_as(weight)\n"
            "    merged += (alpha / rank) * (lora_B @ lora_A)\n    return merged\n",
        ),
    ),
    "10.2: B all zeros returns the weight itself": Mistake(
        "10.2",
        "merge_lora",
        "",
        (
            "    return weight + (alpha / rank) * (lora_B @ lora_A)\n",
            "    if not lora_B.any():\n        return weight  # nothing to add\n"
            "    return weight + (alpha / rank) * (lora_B @ lora_A)\n",
        ),
    ),
    "10.2: the scale computed as alpha // r": Mistake(
        "10.2",
        "merge_lora",
        "",
        ("return weight + (alpha / rank) * (lora_B @ lora_A)", "return weight + (alpha // rank) * (lora_B @ lora_A)"),
    ),
    "10.2: merged in float64": Mistake(
        "10.2",
        "merge_lora",
        "",
        (
            "return weight + (alpha / rank) * (lora_B @ lora_A)",
            "return weight.double() + (alpha / rank) * (lora_B.double() @ lora_A.double())",
        ),
    ),
    "10.2: no check that the adapter fits": Mistake(
        "10.2",
        "merge_lora",
        "",
        """
        def merge_lora(weight, lora_A, lora_B, alpha):
            return weight + (alpha / max(1, lora_A.shape[0])) * (lora_B @ lora_A)
        """,
    ),
    # --- 10.3 nf4_quantize
    "10.3: a bf16 weight quantized in bf16 (its scales bf16)": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        ("blocks = weight.detach().float().reshape(-1, block)", "blocks = weight.detach().reshape(-1, block)"),
    ),
    "10.3: an all-zero block gets scale 0 (and NaN codes)": Mistake(
        "10.3", "nf4_quantize", "", ("    scales = torch.where(scales > 0, scales, torch.ones_like(scales))\n", "")
    ),
    "10.3: ties go to the upper index": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        (
            "codes = (normed[..., None] - NF4_CODE).abs().argmin(dim=-1).to(torch.uint8)",
            "codes = (15 - (normed[..., None] - NF4_CODE.flip(0)).abs().argmin(dim=-1)).to(torch.uint8)",
        ),
    ),
    "10.3: blocks required to fit within a row": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        (
            "    if block < 1 or weight.numel() % block:\n",
            "    if block < 1 or weight.shape[-1] % block:\n",
        ),
    ),
    "10.3: the block argument ignored (64)": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        ("blocks = weight.detach().float().reshape(-1, block)", "blocks = weight.detach().float().reshape(-1, 64)"),
    ),
    "10.3: codes left as int64": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        (
            "codes = (normed[..., None] - NF4_CODE).abs().argmin(dim=-1).to(torch.uint8)",
            "codes = (normed[..., None] - NF4_CODE).abs().argmin(dim=-1)",
        ),
    ),
    "10.3: a size that is not a multiple of the block not refused": Mistake(
        "10.3",
        "nf4_quantize",
        "",
        (
            "    if block < 1 or weight.numel() % block:\n",
            "    if block < 1:\n",
        ),
    ),
    "10.3: the scale is the largest value, not the largest |value|": Mistake(
        "10.3", "nf4_quantize", "", ("    scales = blocks.abs().amax(dim=1)\n", "    scales = blocks.amax(dim=1)\n")
    ),
    # --- 10.4 nf4_dequantize
    "10.4: the block argument ignored (64)": Mistake(
        "10.4",
        "nf4_dequantize",
        "",
        (
            "values = NF4_CODE[codes.long()].reshape(-1, block) * scales[:, None]",
            "values = NF4_CODE[codes.long()].reshape(-1, 64) * scales[:, None]",
        ),
    ),
    "10.4: the values returned flat": Mistake(
        "10.4", "nf4_dequantize", "", ("    return values.reshape(codes.shape)\n", "    return values.reshape(-1)\n")
    ),
    "10.4: the scales' count not checked": Mistake(
        "10.4",
        "nf4_dequantize",
        "",
        (
            "    if block < 1 or codes.numel() % block or scales.numel() != codes.numel() // block:\n",
            "    if block < 1 or codes.numel() % block:\n",
        ),
    ),
    "10.4: the codes read as signed, around 8": Mistake(
        "10.4",
        "nf4_dequantize",
        "",
        (
            "values = NF4_CODE[codes.long()].reshape(-1, block)",
            "values = NF4_CODE[(codes.long() - 8) % 16].reshape(-1, block)",
        ),
    ),
    "10.4: every value times the first scale of its row": Mistake(
        "10.4",
        "nf4_dequantize",
        "",
        """
        def nf4_dequantize(codes, scales, block=64):
            if block < 1 or codes.numel() % block or scales.numel() != codes.numel() // block:
                raise ValueError("blocks do not fit")
            rows = codes.reshape(-1, codes.shape[-1])
            per_row = scales.reshape(rows.shape[0], -1)[:, :1]  # the row's first block's scale for all of it
            return (NF4_CODE[rows.long()] * per_row).reshape(codes.shape)
        """,
    ),
}
