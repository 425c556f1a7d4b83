"""Grades chapter 9: block-wise 8-bit quantization, a chunked cross-entropy, and the static bytes of a step
with the 8-bit optimizer and the step in backward.

Every answer is checked against an independent computation: the quantization against the formula written
out here, the loss against F.cross_entropy on the whole logits, the bytes against the real tensors of a model
and of torch's and the course's optimizers after a step.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from minigpt.model import GPT, ModelConfig
from minigpt.optim.adamw8bit import AdamW8bit

CHAPTER = "ch09_toolbox"
HINTS = {  # the hints of solutions/ch09_toolbox.py, shown under a wrong answer
    "9.1": "pad to whole blocks, scale = |x|.amax per block, round(127 * (|x|/scale)**(1/p)); "
    "value = sign(q) * (|q| / 127) ** power * scales[i // block], reshaped to shape",
    "9.2": "per chunk: checkpoint(a function of (h, w, t) -> summed F.cross_entropy); / N",
    "9.3": "model.parameters() yields a shared tensor once; sum per tensor, max for in_backward",
}


def _powers_of_two(n: int, low: int, high: int, g: torch.Generator) -> torch.Tensor:
    """n random powers of two 2**low .. 2**high, exact: made without exp or pow, whose last bit differs between CPUs
    (the stored outcomes are found by the inputs' bits, so an input must be the same on every machine)."""
    return torch.tensor([2.0**k for k in torch.randint(low, high + 1, (n,), generator=g).tolist()])


def _moment(n: int, seed: int = 0) -> torch.Tensor:
    """A moment-like tensor: values spread over several decades, a few outliers, some exact zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * _powers_of_two(n, -6, 6, g)
    x[::97] = 0.0
    return x


def _reference_codes(x: torch.Tensor, block: int, power: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The codes and scales written out value by value per block (no padding tricks)."""
    flat = x.reshape(-1).double()
    codes, scales = [], []
    for start in range(0, flat.numel(), block):
        b = flat[start : start + block]
        scale = b.abs().max()
        scales.append(scale)
        ratio = b.abs() / scale if scale > 0 else torch.zeros_like(b)
        codes.append(torch.round(127 * ratio ** (1 / power)) * torch.sign(b))
    return torch.cat(codes).to(torch.int8), torch.stack(scales).float()


@pytest.mark.exercise("9.1", points=2)
def test_codes_and_scales_match_the_formula(answers):
    for n, block, power in ((1000, 64, 1), (4096, 256, 1), (777, 100, 2), (300, 256, 4), (5, 8, 1)):
        x = _moment(n, seed=n)
        codes, scales = answers.quantize_blockwise(x, block, power)
        want_codes, want_scales = _reference_codes(x, block, power)
        assert scales.numel() == want_scales.numel(), (
            f"{n} values in blocks of {block}: {scales.numel()} scales, expected ceil({n} / {block}) = "
            f"{want_scales.numel()} (the last block may be partial)"
        )
        assert torch.allclose(scales.float(), want_scales, rtol=1e-6), (
            f"{n} values, blocks of {block}: the scales are not each block's largest |value|"
        )
        assert codes.dtype == torch.int8 and codes.numel() == n, f"codes: {codes.dtype}, {codes.numel()} values"
        # A value exactly halfway between two codes may round either way in fp32: at most one code apart.
        off = (codes.int() - want_codes.int()).abs()
        assert off.max().item() <= 1 and (off > 0).float().mean().item() < 0.01, (
            f"{n} values, blocks of {block}, power {power}: {int((off > 0).sum())} codes differ from "
            f"round(127 * sign(x) * (|x| / scale) ** (1 / {power}))"
            + (" - is the sign kept?" if ((codes.int() == -want_codes.int()) & (want_codes != 0)).any() else "")
        )
        # Codes depend only on value / scale. A second moment of small gradients lives far under 1e-12, so the same
        # values times 2**-90 (exact in fp32: a power of two, every value still a normal float) must give the same
        # codes and scales times 2**-90: a scale clamped at some epsilon, rather than only where it is 0, fails.
        tiny_codes, tiny_scales = answers.quantize_blockwise(x * 2.0**-90, block, power)
        assert torch.equal(tiny_codes, codes) and torch.equal(tiny_scales.float(), scales.float() * 2.0**-90), (
            f"{n} values times 2**-90 (largest {x.abs().max().item() * 2.0**-90:.2g}): the codes or scales changed; "
            "a block's codes depend only on value / scale (guard only a scale of exactly 0)"
        )


@pytest.mark.exercise("9.1", points=2)
def test_dequantize_inverts_within_half_a_step(answers):
    for n, block, power in ((1000, 64, 1), (777, 100, 2), (513, 256, 4)):
        x = _moment(n, seed=3 * n)
        codes, scales = _reference_codes(x, block, power)
        back = answers.dequantize_blockwise(codes, scales, block, power)
        q = codes.double()
        want = torch.sign(q) * (q.abs() / 127) ** power * scales.double().repeat_interleave(block)[:n]
        assert back.numel() == n, f"{back.numel()} values back, expected {n}"
        error = (back.double().reshape(-1) - want).abs().max().item()
        # fp32 arithmetic on values up to the scale: 1e-6 of the largest scale covers its rounding.
        assert error <= 1e-6 * scales.max().item(), (
            f"{n} values, blocks of {block}, power {power}: dequantized values differ from "
            f"sign(q) * (|q| / 127) ** {power} * scale by up to {error:.3g}"
        )
        shaped = answers.dequantize_blockwise(codes, scales, block, power, shape=(n, 1))
        assert tuple(shaped.shape) == (n, 1), f"shape=(n, 1) gave {tuple(shaped.shape)}"
    zeros, zero_scales = answers.quantize_blockwise(torch.zeros(300), 128, 1)
    assert not torch.isnan(zero_scales.float()).any() and (zeros == 0).all(), "a block of zeros: scale 0, codes 0"


@pytest.mark.exercise("9.1", points=1)
def test_a_linear_code_rounds_small_second_moments_to_zero(answers):
    # The chapter's point, on the learner's code: v spans decades; linear loses the small ones, power 4 not.
    v = _moment(4096, seed=7).square()
    block_max = v.view(-1, 256).amax(1).repeat_interleave(256)
    small = (v > block_max * 1e-6) & (v < block_max * 1e-3)  # a linear code's half step is 1/254 of the largest
    lost = {}
    for power in (1, 4):
        back = answers.dequantize_blockwise(*answers.quantize_blockwise(v, 256, power), 256, power)
        lost[power] = ((back.reshape(-1) == 0) & small).float().sum().item() / small.sum().item()
    assert lost[1] > 0.5 and lost[4] < 0.01, (
        f"second moments between 1e-6 and 1e-3 of their block's largest, rounded to 0: {lost[1]:.0%} with the linear "
        f"code (expected most), {lost[4]:.0%} with power 4 (expected none)"
    )


class LargestTensor(TorchDispatchMode):
    """The bytes of the largest tensor any op makes while it is on."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def _loss_and_grads(answers, n, c, v, chunks, seed, watch=False):
    """In the worker: the answer's loss and gradients, and the largest tensor made in forward and backward."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, c, generator=g).requires_grad_()
    weight = (torch.randn(v, c, generator=g) / c**0.5).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    mode, saved = LargestTensor(), {}

    def pack(t: torch.Tensor) -> torch.Tensor:  # each storage once: what the forward keeps for backward
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with mode if watch else torch.enable_grad():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = answers.chunked_cross_entropy(hidden, weight, targets, chunks)
        loss.backward()
    return {"loss": loss.detach(), "hidden": hidden.grad, "weight": weight.grad, "largest": mode.largest} | {
        "saved": sum(saved.values())
    }


def _reference_loss(n, c, v, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, c, generator=g).requires_grad_()
    weight = (torch.randn(v, c, generator=g) / c**0.5).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    loss = F.cross_entropy(hidden @ weight.t(), targets)
    loss.backward()
    return loss.detach(), hidden.grad, weight.grad


@pytest.mark.exercise("9.2", points=2)
def test_chunked_loss_and_gradients_equal_the_whole_loss(answers):
    for n, c, v, chunks in ((64, 16, 100, 4), (50, 8, 37, 3), (10, 4, 11, 10), (33, 12, 64, 1)):
        got = answers.run(_loss_and_grads, n, c, v, chunks, seed=n)
        want_loss, want_h, want_w = _reference_loss(n, c, v, seed=n)
        where = f"{n} tokens, vocabulary {v}, {chunks} chunks"
        assert torch.allclose(got["loss"], want_loss, rtol=1e-5), (
            f"{where}: loss {got['loss'].item():.6f}, F.cross_entropy on the whole logits gives "
            f"{want_loss.item():.6f}" + (" - divide the summed loss by the tokens, once" if chunks > 1 else "")
        )
        for name, grad, want in (("hidden", got["hidden"], want_h), ("weight", got["weight"], want_w)):
            assert grad is not None, f"{where}: {name} got no gradient: is the loss attached to the graph?"
            error = ((grad - want).norm() / want.norm()).item()
            # The same sums in another order: fp32 rounding, well under 1e-5 at these sizes.
            assert error < 1e-5, f"{where}: d loss / d {name} is off by {error:.1e} (relative), expected < 1e-5"


@pytest.mark.exercise("9.2", points=2)
def test_no_tensor_holds_all_the_logits(answers):
    n, c, v, chunks = 256, 8, 512, 8
    got = answers.run(_loss_and_grads, n, c, v, chunks, seed=1, watch=True)
    want_loss, want_h, want_w = _reference_loss(n, c, v, seed=1)
    # Saving memory counts only with the right answer: the loss and both gradients of the whole cross-entropy
    # (the same sums in another order: well under 1e-5 relative at these sizes).
    assert torch.allclose(got["loss"], want_loss, rtol=1e-5), (
        f"{n} tokens, {chunks} chunks: loss {got['loss'].item():.6f}, F.cross_entropy on the whole logits gives "
        f"{want_loss.item():.6f}"
    )
    for name, grad, want in (("hidden", got["hidden"], want_h), ("weight", got["weight"], want_w)):
        assert grad is not None, f"{n} tokens, {chunks} chunks: {name} got no gradient: is the loss on the graph?"
        error = ((grad - want).norm() / want.norm()).item()
        assert error < 1e-5, f"{n} tokens, {chunks} chunks: d loss / d {name} is off by {error:.1e} (relative)"
    whole, chunk = 4 * n * v, 4 * (n // chunks) * v
    # The weight's gradient (V x C) and one chunk's logits are the largest tensors a chunked loss needs;
    # half the whole logits is far above both and far below them.
    assert got["largest"] < whole // 2, (
        f"a tensor of {got['largest']:,} bytes was made: the whole ({n} x {v}) fp32 logits are {whole:,}, one of "
        f"{chunks} chunks {chunk:,}: make only one chunk's logits at a time, in the forward and in the backward"
    )
    inputs = 4 * n * c + 4 * v * c + 8 * n  # hidden, weight and targets: what a chunk's recompute needs
    assert got["saved"] < whole // 2, (
        f"the forward kept {got['saved']:,} bytes for backward: each chunk's log-softmax adds up to the whole "
        f"logits ({whole:,}); keep only the inputs ({inputs:,}) and make each chunk's logits again in backward"
    )


