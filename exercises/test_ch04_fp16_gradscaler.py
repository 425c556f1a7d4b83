"""Grades chapter 4: a scaled fp16 step (unscale before clipping), the scaler's update rule, the schedule on
skipped steps, and the overflow experiment."""

import copy
import math

import pytest
import torch

from minigpt.grading.watch import model_inputs, optimizer_steps
from minigpt.model import GPT

CHAPTER = "ch04_fp16_gradscaler"
TINY_LOSS = 1e-5
HINTS = {  # the hints of solutions/ch04_fp16_gradscaler.py, shown under a wrong answer
    "4.1": "scaler.scale(loss).backward(); scaler.unscale_ BEFORE clipping; scaler.step; scaler.update",
    "4.2": "inf -> scale * backoff, tracker 0; else tracker + 1, and at growth_interval grow and reset",
    "4.3": "a skipped step lowers the scale; only advance the scheduler when it did not",
    "4.4": "a GradScaler(init_scale=...) training loop; record scaler.get_scale() before each step",
}


class SmallGradientGPT(GPT):
    """A GPT whose loss is 1e-5 of the usual, so its gradients are as small as a big model's often are.

    In fp16 (smallest subnormal 2**-24, about 6e-8) most of them flush to zero unless the loss is scaled.
    """

    def forward(self, idx, targets=None, reduction="mean"):
        logits, loss = super().forward(idx, targets, reduction)
        return logits, None if loss is None else loss * TINY_LOSS


