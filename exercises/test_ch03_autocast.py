"""Grades chapter 3: an autocast training step that keeps the loss in fp32, the precision comparison
and "why still fp32?"."""

import copy
import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from minigpt import memory
from minigpt.formats import update_is_lost
from minigpt.grading.watch import check_run_times, now, optimizer_steps, train_runs
from minigpt.model import GPT, get_config

CHAPTER = "ch03_autocast"
HINTS = {  # the hints of solutions/ch03_autocast.py, shown under a wrong answer
    "3.1": "forward under torch.autocast, loss from logits.float(), then backward/clip/step/zero_grad",
    "3.2": "one TrainConfig per precision, train(), time it, and read the result's summary",
    "3.3": "round the weights into the dtype, add the update in that dtype, count the unchanged",
}


def _step_watched(answers, model, optimizer, x, y, dtype, max_norm):
    """In the worker: the learner's step, watching the dtype of the logits, the dtype of every cross-entropy's
    input (whoever computes it) and the optimizer's steps."""
    logits_dtypes, loss_dtypes = [], []
    hook = model.lm_head.register_forward_hook(lambda m, i, out: logits_dtypes.append(out.dtype))
    real_cross_entropy = F.cross_entropy

    def spy(input, *args, **kwargs):
        loss_dtypes.append(input.dtype)
        return real_cross_entropy(input, *args, **kwargs)

    F.cross_entropy = spy
    try:
        with optimizer_steps() as steps:
            loss = answers.autocast_train_step(model, optimizer, x, y, dtype=dtype, max_norm=max_norm)
    finally:
        F.cross_entropy = real_cross_entropy
        hook.remove()
    return {"loss": loss, "logits_dtypes": logits_dtypes, "loss_dtypes": loss_dtypes, "steps": steps}