def _state_bytes_of(answers, cfg, optimizer, in_backward):
    """In the worker: the answer for a fresh GPT(cfg)."""
    return answers.state_bytes(GPT(cfg), optimizer, in_backward)


def _real_state(cfg, optimizer):
    """Bytes of the optimizer's state tensors after one real step of GPT(cfg), and of its gradients."""
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters()) if optimizer == "adamw" else AdamW8bit(model.parameters())
    idx = torch.randint(0, cfg.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    model(idx[:, :-1], idx[:, 1:])[1].backward()
    grads = {p.grad.untyped_storage().data_ptr(): p.grad.nbytes for p in model.parameters()}
    largest = max(p.grad.nbytes for p in model.parameters())
    opt.step()
    tensors = [t for s in opt.state.values() for k, t in s.items() if torch.is_tensor(t) and k != "step"]
    weights = sum(p.nbytes for p in model.parameters())
    return {"weights": weights, "gradients": sum(grads.values()), "optimizer": sum(t.nbytes for t in tensors)}, largest


CONFIGS = (
    ModelConfig(n_layer=2, n_head=2, n_embd=64, ctx=16, vocab_size=500),  # small norms: fp32 moments
    ModelConfig(n_layer=1, n_head=4, n_embd=96, ctx=16, vocab_size=1000),  # 96 000-value embedding, not /256
)


@pytest.mark.exercise("9.3", points=2)
def test_state_bytes_match_the_real_optimizers(answers):
    for cfg in CONFIGS:
        for optimizer in ("adamw", "adamw8bit"):
            want, _ = _real_state(cfg, optimizer)
            got = answers.run(_state_bytes_of, cfg, optimizer, False)
            for key in ("weights", "gradients", "optimizer"):
                assert got.get(key) == want[key], (
                    f"{optimizer}, {cfg.n_layer} blocks of width {cfg.n_embd}: {key} {got.get(key)!r} bytes, the "
                    f"real tensors after one step hold {want[key]:,}"
                    + (" - the tied embedding is one tensor" if got.get(key, 0) > want[key] else "")
                )


@pytest.mark.exercise("9.3", points=1)
def test_the_step_in_backward_keeps_one_gradient(answers):
    for cfg in CONFIGS:
        want, largest = _real_state(cfg, "adamw")
        got = answers.run(_state_bytes_of, cfg, "adamw8bit", True)
        assert got.get("gradients") == largest, (
            f"step in backward, {cfg.n_layer} blocks of width {cfg.n_embd}: gradients {got.get('gradients')!r} "
            f"bytes; only the largest parameter's gradient ({largest:,} bytes, the tied embedding's) is ever "
            f"alive, against {want['gradients']:,} for all of them"
        )


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract)

