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
    # and a bf16 weight, as QLoRA's frozen base usually arrives: its scales are fp32 all the same
    for weight, block in [*_weights(), (_weights()[0][0].bfloat16(), 64)]:
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
        assert scales.dtype == torch.float32, f"{where}: scales are fp32, got {scales.dtype}"
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


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract)

from minigpt.grading.contract import Case  # noqa: E402

SHAPE_MISMATCH = (
    "Raises: ValueError if lora_A is not (r, in) with r at least 1, or lora_B is not (out, r), for the (out, in) "
    "weight."
)
# fp32 matmuls of at most 512 products against the reference's, in another order or through another kernel
# (F.linear, addmm, einsum, another CPU's blocking): ~1e-6 apart on outputs of size ~1..5. rtol and atol 1e-5
# keep 10x of room; alpha // r, a missing or doubled scale, or a transposed factor are off by 10% and more.
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def _adapter(shape_x, d_out, rank, seed, zero_b=False, grad=False):
    """x of shape_x (..., in), a frozen (out, in) weight, A (r, in) and B (out, r); with grad, x, A and B
    require grad (the adapter is what trains)."""
    g = torch.Generator().manual_seed(seed)
    d_in = shape_x[-1]
    x = torch.randn(*shape_x, generator=g)
    w = torch.randn(d_out, d_in, generator=g) / d_in**0.5
    a = torch.randn(rank, d_in, generator=g) / d_in**0.5
    b = torch.zeros(d_out, rank) if zero_b else torch.randn(d_out, rank, generator=g)
    if grad:
        x, a, b = x.requires_grad_(), a.requires_grad_(), b.requires_grad_()
    return x, w, a, b


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _backward_through(function, x, weight, lora_A, lora_B, alpha):
    """y, and backward from a fixed upstream gradient: x.grad, lora_A.grad and lora_B.grad are compared as the
    arguments after the call."""
    y = function(x, weight, lora_A, lora_B, alpha)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(0)))
    return y.detach()


def _cases_10_1() -> list[Case]:
    f = "lora_forward"
    cases = [
        Case(
            f,
            (*_adapter((2, 5, 16), 16, 4, seed=1), 6.0),  # alpha / r = 1.5, alpha // r = 1
            promise=(
                "Returns: a new fp32 tensor y of shape (..., out), through which backward reaches x, lora_A and "
                "lora_B.",
                "In place: nothing; x, weight, lora_A and lora_B are left as they were.",
            ),
            **CLOSE,
        ),
        Case(f, (*_adapter((3, 4, 24), 72, 8, seed=2), 20.0), **CLOSE),  # a wide layer (q, k, v fused): 2.5
        Case(f, (*_adapter((7, 12), 20, 1, seed=3), 0.5), **CLOSE),  # 2-D x, rank 1: 0.5 (// gives 0)
        Case(f, (*_adapter((2, 3, 10), 6, 3, seed=4), 16.0), **CLOSE),  # a narrowing layer: 16 / 3
        Case(f, (*_adapter((4, 8), 8, 4, seed=5), 6), **CLOSE),  # an int alpha: 6 / 4 = 1.5 all the same
        Case(f, (*_adapter((2, 6, 12), 18, 2, seed=6, zero_b=True), 32.0), **CLOSE),  # B = 0: the frozen layer
        Case(f, (*_adapter((3, 5, 16), 24, 4, seed=7, grad=True), 12.0), drive=_backward_through, **CLOSE),
        Case(f, (*_adapter((6, 10), 10, 2, seed=8, grad=True), 3), drive=_backward_through, **CLOSE),
    ]
    x, w, a, b = _adapter((2, 3, 12), 20, 4, seed=9)
    cases += [
        Case(f, (x, w, _randn(4, 13), b, 8.0), promise=SHAPE_MISMATCH),  # A's in is not W's
        Case(f, (x, w, a, _randn(20, 5), 8.0), promise=SHAPE_MISMATCH),  # B's r is not A's
        Case(f, (x, w, a, _randn(21, 4), 8.0), promise=SHAPE_MISMATCH),  # B's out is not W's
        Case(f, (x, w, torch.zeros(0, 12), torch.zeros(20, 0), 8.0), promise=SHAPE_MISMATCH),  # rank 0
    ]
    # Memory: 4 tokens through a (1024, 512) layer with a rank-8 adapter. The reference keeps about three
    # (4, 1024) outputs alive at once (x @ W.T, the adapter's, their sum: ~48 KiB); addmm or an in-place add
    # need 0.7x of that, F.linear or einsum the same. Forming B @ A, even once, makes a 2 MiB (1024, 512)
    # tensor: 40x. 0.3x..3x passes every honest order and fails any merged weight.
    cases.append(Case(f, (*_adapter((1, 4, 512), 1024, 8, seed=10), 16.0), peak=(0.3, 3.0), **CLOSE))
    return cases


