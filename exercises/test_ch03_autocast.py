"""Grades chapter 3: an autocast training step that keeps the loss in fp32, the precision comparison
(seed exercise 1) and "why still fp32?" (seed exercise 5)."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from minigpt import memory
from minigpt.formats import update_is_lost
from minigpt.model import GPT, get_config

CHAPTER = "ch03_autocast"


def _step(answers, cfg, dtype, monkeypatch):
    """Run the learner's step once; return (model before, model after, loss, logits dtype, loss input dtypes)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    before = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randint(0, cfg.vocab_size, (2, 2, cfg.ctx))
    logits_dtypes, loss_dtypes = [], []
    model.lm_head.register_forward_hook(lambda m, i, out: logits_dtypes.append(out.dtype))
    real_cross_entropy = F.cross_entropy

    def spy(input, *args, **kwargs):  # every cross-entropy computed in the step, whoever calls it
        loss_dtypes.append(input.dtype)
        return real_cross_entropy(input, *args, **kwargs)

    monkeypatch.setattr(F, "cross_entropy", spy)
    loss = answers.autocast_train_step(model, optimizer, x, y, dtype=dtype)
    monkeypatch.undo()
    return before, model, loss, logits_dtypes, loss_dtypes, (x, y)


@pytest.mark.exercise("3.1", points=2)
def test_forward_in_16_bits_loss_in_fp32(answers, small_cfg, monkeypatch):
    for dtype in (torch.bfloat16, torch.float16):
        _, _, loss, logits_dtypes, loss_dtypes, _ = _step(answers, small_cfg, dtype, monkeypatch)
        assert logits_dtypes == [dtype], (
            f"the model's matmuls ran in {logits_dtypes}, not {dtype}: run the forward inside "
            f"torch.autocast(device_type=x.device.type, dtype=dtype)"
        )
        assert isinstance(loss, torch.Tensor) and loss.numel() == 1, "return the loss as a one-element tensor"
        assert loss.dtype == torch.float32 and all(d == torch.float32 for d in loss_dtypes), (
            f"the loss was computed from {loss_dtypes} logits and returned as {loss.dtype}: upcast the logits "
            f"with .float() before the cross-entropy, so the loss is fp32"
        )


@pytest.mark.exercise("3.1", points=2)
def test_weights_stay_fp32_and_take_a_step(answers, small_cfg, monkeypatch):
    before, after, loss, _, _, (x, y) = _step(answers, small_cfg, torch.bfloat16, monkeypatch)
    dtypes = {p.dtype for p in after.parameters()}
    assert dtypes == {torch.float32}, f"the weights became {dtypes}: autocast keeps them fp32, do not convert"
    changed = [n for (n, p), q in zip(after.named_parameters(), before.parameters()) if not torch.equal(p, q)]
    assert len(changed) == len(list(after.parameters())), "optimizer.step() did not update every weight"
    assert all(p.grad is None or not p.grad.any() for p in after.parameters()), "zero the gradients after the step"
    with torch.no_grad():
        _, reference = before(x, y)
    # bf16 keeps 8 significant bits: the logits, and so the loss, move by well under 1% (2% leaves room).
    assert loss.item() == pytest.approx(reference.item(), rel=0.02), (
        f"the step's loss {loss.item():.4f} is not the model's loss {reference.item():.4f} on that batch"
    )


@pytest.mark.exercise("3.2", points=3)
def test_compare_precisions_table(answers, token_data):
    precisions = ("fp32", "bf16", "fp16")
    rows = answers.compare_precisions(
        preset="tiny", precisions=precisions, steps=2, batch=2, ctx=16, device="cpu", data=token_data
    )
    assert [r["precision"] for r in rows] == list(precisions), "one row per precision, in the order given"
    keys = {"precision", "seconds", "final_loss", "predicted_peak_bytes", "measured_peak_bytes", "skipped_steps"}
    for r in rows:
        assert keys <= set(r), f"row {r} lacks {keys - set(r)}"
        assert r["seconds"] > 0 and math.isfinite(r["final_loss"]), f"bad time or loss in {r}"
        want = memory.estimate(get_config("tiny"), 2, 16, r["precision"], device="cpu").peak
        assert r["predicted_peak_bytes"] == want, f"{r['precision']}: predicted peak should be estimate(...).peak"
        assert r["measured_peak_bytes"] is None, "a CPU has no peak-memory counter: report None"
        assert r["skipped_steps"] == 0 or r["precision"] == "fp16", "only the fp16 GradScaler skips steps"
    fp32 = rows[0]["final_loss"]
    for r in rows[1:]:
        # Same seed, same batches, two steps from the same init: the 16-bit matmuls move the loss by far less
        # than 0.05 nats (the loss is about ln(8192) = 9 here).
        assert abs(r["final_loss"] - fp32) < 0.05, f"{r['precision']} loss {r['final_loss']} vs fp32 {fp32}"


@pytest.mark.exercise("3.3", points=2)
def test_lost_update_fraction(answers):
    weights = torch.randn(20_000, generator=torch.Generator().manual_seed(0)) * 0.02  # like GPT's init
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for update in (1e-6, 1e-5, 1e-4, 1e-3):
            got = answers.lost_update_fraction(weights, update, dtype)
            stored = weights.to(dtype)
            want = ((stored.double() + update).to(dtype) == stored).double().mean().item()
            # 0.5%: only elements within fp32's rounding of a tie can come out differently (see formats.py).
            assert got == pytest.approx(want, abs=0.005), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) returned {got:.4f}, expected {want:.4f}: "
                f"compare after rounding the sums into {dtype}"
            )
    for w in weights[:50].tolist():  # the same rule, one weight at a time, as chapter 1 defined it
        lost = answers.lost_update_fraction(torch.tensor([w]), 1e-4, torch.bfloat16)
        assert lost == float(update_is_lost(w, 1e-4, torch.bfloat16)), f"weight {w}: lost should be {not lost}"


@pytest.mark.exercise("3.3", points=1)
def test_bf16_weights_lose_small_updates(answers):
    weights = torch.randn(20_000, generator=torch.Generator().manual_seed(1)) * 0.02
    bf16 = answers.lost_update_fraction(weights, 1e-5, torch.bfloat16)
    fp32 = answers.lost_update_fraction(weights, 1e-5, torch.float32)
    assert bf16 > 0.5 and fp32 < 0.01, (
        f"an update of 1e-5 should be lost for most bf16 weights of size ~0.02 (got {bf16:.2f}) and for "
        f"almost no fp32 ones (got {fp32:.2f})"
    )