def _batch(cfg, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (4, cfg.ctx + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _fp32_gradient(model, x, y) -> torch.Tensor:
    model = copy.deepcopy(model)
    _, loss = model(x, y)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _sgd_step(answers, model, x, y, max_norm, init_scale=2.0**16, growth_interval=2000):
    """Run the learner's step with SGD(lr=1): the weights then move by exactly minus the clipped gradient."""
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    out = answers.scaled_fp16_step(model, optimizer, scaler, x, y, max_norm=max_norm)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return out, before - after, scaler


@pytest.mark.exercise("4.1", points=2)
def test_clips_the_unscaled_gradients(answers, small_cfg):
    model = GPT(small_cfg)
    x, y = _batch(small_cfg)
    true_norm = _fp32_gradient(model, x, y).norm().item()
    out, moved, _ = _sgd_step(answers, model, x, y, max_norm=true_norm / 10)
    # 5%: fp16 matmuls change the gradients by about 0.1%; clipping then sets the norm exactly.
    assert out["grad_norm"] == pytest.approx(true_norm, rel=0.05), (
        f"grad_norm {out['grad_norm']:.4g} is not the true gradient norm {true_norm:.4g}"
        + (
            ": it looks scaled - call scaler.unscale_(optimizer) before clip_grad_norm_"
            if out["grad_norm"] > 100 * true_norm
            else ""
        )
    )
    assert moved.norm().item() == pytest.approx(true_norm / 10, rel=0.05), (
        f"with max_norm={true_norm / 10:.3g} the step moved the weights by {moved.norm().item():.3g}: clip the "
        f"unscaled gradients (scaler.unscale_ before clip_grad_norm_), else you clip numbers 65536x too big"
    )
    assert {"loss", "grad_norm", "scale", "skipped"} <= set(out) and out["skipped"] is False
    for key in ("loss", "grad_norm"):
        assert isinstance(out[key], float), f'out["{key}"] is {out[key]!r}: return a Python float (.item())'
    left = [n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()]
    assert not left, f"the step left gradients in {left[:3]}...: zero them after the step (optimizer.zero_grad())"


@pytest.mark.exercise("4.1", points=2)
def test_small_gradients_survive_fp16(answers, small_cfg):
    model = SmallGradientGPT(small_cfg)
    x, y = _batch(small_cfg, seed=1)
    reference = _fp32_gradient(model, x, y)
    _, moved, _ = _sgd_step(answers, model, x, y, max_norm=1e9)  # no clipping: the step is the gradient
    cosine = torch.nn.functional.cosine_similarity(moved, reference, dim=0).item()
    zeros = (moved == 0).float().mean().item()
    # With loss scaling the fp16 gradients match fp32's to ~0.1% (cosine > 0.9999); without it most of these
    # 1e-5-sized gradients flush to zero (cosine about 0.65): 0.99 separates the two on any device.
    assert cosine > 0.99 and moved.norm().item() == pytest.approx(reference.norm().item(), rel=0.05), (
        f"the fp16 gradients differ from fp32's (cosine {cosine:.3f}, {zeros:.0%} exactly zero): small "
        f"gradients underflow in fp16 - backpropagate scaler.scale(loss), not the loss"
    )


@pytest.mark.exercise("4.1", points=1)
def test_an_overflow_skips_the_step(answers, small_cfg):
    model = GPT(small_cfg)
    x, y = _batch(small_cfg)
    out, moved, scaler = _sgd_step(answers, model, x, y, max_norm=1.0, init_scale=2.0**40)
    assert out["skipped"] is True and out["scale"] == 2.0**40, (
        f"a scale of 2**40 overflows fp16: the step must report skipped=True and scale=2**40, got {out}"
    )
    assert not moved.any(), "the scaler found inf gradients, so the weights must not change"
    assert scaler.get_scale() == 2.0**39, "call scaler.update() after the step: it halves the scale"
    # A clean step at growth_interval=1 GROWS the scale: the scale changed, but the step was taken.
    out, moved, scaler = _sgd_step(answers, GPT(small_cfg), x, y, max_norm=1.0, init_scale=2.0**10, growth_interval=1)
    assert scaler.get_scale() == 2.0**11, "call scaler.update() after the step: a clean step at the interval grows it"
    assert out["skipped"] is False and out["scale"] == 2.0**10 and moved.any(), (
        f"a clean step with growth_interval=1 is taken and then doubles the scale (2**10 -> 2**11): report "
        f"skipped=False and scale=2**10, got {out} - a skipped step LOWERS the scale, a grown one is not skipped"
    )


def _gradscaler_trace(found_infs, init_scale, **kwargs) -> list[tuple[float, int]]:
    """(scale, growth tracker) after each step of a real GradScaler, fed inf or finite gradients."""
    w = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([w], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, **kwargs)
    trace = []
    for inf in found_infs:
        optimizer.zero_grad()
        scaler.scale(w.sum() * (math.inf if inf else 1.0) + 1.0).backward()
        scaler.step(optimizer)
        scaler.update()
        state = scaler.state_dict()
        trace.append((state["scale"], state["_growth_tracker"]))
    return trace


@pytest.mark.exercise("4.2", points=3)
def test_update_scale_matches_gradscaler(answers):
    gen = torch.Generator().manual_seed(0)
    patterns = [[False] * 7, [True, True, False, False, False, False], (torch.rand(40, generator=gen) < 0.3).tolist()]
    settings = [
        dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=3),
        dict(growth_factor=4.0, backoff_factor=0.25, growth_interval=1),
        dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=5),
    ]
    for kwargs in settings:
        for found_infs in patterns:
            want = _gradscaler_trace(found_infs, 1024.0, **kwargs)
            scale, tracker = 1024.0, 0
            for i, inf in enumerate(found_infs):
                scale, tracker = answers.update_scale(scale, tracker, inf, **kwargs)
                assert (scale, tracker) == want[i], (
                    f"with {kwargs}, after the steps {['inf' if f else 'ok' for f in found_infs[: i + 1]]} "
                    f"GradScaler has (scale, tracker) = {want[i]}, you have {(scale, tracker)}"
                )


def _warmup(step: int) -> float:
    return (step + 1) / 10


@pytest.mark.exercise("4.3", points=3)
def test_schedule_does_not_move_on_a_skipped_step(answers):
    layer = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup)
    # growth_interval=2: the third and sixth steps are the second clean step in a row, and grow the scale
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    x = torch.ones(2, 4)
    for inf in (True, False, False, True, False, False):
        before = [p.detach().clone() for p in layer.parameters()]
        lr, epoch, scale = optimizer.param_groups[0]["lr"], scheduler.last_epoch, scaler.get_scale()
        optimizer.zero_grad()
        scaler.scale(layer(x).sum() * (math.inf if inf else 1.0)).backward()
        skipped = answers.step_unless_skipped(optimizer, scheduler, scaler)
        moved = any(not torch.equal(p, b) for p, b in zip(layer.parameters(), before))
        grew = scaler.get_scale() > scale
        what = "had inf gradients" if inf else "was clean" + (" and grew the scale" if grew else "")
        assert skipped is inf, f"the step {what}: return skipped={inf}" + (
            " (a skipped step lowers the scale; one that grows it was taken)" if grew else ""
        )
        assert moved is not inf, "step the optimizer through the scaler: scaler.step(optimizer)"
        if inf:
            assert scheduler.last_epoch == epoch and optimizer.param_groups[0]["lr"] == lr, (
                "the learning-rate schedule advanced on a skipped step: step the scheduler only when the "
                "optimizer really stepped"
            )
        else:
            assert scheduler.last_epoch == epoch + 1, (
                f"the step {what}: advance the schedule after a real step (scheduler.step())"
            )
    assert scaler.get_scale() == 1024.0, "call scaler.update() after each step: two backoffs and two growths"