from minigpt.grading.contract import Case  # noqa: E402

# 9.1 ------------------------------------------------------------------------------------------------------


def _clear_of_ties(x: torch.Tensor, block: int, power: int, margin: float = 2e-3) -> torch.Tensor:
    """x with every value whose code 127 * (|x| / scale) ** (1 / power) lies within `margin` of a half (k + 0.5)
    moved to the middle of its code: fp32 rounding, in any order of operations, then gives every answer the
    same code (the exact ties a test wants are put in on purpose, where every order agrees)."""
    flat = x.reshape(-1).double().clone()
    for start in range(0, flat.numel(), block):
        b = flat[start : start + block]  # a view: the changes land in flat
        scale = b.abs().max()
        if scale == 0:
            continue
        t = 127 * (b.abs() / scale) ** (1 / power)
        near = ((t - t.floor()) - 0.5).abs() < margin
        q = t[near].round() / 127
        b[near] = torch.sign(b[near]) * scale * math.prod([q] * power)  # products, not pow: the same bits anywhere
    return flat.float().reshape(x.shape)


def _codes_input(shape: tuple[int, ...], block: int, power: int, seed: int, ties: bool = False) -> torch.Tensor:
    """Moment-like values of this shape, clear of near-ties. With ties: a block of zeros, and in every other block
    a largest |value| that is a power of two and the values +-half of it (|x| / scale = 0.5, code 63.5, which
    rounds to 64 and -64): exact in fp32 whichever way an answer divides, multiplies or orders the operations."""
    x = _moment(torch.Size(shape).numel(), seed=seed)
    if ties:
        x[block : 2 * block] = 0.0  # the second block: all zeros, scale 0
        for start in range(0, x.numel(), block):
            b = x[start : start + block]  # a view: the changes land in x
            top_at = int(b.abs().argmax())
            if b[top_at] != 0:
                mantissa, exponent = torch.frexp(b[top_at].abs())  # |top| = mantissa * 2**exponent, exactly
                b[top_at] = torch.sign(b[top_at]) * 2.0 ** (int(exponent) - int(mantissa == 0.5))  # up to 2**k
    x = _clear_of_ties(x, block, power)
    if ties:
        for start in range(0, x.numel(), block):
            b = x[start : start + block]
            top_at = int(b.abs().argmax())
            others = [i for i in range(b.numel()) if i != top_at][:2]
            if len(others) == 2 and b[top_at] != 0:
                top = b[top_at].abs()
                b[others[0]], b[others[1]] = top / 2, -top / 2
    return x.reshape(shape)