def _step(answers, cfg, dtype, max_norm=1.0):
    """Run the learner's step once; return (model before, model after, what the worker saw, the batch)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    before = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randint(0, cfg.vocab_size, (2, 2, cfg.ctx))
    seen = answers.run(_step_watched, model, optimizer, x, y, dtype, max_norm)
    return before, model, seen, (x, y)


@pytest.mark.exercise("3.1", points=2)
def test_forward_in_16_bits_loss_in_fp32(answers, small_cfg):
    for dtype in (torch.bfloat16, torch.float16):
        _, _, seen, _ = _step(answers, small_cfg, dtype)
        loss, logits_dtypes, loss_dtypes = seen["loss"], seen["logits_dtypes"], seen["loss_dtypes"]
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
def test_weights_stay_fp32_and_take_a_step(answers, small_cfg):
    torch.manual_seed(0)
    model = GPT(small_cfg)
    x, y = torch.randint(0, small_cfg.vocab_size, (2, 2, small_cfg.ctx))
    model(x, y)[1].backward()
    max_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item() / 10  # clipping is active
    before, after, seen, (x, y) = _step(answers, small_cfg, torch.bfloat16, max_norm=max_norm)
    loss, optimizer_steps = seen["loss"], seen["steps"]
    assert len(optimizer_steps) == 1, f"{len(optimizer_steps)} optimizer steps, expected 1"
    # bf16 moves the gradient norm by about 1%, but clipping then sets it to max_norm exactly (up to the
    # 1e-6 clip_grad_norm_ adds to the norm, and fp32 rounding of its recomputation): 1e-3 relative.
    got = optimizer_steps[0]["grad_norm"]
    assert got == pytest.approx(max_norm, rel=1e-3), (
        f"with max_norm={max_norm:.4g} the optimizer stepped with gradients of norm {got:.4g}: clip the gradient "
        f"norm after backward and before optimizer.step()"
    )
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad, (
        "return the loss detached (loss.detach()): the graph is not needed any more"
    )
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


def _overflowing_grad_scaler(monkeypatch):
    """Every GradScaler built with the default init_scale starts at 2**40: the fp16 run's steps overflow and are
    skipped, so a skipped_steps that is not read from the run shows."""
    init = torch.amp.GradScaler.__init__
    names = list(inspect.signature(init).parameters)[-len(init.__defaults__) :]
    defaults = dict(zip(names, init.__defaults__))
    defaults["init_scale"] = 2.0**40
    monkeypatch.setattr(init, "__defaults__", tuple(defaults.values()))


def _compare_watched(answers, **kwargs):
    """In the worker: compare_precisions(**kwargs) with overflowing GradScalers, watching each training run."""
    with pytest.MonkeyPatch.context() as monkeypatch, train_runs(answers) as runs:
        _overflowing_grad_scaler(monkeypatch)
        called = now()
        rows = answers.compare_precisions(**kwargs)
        returned = now()
    return {"rows": rows, "runs": runs, "called": called, "returned": returned}


@pytest.mark.exercise("3.2", points=3)
def test_compare_precisions_table(answers, token_data):
    precisions = ("fp32", "bf16", "fp16")
    seen = answers.run(
        _compare_watched, preset="tiny", precisions=precisions, steps=2, batch=4, ctx=32, device="cpu", data=token_data
    )
    rows, train_runs = seen["rows"], seen["runs"]
    assert [r["precision"] for r in rows] == list(precisions), "one row per precision, in the order given"
    keys = {"precision", "seconds", "final_loss", "predicted_peak_bytes", "measured_peak_bytes", "skipped_steps"}
    for r in rows:
        assert keys <= set(r), f"row {r} lacks {keys - set(r)}"
        assert r["seconds"] > 0 and math.isfinite(r["final_loss"]), f"bad time or loss in {r}"
        # batch 4 and ctx 32 (below the preset's 64): a size at which the three precisions' peaks differ
        want = memory.estimate(get_config("tiny"), 4, 32, r["precision"], device="cpu").peak
        assert r["predicted_peak_bytes"] == want, f"{r['precision']}: predicted peak should be estimate(...).peak"
        assert r["measured_peak_bytes"] is None, "a CPU has no peak-memory counter: report None"
    assert len(train_runs) == len(rows), f"{len(train_runs)} calls of minigpt.train.train for {len(rows)} rows"
    for r, run in zip(rows, train_runs):
        assert (run["precision"], run["steps"], run["batch"], run["ctx"]) == (r["precision"], 2, 4, 32), (
            f"the run for {r['precision']} trained with precision={run['precision']}, steps={run['steps']}, "
            f"batch={run['batch']}, ctx={run['ctx']}; expected {r['precision']}, 2, 4, 32"
        )
        # The row reports that run: read exactly.
        assert r["final_loss"] == run["losses"][-1], (
            f"{r['precision']}: final_loss {r['final_loss']!r}, but the run's losses were {run['losses']}: report "
            f"the last one (result.losses[-1])"
        )
        assert r["skipped_steps"] == run["skipped_steps"], (
            f"{r['precision']}: skipped_steps {r['skipped_steps']}, but the run skipped {run['skipped_steps']} "
            f"steps (result.skipped_steps)"
        )
    check_run_times(rows, seen, "precision")
    assert train_runs[2]["skipped_steps"] == 2, "this test's GradScaler of 2**40 should overflow both steps"
    # Same seed, same batches, two steps from the same init: bf16 matmuls move the loss by far less than
    # 0.05 nats (the loss is about ln(8192) = 9 here; a step moves it by about 0.09).
    fp32, bf16 = rows[0]["final_loss"], rows[1]["final_loss"]
    assert abs(bf16 - fp32) < 0.05, f"the bf16 run's final loss {bf16:.4f} vs fp32's {fp32:.4f}: more than 0.05 apart"


@pytest.mark.exercise("3.3", points=2)
def test_lost_update_fraction(answers):
    weights = torch.randn(20_000, generator=torch.Generator().manual_seed(0)) * 0.02  # like GPT's init
    original = weights.clone()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for update in (1e-6, 1e-5, 1e-4, 1e-3):
            got = answers.lost_update_fraction(weights, update, dtype)
            assert torch.equal(weights, original), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) changed the caller's weights: work on a copy "
                f"(weights.to(dtype) is the same tensor when the dtype already matches)"
            )
            assert isinstance(got, float), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) returned {got!r}: return a Python float "
                f"(.item()), not a tensor"
            )
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