def _cases_10_2() -> list[Case]:
    f = "merge_lora"
    # W + (alpha / r) * B @ A: one matmul of at most 8 products and an add, ~1e-7 apart in any order.
    close = {"rtol": 1e-5, "atol": 1e-6}
    cases = [
        Case(
            f,
            _adapter((1, 16), 16, 4, seed=11)[1:] + (6.0,),  # alpha / r = 1.5, alpha // r = 1
            promise=(
                "Returns: a new fp32 (out, in) tensor, sharing no memory with weight, even when B is all zeros.",
                "In place: nothing; weight, lora_A and lora_B are left as they were.",
            ),
            **close,
        ),
        Case(f, _adapter((1, 24), 72, 8, seed=12)[1:] + (20.0,), **close),
        Case(f, _adapter((1, 12), 20, 1, seed=13)[1:] + (0.5,), **close),
        Case(f, _adapter((1, 10), 6, 3, seed=14)[1:] + (16.0,), **close),
        Case(f, _adapter((1, 8), 8, 4, seed=15)[1:] + (6,), **close),  # an int alpha
        Case(f, _adapter((1, 12), 18, 2, seed=16, zero_b=True)[1:] + (32.0,), **close),  # B = 0: still a new tensor
    ]
    _, w, a, b = _adapter((1, 12), 20, 4, seed=17)
    cases += [
        Case(f, (w, _randn(4, 13), b, 8.0), promise=SHAPE_MISMATCH),
        Case(f, (w, a, _randn(20, 5), 8.0), promise=SHAPE_MISMATCH),
        Case(f, (w, a, _randn(21, 4), 8.0), promise=SHAPE_MISMATCH),
        Case(f, (w, torch.zeros(0, 12), torch.zeros(20, 0), 8.0), promise=SHAPE_MISMATCH),
    ]
    return cases


_MIDPOINTS = ((NF4_CODE.double()[1:] + NF4_CODE.double()[:-1]) / 2).tolist()


def _clear_of_midpoints(weight: torch.Tensor, block: int, margin: float = 1e-5) -> torch.Tensor:
    """weight with each value within `margin` (of its block's absmax) of a point halfway between two NF4 values
    moved onto the nearer NF4 value: fp32 division in any order then finds the same nearest code."""
    blocks = weight.double().reshape(-1, block).clone()
    scales = blocks.abs().amax(dim=1, keepdim=True)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    normed = blocks / scales
    for m in _MIDPOINTS:
        near = (normed - m).abs() < margin
        nearest = NF4_CODE.double()[(normed[near][:, None] - NF4_CODE.double()).abs().argmin(dim=1)]
        blocks[near] = nearest * scales.expand_as(blocks)[near]
    return blocks.float().reshape(weight.shape)