def _random_codes(n: int, seed: int) -> torch.Tensor:
    """int8 codes over the whole range -127..127, the ends and the middle included."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(-127, 128, (n,), generator=g, dtype=torch.int64)
    codes[:6] = torch.tensor([127, -127, 0, 64, -64, 1])
    return codes.to(torch.int8)


def _random_scales(n: int, seed: int) -> torch.Tensor:
    """fp32 scales over several decades, one of them 0 (an all-zero block)."""
    g = torch.Generator().manual_seed(seed)
    scales = (0.5 + torch.rand(n, generator=g)) * _powers_of_two(n, -12, 12, g)
    scales[n // 2] = 0.0
    return scales


def _cases_9_1() -> list[Case]:
    promise_returns = (
        "Returns: a tuple (codes, scales): codes an int8 tensor of x.numel() values (flat), scales an fp32 tensor "
        "of ceil(x.numel() / block) values, one per block."
    )
    promise_nothing = "In place: nothing; x is left as it was."
    too_small = "Raises: ValueError if block or power is less than 1."
    q = "quantize_blockwise"
    cases = [
        # 1005 values in blocks of 64: a partial last block of 45, a block of zeros, ties at 63.5, the default power
        Case(q, (_codes_input((3, 5, 67), 64, 1, seed=1, ties=True), 64), promise=(promise_returns, promise_nothing)),
        Case(q, (_codes_input((1005,), 100, 2, seed=2), 100), {"power": 2}),  # 11 blocks, the last of 5
        Case(q, (_codes_input((7, 100), 256, 4, seed=3), 256, 4)),  # 700 values: 2 whole blocks and 188
        Case(q, (_codes_input((50,), 7, 3, seed=4), 7, 3)),  # any power, not only 1, 2 and 4
        Case(q, (_codes_input((16, 4), 16, 1, seed=5, ties=True), 16, 1)),  # ties in every block
        Case(q, (_codes_input((10,), 1, 2, seed=6), 1, 2)),  # a block per value: codes 127, -127 or 0
        Case(q, (_codes_input((30,), 64, 1, seed=7), 64)),  # fewer values than one block
        Case(q, (torch.cat([_codes_input((64,), 32, 1, seed=8), torch.zeros(5)]), 32)),  # a last partial block of 0s
        Case(q, (torch.zeros(2, 8), 4, 2)),  # nothing but zeros
        Case(q, (_codes_input((20,), 8, 1, seed=9), 0), promise=too_small),
        Case(q, (_codes_input((20,), 8, 1, seed=9), -8), promise=too_small),
        Case(q, (_codes_input((20,), 8, 1, seed=9), 8, 0), promise=too_small),
    ]
    d = "dequantize_blockwise"
    returns = (
        "Returns: an fp32 tensor of codes.numel() values, flat, or of shape `shape` when one is given.",
        "In place: nothing; codes and scales are left as they were.",
    )
    # A few fp32 roundings (the division by 127, the power, the product with the scale), each half an ulp, put
    # together in whatever order an answer writes them: under 1e-6 relative; 1e-5 leaves room for another
    # CPU's pow kernel. A wrong power, divisor or block is off by far more.
    exact = {"rtol": 1e-5}
    cases += [
        Case(d, (_random_codes(1005, 1), _random_scales(16, 1), 64), {"shape": (3, 5, 67)}, promise=returns, **exact),
        Case(d, (_random_codes(1005, 2).reshape(15, 67), _random_scales(11, 2), 100, 2), **exact),  # read flat
        Case(d, (_random_codes(700, 3), _random_scales(3, 3), 256), {"power": 4, "shape": (7, 100)}, **exact),
        Case(d, (_random_codes(50, 4), _random_scales(8, 4), 7, 3), {"shape": (50, 1)}, **exact),
        Case(d, (_random_codes(12, 5), _random_scales(12, 5), 1, 1), **exact),
        Case(d, (_random_codes(30, 6), _random_scales(1, 6), 64, 2), **exact),
        Case(d, (_random_codes(20, 7), _random_scales(3, 7), 0), promise=too_small),
        Case(d, (_random_codes(20, 7), _random_scales(3, 7), 8, 0), promise=too_small),
    ]
    wrong_count = (
        "Raises: ValueError if scales does not hold one value per block of codes, ceil(codes.numel() / block)."
    )
    cases += [
        Case(d, (_random_codes(1005, 8), _random_scales(15, 8), 64), promise=wrong_count),  # one short
        Case(d, (_random_codes(1024, 8), _random_scales(17, 8), 64), promise=wrong_count),  # one too many
    ]
    return cases


# 9.2 ------------------------------------------------------------------------------------------------------


class LogitRows(TorchDispatchMode):
    """The most rows of vocabulary-wide values (a tensor with the vocabulary in its shape, numel // V) any op
    makes as a new tensor: how many tokens' logits (or their softmax, or its gradient) one piece holds."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.rows = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and self.vocab in t.shape and t.untyped_storage().data_ptr() not in inputs:
                self.rows = max(self.rows, t.numel() // self.vocab)
        return out


def _forward_backward(function, hidden, weight, targets, chunks):
    """The loss, backward through it (the gradients land in hidden.grad and weight.grad, compared as the
    arguments after the call), and the most tokens' logits made at once in forward and backward."""
    rows = LogitRows(weight.shape[0])
    with rows:
        loss = function(hidden, weight, targets, chunks)
        loss.backward()
    return {"loss": loss.detach(), "most logit rows at once": rows.rows}


def _loss_inputs(n: int, c: int, v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, c, generator=g).requires_grad_()
    weight = (torch.randn(v, c, generator=g) / c**0.5).requires_grad_()
    return hidden, weight, torch.randint(0, v, (n,), generator=g)


def _cases_9_2() -> list[Case]:
    f = "chunked_cross_entropy"
    # The same sums in another order (per chunk or whole, a matmul's own blocking on another CPU): the loss
    # differs by ~1e-7 relative and the gradients by ~1e-8 absolute (their largest entries are 5e-3..0.3); rtol
    # 1e-5 with atol 1e-6 is 10x and more above that, and far below a wrong divisor or a lost chunk.
    close = {"rtol": 1e-5, "atol": 1e-6}
    cases = [
        Case(f, (*_loss_inputs(50, 8, 37, seed=1), 3), drive=_forward_backward, **close),  # 17, 17, 16 tokens
        Case(f, (*_loss_inputs(10, 4, 11, seed=2), 10), drive=_forward_backward, **close),  # a token a chunk
        Case(f, (*_loss_inputs(33, 12, 64, seed=3), 1), drive=_forward_backward, **close),  # one chunk
        Case(f, (*_loss_inputs(64, 16, 100, seed=4), 5), drive=_forward_backward, **close),  # 13 tokens and 12
        Case(
            f,
            (*_loss_inputs(21, 6, 30, seed=5), 4),
            promise=(
                "Returns: a 0-dim fp32 tensor, the mean loss over the N tokens, whose backward fills hidden.grad "
                "and weight.grad.",
                "In place: nothing (until you call backward on the loss).",
            ),
            **close,
        ),
        Case(f, (*_loss_inputs(12, 4, 9, seed=6), 0), promise="Raises: ValueError if chunks is less than 1."),
        Case(f, (*_loss_inputs(12, 4, 9, seed=6), -2), promise="Raises: ValueError if chunks is less than 1."),
    ]
    # Memory: 256 tokens, a vocabulary of 4096, 32 chunks of 8 tokens. One chunk's logits are 128 KiB, all of them
    # 4 MiB, the two gradients the call makes 68 KiB. The reference peaks at ~3.5 chunks' logits (the logits, the
    # log-softmax, their gradients); an honest answer written another way peaks at 0.7x..1.6x that (an
    # autograd.Function, a logsumexp minus the target's logit, a one-hot product); 0.3x..3x lets all of them
    # pass, while keeping every chunk's log-softmax for backward (~10x) or making all the logits (~27x) fails.
    # Chunks of the wrong size show in "most logit rows at once" (8 here), compared exactly.
    cases.append(Case(f, (*_loss_inputs(256, 4, 4096, seed=7), 32), drive=_forward_backward, peak=(0.3, 3.0), **close))
    return cases


# 9.3 ------------------------------------------------------------------------------------------------------


def _mlp(*widths: int) -> torch.nn.Sequential:
    """Linear layers of these widths, seeded: a model whose first parameter is not its largest."""
    torch.manual_seed(sum(widths))
    return torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])


