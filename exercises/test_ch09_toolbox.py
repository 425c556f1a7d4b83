"""Grades chapter 9: block-wise 8-bit quantization, a chunked cross-entropy, and the static bytes of a step
with the 8-bit optimizer and the step in backward.

Every answer is checked against an independent computation: the quantization against the formula written
out here, the loss against F.cross_entropy on the whole logits, the bytes against the real tensors of a model
and of torch's and the course's optimizers after a step.
"""

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


def _moment(n: int, seed: int = 0) -> torch.Tensor:
    """A moment-like tensor: values spread over several decades, a few outliers, some exact zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 2)
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


def _mlp(*widths: int) -> torch.nn.Sequential:
    """Linear layers of these widths, seeded: a model whose first parameter is not its largest."""
    torch.manual_seed(sum(widths))
    return torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])


def _cases_9_3() -> list[Case]:
    cases = []
    for model in (_mlp(3, 5, 300, 17), _mlp(64, 64, 64), GPT(CONFIGS[1])):
        for optimizer in ("adamw", "adamw8bit"):
            for in_backward in (False, True):
                cases.append(Case("state_bytes", (model, optimizer), {"in_backward": in_backward}))
    cases.append(Case("state_bytes", (_mlp(4, 4),), {"optimizer": "sgd"}, promise="Raises: x"))
    return cases


CONTRACTS = {"9.3": _cases_9_3}


@pytest.mark.exercise("9.3", points=1)
def test_9_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["9.3"]())