def _nf4_weight(shape, block, seed, kind="normal"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(*shape, generator=g)
    w = w * 0.02 if kind == "normal" else w**3  # a trained weight's scale; heavy tails
    return _clear_of_midpoints(w, block)


def _nf4_ties() -> torch.Tensor:
    """Four blocks of 16 whose absmax is a power of two (1, 2, 0.5, and -1 as the largest |value|) holding values
    exactly halfway between two NF4 values (exact in fp32 for these four pairs): they take the lower index."""
    code = NF4_CODE.tolist()
    halves = [(code[k] + code[k + 1]) / 2 for k in (2, 6, 7, 14)]
    rows = []
    for top, sign in ((1.0, 1), (2.0, 1), (0.5, 1), (1.0, -1)):
        row = [sign * top] + [h * top for h in halves] + [-h * top for h in halves]
        row += [c * top for c in code[3:10]]  # exact NF4 values as well
        rows.append(row[:16])
    return torch.tensor(rows, dtype=torch.float32)


def _cases_10_3() -> list[Case]:
    f = "nf4_quantize"
    zero_block = _nf4_weight((96,), 48, seed=5)
    zero_block[48:] = 0.0  # the second block all zeros: scale 1, every code the index of 0.0
    not_whole = "Raises: ValueError if block is less than 1 or does not divide weight.numel() into whole blocks."
    cases = [
        Case(
            f,
            (_nf4_weight((8, 64), 64, seed=1),),  # the default block of 64: one block a row
            promise=(
                "Returns: a tuple (codes, scales): codes a uint8 tensor of the weight's shape, scales an fp32 "
                "tensor of weight.numel() / block values.",
                "In place: nothing; weight is left as it was.",
            ),
        ),
        Case(f, (_nf4_weight((8, 64), 32, seed=1), 32)),  # two blocks a row
        Case(f, (_nf4_weight((6, 32), 16, seed=2, kind="heavy"),), {"block": 16}),  # one large value per block
        Case(f, (_nf4_weight((2, 4, 24), 32, seed=3), 32)),  # blocks run across rows (and across the first dim)
        Case(f, (_nf4_weight((5, 12), 20, seed=4), 20)),  # 3 blocks, each across two rows
        Case(f, (zero_block, 48)),
        Case(f, (_nf4_ties(), 16)),
        Case(f, (_nf4_ties().reshape(2, 32), 32)),  # two tie blocks in one: the larger absmax scales both
        Case(f, (_nf4_weight((8, 64), 64, seed=6), 48), promise=not_whole),  # 512 is not a multiple of 48
        Case(f, (_nf4_weight((4, 16), 16, seed=7), 7), promise=not_whole),
        Case(f, (_nf4_weight((4, 16), 16, seed=7), 0), promise=not_whole),
        Case(f, (_nf4_weight((4, 16), 16, seed=7), -16), promise=not_whole),
    ]
    return cases


def _nf4_codes(shape, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 16, shape, generator=g).to(torch.uint8)


def _nf4_scales(n, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scales = torch.rand(n, generator=g) * 0.1 + 0.001
    scales[n // 2] = 1.0  # an all-zero block's scale
    return scales


def _cases_10_4() -> list[Case]:
    f = "nf4_dequantize"
    # One fp32 product per value (an NF4 value times a scale), correctly rounded whichever way it is computed
    # (even through float64 and back): rtol 1e-6 only allows for an answer that divides by 1 / scale.
    exact = {"rtol": 1e-6}
    wrong = (
        "Raises: ValueError if block is less than 1 or does not divide codes.numel(), or if scales does not hold "
        "codes.numel() / block values."
    )
    cases = [
        Case(
            f,
            (_nf4_codes((8, 64), 1), _nf4_scales(8, 1)),  # the default block of 64
            promise=(
                "Returns: an fp32 tensor of the codes' shape.",
                "In place: nothing; codes and scales are left as they were.",
            ),
            **exact,
        ),
        Case(f, (_nf4_codes((8, 64), 2), _nf4_scales(16, 2), 32), **exact),
        Case(f, (_nf4_codes((4, 24), 3), _nf4_scales(3, 3)), {"block": 32}, **exact),  # blocks across rows
        Case(f, (_nf4_codes((2, 3, 16), 4), _nf4_scales(12, 4), 8), **exact),
        Case(f, (_nf4_codes((96,), 5), _nf4_scales(2, 5), 48), **exact),
        Case(f, (_nf4_codes((8, 64), 6), _nf4_scales(8, 6), 48), promise=wrong),  # 512 not a multiple of 48
        Case(f, (_nf4_codes((4, 16), 7), _nf4_scales(4, 7), 0), promise=wrong),
        Case(f, (_nf4_codes((4, 16), 7), _nf4_scales(3, 7), 16), promise=wrong),  # one scale short
        Case(f, (_nf4_codes((4, 16), 7), _nf4_scales(5, 7), 16), promise=wrong),  # one scale too many
    ]
    return cases


CONTRACTS = {"10.1": _cases_10_1, "10.2": _cases_10_2, "10.3": _cases_10_3, "10.4": _cases_10_4}


@pytest.mark.exercise("10.1", points=1)
def test_10_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["10.1"]())


@pytest.mark.exercise("10.2", points=1)
def test_10_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["10.2"]())


@pytest.mark.exercise("10.3", points=1)
def test_10_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["10.3"]())


@pytest.mark.exercise("10.4", points=1)
def test_10_4_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["10.4"]())
