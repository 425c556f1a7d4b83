"""Grades chapter 10: a LoRA layer's output, merging an adapter into its weight, and NF4 quantization.

Every answer is compared with an independent computation in float64 (the adapter's product written out
entry by entry from the formula, the nearest NF4 value found by sorting distances), not with the package's code.
"""

import pytest
import torch

from minigpt.quantize import NF4_CODE

CHAPTER = "ch10_finetuning"
HINTS = {  # the hints of solutions/ch10_finetuning.py, shown under a wrong answer
    "10.1": "y = x @ W.T, plus ((x @ A.T) * (alpha / r)) @ B.T with r = A.shape[0]",
    "10.2": "a new tensor W + (alpha / r) * (B @ A), r = A.shape[0]; do not add in place",
    "10.3": "blocks = weight.reshape(-1, block); scale = absmax; argmin |v/scale - NF4_CODE|",
    "10.4": "NF4_CODE[codes.long()], reshaped to (-1, block), times scales[:, None]",
}
# (batch, tokens, in, out, rank, alpha): a square layer, a wide one (q, k, v fused) and rank 1 with alpha = rank.
SHAPES = [(2, 5, 16, 16, 4, 8.0), (3, 4, 24, 72, 8, 16.0), (1, 7, 12, 20, 1, 1.0)]


def _layer(batch, tokens, d_in, d_out, rank, seed, zero_b=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, tokens, d_in, generator=g)
    w = torch.randn(d_out, d_in, generator=g) / d_in**0.5
    a = torch.randn(rank, d_in, generator=g) / d_in**0.5
    b = torch.zeros(d_out, rank) if zero_b else torch.randn(d_out, rank, generator=g)
    return x, w, a, b


def _reference(x, w, a, b, alpha):
    """The formula in float64, the adapter's matrix written out as a sum of r outer products."""
    x, w, a, b = (t.double() for t in (x, w, a, b))
    delta = sum(torch.outer(b[:, k], a[k]) for k in range(a.shape[0]))  # B @ A, one rank at a time
    return x @ (w + alpha / a.shape[0] * delta).T


def _merge_in_worker(answers, w, a, b, alpha):
    """In the worker: merge_lora's result, and whether it changed the weight it was given."""
    before = w.clone()
    merged = answers.merge_lora(w, a, b, alpha)
    return {"merged": merged, "weight_changed": not torch.equal(w, before), "same_object": merged is w}


@pytest.mark.exercise("10.1", points=2)
def test_lora_forward_matches_the_formula(answers):
    for i, (batch, tokens, d_in, d_out, rank, alpha) in enumerate(SHAPES):
        x, w, a, b = _layer(batch, tokens, d_in, d_out, rank, seed=i)
        y = answers.lora_forward(x, w, a, b, alpha)
        want = _reference(x, w, a, b, alpha)
        assert isinstance(y, torch.Tensor) and y.shape == want.shape, (
            f"in {d_in}, out {d_out}: the output should be {tuple(want.shape)}, got "
            f"{tuple(y.shape) if isinstance(y, torch.Tensor) else y!r}"
        )
        # fp32 against the float64 formula: sums of at most 24 products of values near 1 agree to 1e-4.
        error = (y.double() - want).abs().max().item()
        scale_hint = ""
        base = x.double() @ w.double().T
        for wrong, name in ((alpha, "alpha (not alpha / r)"), (1.0, "1 (no alpha / r)"), (alpha * rank, "alpha * r")):
            guess = base + wrong * (x.double() @ a.double().T) @ b.double().T
            if (y.double() - guess).abs().max().item() < 1e-4 and wrong != alpha / rank:
                scale_hint = f" - the adapter looks scaled by {name}; LoRA scales it by alpha / r"
        assert error < 1e-4, (
            f"in {d_in}, out {d_out}, rank {rank}, alpha {alpha:g}: the output differs from "
            f"x @ W.T + (alpha / r) * (x @ A.T) @ B.T by up to {error:.2e}{scale_hint}"
        )


@pytest.mark.exercise("10.1", points=1)
def test_lora_forward_with_zero_b_is_the_base_layer(answers):
    for i, (batch, tokens, d_in, d_out, rank, alpha) in enumerate(SHAPES):
        x, w, a, b = _layer(batch, tokens, d_in, d_out, rank, seed=10 + i, zero_b=True)
        y = answers.lora_forward(x, w, a, b, alpha)
        want = x @ w.T
        # B = 0 adds exact zeros: the same matmul x @ W.T, so equal to fp32 rounding of that one product.
        assert torch.allclose(y, want, atol=1e-6, rtol=0), (
            f"in {d_in}, out {d_out}: with B all zeros the layer must be the frozen one, x @ W.T (max "
            f"difference {(y - want).abs().max().item():.2e}): at step 0 the adapted model IS the base model"
        )