def _at_the_boundaries() -> torch.nn.Sequential:
    """Tensors of 4095 values (fp32 moments), 4096 (8-bit, 16 whole blocks) and 4097 (8-bit, 17 blocks, the last
    of one value), a buffer (a mask of 4160 values: state, not a parameter) and a small last layer."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Linear(63, 65, bias=False),  # 4095
        torch.nn.Linear(65, 64),  # 4160 and 64
        torch.nn.LayerNorm(64),  # 64 and 64
        torch.nn.Linear(64, 64, bias=False),  # 4096
        torch.nn.Linear(64, 17),  # 1088 and 17
        torch.nn.Linear(17, 241),  # 4097 and 241
        torch.nn.Linear(241, 3),  # 723 and 3
    )
    model[1].register_buffer("mask", torch.ones(64, 65))  # not a parameter: no gradient, no optimizer state
    return model


def _tied() -> torch.nn.Sequential:
    """An embedding and an output layer sharing one (600, 20) weight, between two smaller layers."""
    torch.manual_seed(4)
    embedding, head = torch.nn.Embedding(600, 20), torch.nn.Linear(20, 600, bias=False)
    head.weight = embedding.weight
    return torch.nn.Sequential(torch.nn.Linear(5, 20), embedding, torch.nn.LayerNorm(20), head, torch.nn.Linear(600, 2))


def _cases_9_3() -> list[Case]:
    cases = [
        Case(
            "state_bytes",
            (_mlp(3, 5, 300, 17),),
            promise=(
                'Returns: a dict {"weights": int, "gradients": int, "optimizer": int}, each a number of bytes.',
                "In place: nothing; the model is left as it was.",
            ),
        )
    ]
    for model in (_mlp(3, 5, 300, 17), _at_the_boundaries(), _tied(), GPT(CONFIGS[1])):
        for optimizer in ("adamw", "adamw8bit"):
            for in_backward in (False, True):
                cases.append(Case("state_bytes", (model, optimizer), {"in_backward": in_backward}))
    cases.append(Case("state_bytes", (_mlp(4, 4),), {"optimizer": "adamw8bit"}))  # in_backward left at False
    unknown = 'Raises: ValueError if optimizer is not "adamw" or "adamw8bit" (spelled exactly so, in lower case).'
    for name in ("sgd", "adam", "AdamW", "ADAMW8BIT", ""):
        cases.append(Case("state_bytes", (_mlp(4, 4), name), {"in_backward": True}, promise=unknown))
    return cases


CONTRACTS = {"9.1": _cases_9_1, "9.2": _cases_9_2, "9.3": _cases_9_3}


@pytest.mark.exercise("9.1", points=1)
def test_9_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["9.1"]())


@pytest.mark.exercise("9.2", points=1)
def test_9_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["9.2"]())


@pytest.mark.exercise("9.3", points=1)
def test_9_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["9.3"]())