def _overflow_watched(answers, **kwargs):
    """In the worker: fp16_overflow_experiment(**kwargs), watching the optimizer's steps and the models' inputs."""
    with optimizer_steps() as steps, model_inputs() as inputs:
        rows = answers.fp16_overflow_experiment(**kwargs)
    return {"rows": rows, "steps": steps, "inputs": inputs}


@pytest.mark.exercise("4.4", points=2)
def test_overflow_experiment_shows_the_scaler_backing_off(answers, token_data):
    settings = dict(lr=3e-3, preset="tiny", batch=2, ctx=16, device="cpu", data=token_data)
    seen = answers.run(_overflow_watched, steps=3, init_scale=2.0**32, **settings)
    rows, optimizer_steps = seen["rows"], seen["steps"]
    assert [r["step"] for r in rows] == [1, 2, 3], "one row per step, numbered from 1"
    # 2**32 times a gradient of 1/32 (the loss is a mean over 32 tokens) is far above fp16's 65504.
    assert [r["scale"] for r in rows] == [2.0**32, 2.0**31, 2.0**30] and all(r["skipped"] for r in rows), (
        f"a scale of 2**32 overflows fp16: each step is skipped and the scale halves; got {rows}"
    )
    assert not optimizer_steps, (
        f"the optimizer stepped {len(optimizer_steps)} times on 3 steps with inf gradients, expected 0: step "
        f"through the scaler (scaler.step(optimizer)), which skips them"
    )
    # ctx=16 is below the tiny preset's 64: every batch is (batch, ctx) as asked
    assert seen["inputs"] and set(seen["inputs"]) == {(2, 16)}, (
        f"the model saw batches of shape {sorted(set(seen['inputs']))}, expected (batch, ctx) = (2, 16): draw "
        f"them with the ctx you are given, not the model's maximum"
    )
    seen = answers.run(_overflow_watched, steps=2, init_scale=2.0**10, **settings)
    rows, optimizer_steps = seen["rows"], seen["steps"]
    assert [r["skipped"] for r in rows] == [False, False] and {r["scale"] for r in rows} == {2.0**10}, (
        f"a scale of 1024 does not overflow: no step is skipped and the scale stays until 2000 clean steps; got {rows}"
    )
    assert all(isinstance(r["loss"], float) for r in rows), "each row's loss is a Python float (loss.item())"
    assert all(math.isfinite(r["loss"]) for r in rows), "the losses must stay finite: the scaler protects the weights"
    # The true gradient norm of these two steps is about 2.3 > 1, so clipping to 1.0 is active: AdamW must
    # receive unscaled gradients of norm 1. clip_grad_norm_ multiplies by 1 / (norm + 1e-6), and the norm
    # recomputed here differs by fp32 rounding (~1e-6 relative): 1e-4 is far from both mistakes, no
    # clipping (about 2.3) and clipping the scaled gradients (about 1 / 1024).
    norms = [s["grad_norm"] for s in optimizer_steps]
    assert len(norms) == 2 and all(n == pytest.approx(1.0, rel=1e-4) for n in norms), (
        f"AdamW received gradients of norm {[round(n, 6) for n in norms]}, expected 1.0 at each of the 2 steps "
        f"(the true norms are above 1): unscale (scaler.unscale_), then clip to 1.0, then step"
    )
    assert not any(s["on_leftover_gradients"] for s in optimizer_steps), (
        "the second step's backward added to the first step's gradients: zero the gradients after each step "
        "(optimizer.zero_grad())"
    )