@pytest.mark.exercise("10.2", points=2)
def test_merged_weight_computes_the_adapted_layer(answers):
    for i, (batch, tokens, d_in, d_out, rank, alpha) in enumerate(SHAPES):
        x, w, a, b = _layer(batch, tokens, d_in, d_out, rank, seed=20 + i)
        want = _reference(x, w, a, b, alpha)  # before the call: an in-place merge must not move the reference
        seen = answers.run(_merge_in_worker, w.clone(), a, b, alpha)
        merged = seen["merged"]
        assert isinstance(merged, torch.Tensor) and merged.shape == w.shape, (
            f"the merged weight should be ({d_out}, {d_in}) like W, got "
            f"{tuple(merged.shape) if isinstance(merged, torch.Tensor) else merged!r}"
        )
        error = (x.double() @ merged.double().T - want).abs().max().item()
        assert error < 1e-4, (
            f"in {d_in}, out {d_out}, rank {rank}, alpha {alpha:g}: x @ merged.T differs from the adapted layer "
            f"by up to {error:.2e}: merged should be W + (alpha / r) * B @ A"
        )
        assert not seen["weight_changed"] and not seen["same_object"], (
            "merge_lora changed the weight it was given (an in-place add): return a new tensor, the frozen "
            "base is shared by every adapter trained on it"
        )


def _nearest_nf4(weight, block):
    """Independent NF4: each block's absmax, and each value's nearest code by sorting |v / scale - code|."""
    blocks = weight.double().reshape(-1, block)
    scales = blocks.abs().max(dim=1).values
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    normed = (blocks / scales[:, None]).flatten().tolist()
    code = NF4_CODE.double().tolist()
    idx = [sorted(range(16), key=lambda k, v=v: abs(v - code[k]))[0] for v in normed]
    return torch.tensor(idx).reshape(weight.shape), scales


def _weights():
    g = torch.Generator().manual_seed(7)
    normal = torch.randn(8, 64, generator=g) * 0.02  # a trained weight's scale
    heavy = torch.randn(6, 32, generator=g) ** 3  # heavy tails: one large value per block sets the scale
    zeros = torch.randn(4, 16, generator=g)
    zeros[1] = 0.0  # an all-zero block (block 16 = one row)
    return [(normal, 64), (normal, 32), (heavy, 32), (zeros, 16)]


@pytest.mark.exercise("10.3", points=2)
def test_nf4_quantize_picks_the_nearest_code_per_block(answers):
    for weight, block in _weights():
        codes, scales = answers.nf4_quantize(weight, block)
        want_codes, want_scales = _nearest_nf4(weight, block)
        where = f"a {tuple(weight.shape)} weight in blocks of {block}"
        assert isinstance(scales, torch.Tensor) and scales.numel() == weight.numel() // block, (
            f"{where}: one scale per block, {weight.numel() // block} of them; got "
            f"{scales.numel() if isinstance(scales, torch.Tensor) else scales!r}"
        )
        assert torch.allclose(scales.double().flatten(), want_scales, rtol=1e-6, atol=0), (
            f"{where}: the scales should be each block's largest |value| (1 for an all-zero block); "
            f"got {scales.flatten()[:4].tolist()}..., expected {want_scales[:4].tolist()}..."
            + (" - blocks run along the rows (row-major), not down the columns" if block < weight.shape[1] else "")
        )
        assert isinstance(codes, torch.Tensor) and codes.shape == weight.shape, (
            f"{where}: one code per value, shaped like the weight {tuple(weight.shape)}; got "
            f"{tuple(codes.shape) if isinstance(codes, torch.Tensor) else codes!r}"
        )
        assert codes.dtype == torch.uint8, f"{where}: codes are indices 0..15 stored as uint8, got {codes.dtype}"
        wrong = (codes.long() != want_codes).sum().item()
        assert wrong == 0, (
            f"{where}: {wrong} of {weight.numel()} codes are not the index of the NF4 value nearest to "
            f"value / block absmax (e.g. value {weight.flatten()[(codes.long() != want_codes).flatten()][0]:.4g}: "
            f"got {codes.flatten()[(codes.long() != want_codes).flatten()][0]}, expected "
            f"{want_codes.flatten()[(codes.long() != want_codes).flatten()][0]})"
        )


@pytest.mark.exercise("10.4", points=2)
def test_nf4_dequantize_round_trip(answers):
    code = NF4_CODE.double()
    half_gap = (code[1:] - code[:-1]).max().item() / 2
    for weight, block in _weights():
        codes, scales = _nearest_nf4(weight, block)
        values = answers.nf4_dequantize(codes.to(torch.uint8), scales.float(), block)
        want = (code[codes].reshape(-1, block) * scales[:, None]).reshape(weight.shape)
        where = f"a {tuple(weight.shape)} weight in blocks of {block}"
        assert isinstance(values, torch.Tensor) and values.shape == weight.shape, (
            f"{where}: the result has the codes' shape {tuple(weight.shape)}; got "
            f"{tuple(values.shape) if isinstance(values, torch.Tensor) else values!r}"
        )
        error = (values.double() - want).abs().max().item()
        assert error <= 1e-6 * want.abs().max().item() + 1e-12, (
            f"{where}: values differ from NF4_CODE[code] x the block's scale by up to {error:.2e}"
            + (" - each value takes its own block's scale" if values.shape == weight.shape else "")
        )
        bound = (half_gap * scales.repeat_interleave(block).reshape(weight.shape)).double()
        assert ((values.double() - weight.double()).abs() <= bound + 1e-7).all(), (
            f"{where}: the round trip is off by more than half the widest NF4 gap times the block's scale"
        )
